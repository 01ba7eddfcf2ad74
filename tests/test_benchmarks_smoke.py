"""The benchmark suite keeps working: its smoke size runs every scenario end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    NODE_22,
    REPO_ROOT,
    forked_script,
    guard_command,
    guard_notes,
    node_environment,
    open_stdio_session,
    texts,
)

BENCHMARK_FIXTURE = forked_script(REPO_ROOT / "benchmarks" / "fixture_server.py")
"""The benchmarks' fixture server, a fork of the fork server (see fork_server.py)."""
valgrind_runs_here = pytest.mark.skipif(
    sys.platform == "darwin",
    reason="valgrind does not run on current macOS (its last supported release is 10.13; none on Apple silicon)",
)
"""The instruction counts need valgrind, which exists for Linux only."""
NODE_ENVIRONMENT = os.environ | node_environment()
"""server-everything (``#!/usr/bin/env node``) on the Node the tests run it on, with its compile cache: the
smoke run starts it a dozen times, and its numbers mean nothing."""
if NODE_22.exists():
    NODE_ENVIRONMENT["PATH"] = f"{NODE_22.parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_benchmark(module: str, *args: str, timeout: float = 120) -> str:
    """``python -m benchmarks.<module> --size smoke ARGS`` from the repository root; its stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--size", "smoke", *args],
        cwd=REPO_ROOT,
        env=NODE_ENVIRONMENT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.e2e
def test_benchmark_smoke_run(tmp_path: Path) -> None:
    """`python -m benchmarks.run --size smoke` exits 0 and writes a result for every scenario it ran."""
    out = tmp_path / "smoke.json"
    run_benchmark("run", "--out", str(out), timeout=300)
    results = json.loads(out.read_text())
    scenarios = {row.get("scenario") for row in results["rows"]}
    assert {"stdio", "remote", "fingerprint", "memory"} <= scenarios, scenarios
    unjudged = [row for row in results["rows"] if row["via"].endswith(", judging off") and not row.get("skipped")]
    assert {row["case"] for row in unjudged} >= {"echo · fixture"}, unjudged
    assert all(row["values"]["cpu_ms"] > 0 for row in unjudged), unjudged


@pytest.mark.e2e
@pytest.mark.anyio
@pytest.mark.parametrize("unjudged", [False, True], ids=["guard", "judging-off"])
async def test_the_judging_off_row_runs_the_relay_with_no_call_judged(
    tmp_path: Path, process_marker: str, *, unjudged: bool
) -> None:
    """The benchmark's "judging off" guard relays calls intact and judges none: the loop the guard refuses goes by."""
    if unjudged:
        command = [sys.executable, str(REPO_ROOT / "benchmarks" / "unjudged_guard.py"), "--", *BENCHMARK_FIXTURE]
    else:
        command = guard_command(BENCHMARK_FIXTURE)
    env = {"LOOP_GUARD_STATE": "memory"}
    async with open_stdio_session(command, marker=process_marker, stderr=tmp_path / "stderr.log", env=env) as opened:
        results = [await opened.session.call_tool("echo", {"text": "same"}) for _ in range(6)]
    if unjudged:
        assert [(r.is_error, texts(r), guard_notes(r)) for r in results] == [(False, ["same"], [])] * 6
    else:
        assert [r.is_error for r in results] == [False] * 4 + [True] * 2


@pytest.mark.e2e
def test_store_cost_smoke_run() -> None:
    """`python -m benchmarks.store_cost --size smoke` times every store and sizes the state, in seconds."""
    stdout = run_benchmark("store_cost", "--only", "cost", "--only", "size")
    rows = {line.split("│")[1].strip() for line in stdout.splitlines() if line.count("│") > 2}
    assert {"detector alone", "memory", "sqlite", "sqlite-held", "redis", "1,000", "largest on the way"} <= rows, stdout


@valgrind_runs_here
def test_instruction_count_smoke_run() -> None:
    """`python -m benchmarks.instructions --size smoke` counts the instructions of a judged call."""
    stdout = run_benchmark("instructions")
    cells = [line.split("│") for line in stdout.splitlines() if line.count("│") == 4]
    rows = {row[1].strip(): row[2].strip() for row in cells}
    count = int(rows["parse and judge a small call, in all"].replace(",", ""))
    assert 50_000 < count < 2_000_000, stdout  # a count of the loop, not of start-up or of nothing


@valgrind_runs_here
def test_process_instruction_count_smoke_run() -> None:
    """`python -m benchmarks.process_instructions --size smoke` counts a whole relay process per call.

    Only the byte relay: a guard's start-up under valgrind takes half a minute of CPU, and the
    guard rows run the same client and count over another command.
    """
    stdout = run_benchmark("process_instructions", "--only", "byte relay", timeout=300)
    cells = [line.split("│") for line in stdout.splitlines() if line.count("│") == 3]
    rows = {row[1].strip(): row[2].strip() for row in cells}
    count = float(rows["byte relay"].replace(",", ""))
    assert 5_000 < count < 1_000_000, stdout  # per call: neither start-up nor nothing


def _loop_left(without: str | None) -> dict[str, Any]:
    """What the instruction count's loop left after 30 calls, with ``without`` taken out (in a process of its own)."""
    command = [sys.executable, "-m", "benchmarks.instructions", "--loop", "30", "--summary"]
    command += ["--without", without] if without is not None else []
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]  # every call allowed, its answer unchanged
    left: dict[str, Any] = json.loads(done.stdout)
    return left


def test_each_part_taken_out_of_the_counted_loop_is_gone_and_the_rest_still_runs() -> None:
    """Each part the count takes out is missing from its loop, and only it: every call is still judged and allowed."""
    whole = _loop_left(None)
    assert whole["writes"] >= 30, whole
    assert len(whole["sequence"]) > 1, whole
    assert len(set(whole["sequence"])) == len(whole["sequence"]), whole  # distinct calls: nothing repeated
    assert _loop_left("state write")["writes"] == 0
    unfingerprinted = _loop_left("fingerprints")
    assert unfingerprinted["writes"] >= 30, unfingerprinted
    assert set(unfingerprinted["sequence"]).isdisjoint(whole["sequence"]), unfingerprinted  # stand-in keys
    undetected = _loop_left("detector")
    assert (undetected["sequence"], undetected["writes"] >= 30) == ([], True), undetected


def test_cold_cost_smoke_run() -> None:
    """`python -m benchmarks.cold_cost --size smoke` times every step three ways."""
    stdout = run_benchmark("cold_cost")
    rows = [line.split("│") for line in stdout.splitlines() if line.count("│") == 6]
    steps = {row[1].strip(): row[2:5] for row in rows}
    expected = {"call fingerprint (call_of)", "result fingerprint (outcome_of)", "empty function"}
    assert expected <= set(steps), stdout
    assert all(float(cell) > 0 for cells in steps.values() for cell in cells), stdout
