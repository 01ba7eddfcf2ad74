"""The issue's performance targets, judged on one run's rows.

Every ratio compares numbers measured in the same run, interleaved; absolute
times would drift with whatever else the machine is doing.
"""

from __future__ import annotations

import math

from benchmarks.results import DIRECT, FASTMCP, HASH_FLOOR, RELAY, Check, Report, Row

STDIO_SMALL_VS_DIRECT = 1.5
STDIO_SMALL_VS_RELAY = 0.15
"""At most this much above the byte relay's own ratio to direct."""
STDIO_SMALL_VS_FASTMCP = 0.4
STDIO_LARGE_VS_DIRECT = 1.2
HTTP_THROUGHPUT_VS_DIRECT = 0.8
GUARD_CPU_MS = 0.3
"""The guard's own CPU per small call (unprofiled: the stdio table's own-CPU column)."""
GUARD_RSS_MB = 40.0
STARTUP_DELTA_MS = 150.0
FINGERPRINT_GB_S = 1.0
DETECTOR_BYTES = 2048


def _judge(goal: str, value: float, met: bool, shown: str) -> Check:
    """A check, or "not measured" when ``value`` is NaN (whatever ``met`` says then)."""
    if math.isnan(value):
        return Check(goal, "not measured", None)
    return Check(goal, shown, met)


def _first(report: Report, scenario: str, via: str, prefix: str = "") -> Row | None:
    for row in report.rows:
        if row.scenario == scenario and row.via == via and row.case.startswith(prefix) and row.skipped is None:
            return row
    return None


def evaluate(report: Report, guard: str) -> list[Check]:
    """One check per target and case, for the guard revision labelled ``guard``."""
    checks: list[Check] = []
    for case in sorted({row.case for row in report.rows if row.scenario == "stdio"}):
        row = report.find("stdio", case, guard)
        x_direct = row.get("x_p50") if row else math.nan
        limit = STDIO_SMALL_VS_DIRECT if case.startswith("echo") else STDIO_LARGE_VS_DIRECT
        checks.append(_judge(f"stdio {case}: p50 <= {limit}x direct", x_direct, x_direct <= limit, f"{x_direct:.2f}x"))
        if case.startswith("echo"):
            relay = report.find("stdio", case, RELAY)
            above = x_direct - relay.get("x_p50") if relay else math.nan
            goal = f"stdio {case}: within {STDIO_SMALL_VS_RELAY}x of the byte relay"
            checks.append(_judge(goal, above, above <= STDIO_SMALL_VS_RELAY, f"{above:+.2f}x"))
            cpu = row.get("cpu_ms") if row else math.nan
            goal = f"stdio {case}: guard CPU <= {GUARD_CPU_MS} ms per call"
            checks.append(_judge(goal, cpu, cpu <= GUARD_CPU_MS, f"{cpu:.3f} ms"))
            peer = report.find("stdio", case, FASTMCP)
            x_peer = row.get("p50_ms") / peer.get("p50_ms") if row and peer else math.nan
            goal = f"stdio {case}: p50 <= {STDIO_SMALL_VS_FASTMCP}x FastMCP's proxy"
            checks.append(_judge(goal, x_peer, x_peer <= STDIO_SMALL_VS_FASTMCP, f"{x_peer:.2f}x"))
    started = _first(report, "startup", guard)
    delta = started.get("start_delta_ms") if started else math.nan
    goal = f"start-up: spawn to initialize <= +{STARTUP_DELTA_MS:.0f} ms over direct"
    checks.append(_judge(goal, delta, delta <= STARTUP_DELTA_MS, f"{delta:+.0f} ms"))
    rss = started.get("rss_mb") if started else math.nan
    goal = f"resident memory of a stdio guard after initialize <= {GUARD_RSS_MB:.0f} MB"
    checks.append(_judge(goal, rss, rss <= GUARD_RSS_MB, f"{rss:.1f} MB"))
    http, direct = _first(report, "http", guard), _first(report, "http", DIRECT)
    x_rate = http.get("x_calls_s") if http and direct else math.nan
    goal = f"http: calls/s >= {HTTP_THROUGHPUT_VS_DIRECT}x direct"
    checks.append(_judge(goal, x_rate, x_rate >= HTTP_THROUGHPUT_VS_DIRECT, f"{x_rate:.2f}x"))
    text, floor = (
        _first(report, "fingerprint", "result_key", "text"),
        _first(report, "fingerprint", HASH_FLOOR, "text"),
    )
    gb_s = text.get("gb_s") if text else math.nan
    goal = f"fingerprint text: >= {FINGERPRINT_GB_S} GB/s"
    shown = f"{gb_s:.2f} GB/s median"
    if text and floor:
        best = text.get("mb") / text.get("best_ms")
        shown += f" (best {best:.2f}; XXH3 alone: {floor.get('gb_s'):.2f} median)"
    checks.append(_judge(goal, gb_s, gb_s >= FINGERPRINT_GB_S, shown))
    goal = f"detector: < {DETECTOR_BYTES} B per session, flat over calls"
    settled = [
        row
        for row in report.rows
        if row.scenario == "memory" and row.case.startswith("detector") and row.get("calls") >= 1000
    ]
    if not settled:
        checks.append(Check(goal, "not measured", None))
        return checks
    largest = max(row.get("bytes") for row in settled)
    grew = settled[-1].get("bytes") - settled[0].get("bytes")
    shown = f"{largest:,.0f} B, {grew:+,.0f} B from {settled[0].via} to {settled[-1].via}"
    checks.append(_judge(goal, largest, largest < DETECTOR_BYTES and grew <= 0, shown))
    return checks
