"""Served over streamable HTTP in front of the fixture server, the guard passes every server scenario of the suite."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.conformance.run_suite import (
    ConformanceReport,
    GuardUpstream,
    run_conformance,
    serving_fixture,
    serving_guard,
)
from tests.harness import MARKER_ENV, describe, marked_processes

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

SUITE_TIMEOUT = 120.0
"""Seconds one run of every scenario may take; it takes under 10 s here."""
GONE_WITHIN = 10.0
"""Seconds the fixture may take to exit once the guard has stopped."""


@pytest.fixture(scope="module")
def fixture_alone(server_scenarios: list[str], tmp_path_factory: pytest.TempPathFactory) -> ConformanceReport:
    """What the suite finds against the fixture on its own: the baseline the guard must match."""
    with serving_fixture() as url:
        report = run_conformance(url, "all", out_dir=tmp_path_factory.mktemp("fixture-alone"), timeout=SUITE_TIMEOUT)
    assert report.passed, report.summary()
    return report


def graded_checks(report: ConformanceReport) -> dict[str, list[tuple[str, str]]]:
    """Per scenario, the id and status of each graded check (INFO entries are traces), in the suite's order.

    Traces differ legitimately: the fixture numbers its SSE events for resumption and the
    guard's HTTP front door does not, so the suite logs one more INFO line for the fixture.
    """
    return {
        name: [(check.id, check.status) for check in report.scenarios[name].checks if check.status != "INFO"]
        for name in report.announced
    }


def survivors(marker: str, within: float) -> list[psutil.Process]:
    """The processes carrying the marker still alive after waiting up to `within` seconds."""
    deadline = time.monotonic() + within
    while (alive := marked_processes(marker)) and time.monotonic() < deadline:
        psutil.wait_procs(alive, timeout=0.1)
    return marked_processes(marker)


@pytest.mark.parametrize("upstream", ["stdio", "http"])
def test_guard_passes_every_server_scenario(
    upstream: GuardUpstream,
    server_scenarios: list[str],
    fixture_alone: ConformanceReport,
    tmp_path: Path,
    process_marker: str,
) -> None:
    """Through the guard (fixture as stdio or HTTP upstream) all scenarios pass, check for check as without it."""
    log = tmp_path / "guard.log"
    with (
        log.open("w", encoding="utf-8") as stderr,
        serving_guard(upstream, env={MARKER_ENV: process_marker}, stderr=stderr) as guard,
    ):
        report = run_conformance(guard.url, "all", out_dir=tmp_path / "results", timeout=SUITE_TIMEOUT)
    print(report.summary())
    guard_log = log.read_text(encoding="utf-8", errors="replace")
    context = f"{report.summary()}\n--- guard stderr (last 100 lines) ---\n" + "\n".join(guard_log.splitlines()[-100:])

    assert not report.timed_out, report.output
    assert sorted(report.announced) == sorted(server_scenarios), context
    assert report.failed_scenarios == [], context
    assert report.exit_code == 0, report.output
    baseline = graded_checks(fixture_alone)
    differing = {
        name: {"through the guard": checks, "fixture alone": baseline.get(name)}
        for name, checks in graded_checks(report).items()
        if checks != baseline.get(name)
    }
    assert differing == {}, context
    assert "Traceback" not in guard_log, context

    # The HTTP guard stops gracefully on SIGTERM and exits 128 + SIGTERM, as documented.
    assert guard.stopped_by_sigterm, "the guard had to be killed"
    assert guard.process.returncode == 128 + signal.SIGTERM, context
    left = survivors(process_marker, GONE_WITHIN)
    assert left == [], describe(left)
