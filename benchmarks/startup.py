"""Scenario: start-up over stdio and resident memory after ``initialize``.

A client that starts a server waits from spawning it to the answer to ``initialize``; some
give up after a few seconds and the model's first turn has none of the server's tools. Each
round spawns every target in turn (direct, then through each guard revision) with the SDK's
stdio client, times spawn to ``initialize`` answered, and reads the resident memory of the
process the client started (the guard itself, or the server when direct), then stops it.
The upstream is ``mcp-server-time`` (a Python server from PyPI), as a user would wrap it.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from benchmarks.processes import BenchmarkError, Via, child_pids, new_child
from benchmarks.results import DIRECT, Row
from benchmarks.stats import summarize

SCENARIO = "startup"
START_SECONDS = 60.0


def time_server_command() -> list[str] | None:
    """``mcp-server-time`` from this interpreter's environment, or None when it is not installed."""
    found = Path(sys.executable).with_name("mcp-server-time")
    if found.exists():
        return [str(found)]
    on_path = shutil.which("mcp-server-time")
    return [on_path] if on_path else None


async def _once(via: Via, errlog: TextIO) -> tuple[float, float]:
    """Seconds from spawn to ``initialize`` answered, and the started process's RSS (MB) then."""
    before = child_pids()
    params = StdioServerParameters(command=via.argv[0], args=via.argv[1:], env=dict(via.env))
    started = time.perf_counter()
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        try:
            with anyio.fail_after(START_SECONDS):
                await session.initialize()
        except TimeoutError as exc:
            raise BenchmarkError(f"{via.name} did not initialize within {START_SECONDS:.0f} s") from exc
        elapsed = time.perf_counter() - started
        process = new_child(before)
        rss = process.memory_info().rss / 2**20 if process is not None else float("nan")
    return elapsed, rss


async def measure(vias: Sequence[Via], rounds: int, errlog: TextIO, advance: Callable[[int], None]) -> list[Row]:
    """``rounds`` start-ups of every target, interleaved; p50 start-up, its difference from direct, median RSS."""
    times: dict[str, list[float]] = {via.name: [] for via in vias}
    memory: dict[str, list[float]] = {via.name: [] for via in vias}
    for index in range(rounds):
        for via in vias if index % 2 == 0 else list(reversed(vias)):
            elapsed, rss = await _once(via, errlog)
            times[via.name].append(elapsed)
            memory[via.name].append(rss)
        advance(1)
    direct = summarize(times[DIRECT]).p50
    rows = []
    for via in vias:
        start = summarize(times[via.name]).p50
        values: dict[str, float | int | str] = {
            "n": rounds,
            "start_ms": start * 1e3,
            "start_delta_ms": (start - direct) * 1e3,
            "rss_mb": summarize(memory[via.name]).p50,
        }
        rows.append(Row(SCENARIO, "spawn to initialize · mcp-server-time", via.name, values, via.note))
    return rows
