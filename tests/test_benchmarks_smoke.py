"""The benchmark suite keeps working: its smoke size runs every scenario end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT


@pytest.mark.e2e
def test_benchmark_smoke_run(tmp_path: Path) -> None:
    """`python -m benchmarks.run --size smoke` exits 0 and writes a result for every scenario it ran."""
    out = tmp_path / "smoke.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--size", "smoke", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    scenarios = {row.get("scenario") for row in results["rows"]}
    assert {"stdio", "remote", "fingerprint", "memory"} <= scenarios, scenarios


@pytest.mark.e2e
def test_store_cost_smoke_run() -> None:
    """`python -m benchmarks.store_cost --size smoke` times every store and sizes the state, in seconds."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.store_cost", "--size", "smoke", "--only", "cost", "--only", "size"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split("│")[1].strip() for line in done.stdout.splitlines() if line.count("│") > 2}
    assert {"detector alone", "memory", "sqlite", "sqlite-held", "redis", "1,000", "largest on the way"} <= rows, (
        done.stdout
    )


def test_cold_cost_smoke_run() -> None:
    """`python -m benchmarks.cold_cost --size smoke` times every step three ways."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cold_cost", "--size", "smoke"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split("│") for line in done.stdout.splitlines() if line.count("│") == 6]
    steps = {row[1].strip(): row[2:5] for row in rows}
    expected = {"call fingerprint (call_of)", "result fingerprint (outcome_of)", "empty function"}
    assert expected <= set(steps), done.stdout
    assert all(float(cell) > 0 for cells in steps.values() for cell in cells), done.stdout
