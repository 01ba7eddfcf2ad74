"""The benchmark suite keeps working: its smoke size runs every scenario end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT


def run_benchmark(module: str, *args: str, timeout: float = 120) -> str:
    """``python -m benchmarks.<module> --size smoke ARGS`` from the repository root; its stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--size", "smoke", *args],
        cwd=REPO_ROOT,
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


@pytest.mark.e2e
def test_store_cost_smoke_run() -> None:
    """`python -m benchmarks.store_cost --size smoke` times every store and sizes the state, in seconds."""
    stdout = run_benchmark("store_cost", "--only", "cost", "--only", "size")
    rows = {line.split("│")[1].strip() for line in stdout.splitlines() if line.count("│") > 2}
    assert {"detector alone", "memory", "sqlite", "sqlite-held", "redis", "1,000", "largest on the way"} <= rows, stdout


def test_cold_cost_smoke_run() -> None:
    """`python -m benchmarks.cold_cost --size smoke` times every step three ways."""
    stdout = run_benchmark("cold_cost")
    rows = [line.split("│") for line in stdout.splitlines() if line.count("│") == 6]
    steps = {row[1].strip(): row[2:5] for row in rows}
    expected = {"call fingerprint (call_of)", "result fingerprint (outcome_of)", "empty function"}
    assert expected <= set(steps), stdout
    assert all(float(cell) > 0 for cells in steps.values() for cell in cells), stdout
