"""How long a stdio guard takes to go away: from stdin EOF, SIGTERM or SIGINT to it and its upstream both gone.

The guard runs as ``python -m mcp_loop_guard -- UPSTREAM`` with pipes, is initialized with a
raw handshake (which reaches the upstream, so both are fully up), then stopped; the time is
taken until the guard has exited and its upstream's pid no longer runs, polled every
millisecond. The upstream alone, its stdin closed (``direct``), is the floor.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from benchmarks.processes import REPO_ROOT, BenchmarkError

HOWS = ("stdin EOF", "SIGTERM", "SIGINT")
LIMIT = 30.0
"""Seconds any one step may take."""

COUNTING = [sys.executable, str(REPO_ROOT / "tests" / "fixtures" / "counting_server.py")]
TIME_SERVER = [str(Path(sys.executable).parent / "mcp-server-time"), "--local-timezone", "UTC"]


def _initialize(process: subprocess.Popen[bytes]) -> None:
    """The 2025-11-25 handshake, raw; returns once the answer came back."""
    assert process.stdin is not None
    assert process.stdout is not None
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
    process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode())
    process.stdin.write(b"\n")
    process.stdin.flush()
    deadline = time.monotonic() + LIMIT
    while True:
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise BenchmarkError("no answer to initialize")
        line = process.stdout.readline()
        if not line:
            raise BenchmarkError(f"stdout closed before initialize was answered (status {process.poll()})")
        if json.loads(line).get("id") == 1:
            break
    process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    process.stdin.flush()


def _gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def one_stop(argv: Sequence[str], how: str, env: dict[str, str], *, guarded: bool) -> float:
    """Seconds from the stop to every process of the run gone."""
    process = subprocess.Popen(
        list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        _initialize(process)
        root = psutil.Process(process.pid)
        family = [root, *root.children(recursive=True)]
        if guarded and len(family) < 2:
            raise BenchmarkError(f"the guard has no upstream running: {[p.pid for p in family]}")
        started = time.perf_counter()
        if how == "stdin EOF":
            assert process.stdin is not None
            process.stdin.close()
        else:
            process.send_signal(signal.Signals[how])
        deadline = started + LIMIT
        while process.poll() is None or not all(_gone(member) for member in family):
            if time.perf_counter() > deadline:
                raise BenchmarkError(f"still running {LIMIT:.0f} s after {how}")
            time.sleep(0.001)
        return time.perf_counter() - started
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        for stream in (process.stdin, process.stdout):
            if stream is not None and not stream.closed:
                stream.close()


def measure_shutdown(runs: int) -> dict[tuple[str, str, str], list[float]]:
    """Seconds per (upstream, via, how), ``runs`` each, ways of stopping taken in turns."""
    upstreams = {"counting fixture": COUNTING, "mcp-server-time": TIME_SERVER}
    results: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="mcp-loop-guard-shutdown-") as state_home:
        env = {**os.environ, "XDG_STATE_HOME": state_home, "PYTHONUNBUFFERED": "1"}
        for name, upstream in upstreams.items():
            if not Path(upstream[0]).exists():
                continue
            guard = [sys.executable, "-m", "mcp_loop_guard", "--", *upstream]
            for _ in range(runs):
                # The floor: the upstream alone, closing its stdin (a signal's effect on it is its own affair).
                results.setdefault((name, "direct", "stdin EOF"), []).append(
                    one_stop(upstream, "stdin EOF", env, guarded=False)
                )
                for how in HOWS:
                    results.setdefault((name, "guard", how), []).append(one_stop(guard, how, env, guarded=True))
    return results
