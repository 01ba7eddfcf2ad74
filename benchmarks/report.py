"""Render a run as rich tables on the terminal, or as Markdown for the README."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.results import Report, Row

TITLES = {
    "stdio": "stdio round trip: sequential tools/call on one warm session",
    "remote": "stdio guard in front of an HTTP server (--upstream URL): sequential tools/call, "
    "against the SDK client over streamable HTTP directly",
    "http": "streamable HTTP: concurrent sessions, sequential calls each",
    "fingerprint": "fingerprint throughput: result_key on large results",
    "memory": "memory: detector state per session; resident memory with idle HTTP sessions",
    "startup": "start-up: spawn to initialize answered over stdio (and resident memory then); to /readyz over HTTP",
}

COLUMNS: dict[str, tuple[str, str]] = {
    "n": ("n", "{:,.0f}"),
    "calls": ("calls", "{:,.0f}"),
    "sessions": ("sessions", "{:,.0f}"),
    "calls_s": ("calls/s", "{:,.0f}"),
    "x_calls_s": ("calls/s ÷ direct", "{:.2f}x"),
    "p50_ms": ("p50 ms", "{:.3f}"),
    "p99_ms": ("p99 ms", "{:.3f}"),
    "x_p50": ("p50 ÷ direct", "{:.2f}x"),
    "x_p99": ("p99 ÷ direct", "{:.2f}x"),
    "cpu_ms": ("own CPU ms/call", "{:.3f}"),
    "client_cpu_pct": ("client CPU %", "{:.0f}"),
    "mb": ("MB", "{:g}"),
    "best_ms": ("best ms", "{:.2f}"),
    "gb_s": ("GB/s", "{:.2f}"),
    "bytes": ("bytes", "{:,.0f}"),
    "us_per_call": ("µs/call", "{:.1f}"),
    "rss_before_mb": ("RSS before MB", "{:.1f}"),
    "rss_mb": ("RSS MB", "{:.1f}"),
    "kb_per_session": ("KB/session", "{:.1f}"),
    "keys": ("keys", "{:,.0f}"),
    "kb_per_key": ("KB/key", "{:.1f}"),
    "start_ms": ("start p50 ms", "{:.0f}"),
    "start_delta_ms": ("minus direct ms", "{:+.0f}"),
    "ready_cpu_ms": ("CPU to ready ms", "{:.0f}"),
}


def _cell(row: Row, key: str) -> str:
    value = row.values.get(key)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return COLUMNS[key][1].format(value) if isinstance(value, int | float) else str(value)


def _grid(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of one scenario: case, via, the values any row has, note.

    Rows are grouped by case, in order of first appearance, skipped rows last in each group.
    """
    cases = list(dict.fromkeys(row.case for row in rows))
    rows = sorted(rows, key=lambda row: (cases.index(row.case), row.skipped is not None))
    keys = [key for key in COLUMNS if any(key in row.values for row in rows)]
    headers = ["case", "via", *(COLUMNS[key][0] for key in keys), "note"]
    cells = [
        [row.case, row.via, *(_cell(row, key) for key in keys), f"skipped: {row.skipped}" if row.skipped else row.note]
        for row in rows
    ]
    return headers, cells


def _scenarios(report: Report) -> list[str]:
    return list(dict.fromkeys(row.scenario for row in report.rows))


def print_report(report: Report, console: Console) -> None:
    """All tables: one per scenario, then the targets, then the profile summary."""
    for scenario in _scenarios(report):
        headers, cells = _grid([row for row in report.rows if row.scenario == scenario])
        table = Table(title=TITLES.get(scenario, scenario), title_justify="left")
        for header in headers:
            numeric = header not in {"case", "via", "note"}
            table.add_column(header, justify="right" if numeric else "left", overflow="fold")
        for line in cells:
            table.add_row(*line, style="dim" if line[-1].startswith("skipped") else None)
        console.print(table)
    checks = Table(title="targets", title_justify="left")
    for header in ("target", "measured", "met"):
        checks.add_column(header)
    for check in report.checks:
        met = {True: "[green]met[/]", False: "[red]missed[/]", None: "[dim]not measured[/]"}[check.met]
        checks.add_row(check.goal, check.measured, met)
    console.print(checks)
    for profile in report.profiles:
        console.print(_profile_table(profile))


def _profile_table(profile: dict[str, Any]) -> Table:
    table = Table(
        title=(
            f"where {profile['guard']} spends its time per forwarded call: {profile['case']}, "
            f"{profile['calls']:,} calls; cProfile: {profile['busy_us_per_call']:,.0f} µs busy per call, "
            "profiler overhead included"
        ),
        title_justify="left",
    )
    for header in ("component / function", "µs/call", "share", "calls/call"):
        table.add_column(header, justify="left" if header.startswith("component") else "right")
    for item in profile["by_component"][:10]:
        table.add_row(item["component"], f"{item['us_per_call']:.1f}", f"{item['share']:.0%}", "")
    table.add_section()
    for item in profile["top_functions"]:
        table.add_row(
            item["function"], f"{item['us_per_call']:.1f}", f"{item['share']:.0%}", f"{item['calls_per_call']:.1f}"
        )
    return table


def markdown(report: Report) -> str:
    """The scenario tables and the targets as GitHub Markdown."""
    lines: list[str] = []
    for scenario in _scenarios(report):
        headers, cells = _grid([row for row in report.rows if row.scenario == scenario])
        lines += [f"**{TITLES.get(scenario, scenario)}**", "", "| " + " | ".join(headers) + " |"]
        lines.append("|" + "|".join("---" if h in {"case", "via", "note"} else "---:" for h in headers) + "|")
        lines += ["| " + " | ".join(line) + " |" for line in cells]
        lines.append("")
    lines += ["**targets**", "", "| target | measured | met |", "|---|---|---|"]
    for check in report.checks:
        met = {True: "met", False: "**missed**", None: "not measured"}[check.met]
        lines.append(f"| {check.goal} | {check.measured} | {met} |")
    return "\n".join(lines) + "\n"
