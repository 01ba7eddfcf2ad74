"""Scenario: start-up over stdio and resident memory after ``initialize``; an HTTP guard's start-up.

A client that starts a server waits from spawning it to the answer to ``initialize``; some
give up after a few seconds and the model's first turn has none of the server's tools. Each
round spawns every target in turn (direct, then through each guard revision) with the SDK's
stdio client, times spawn to ``initialize`` answered, and reads the resident memory of the
process the client started (the guard itself, or the server when direct), then stops it.
The upstream is ``mcp-server-time`` (a Python server from PyPI), as a user would wrap it.

The same server behind an HTTP guard (``--transport http -- mcp-server-time``, as in a
container), and an HTTP guard in front of server-everything over HTTP (``--upstream URL``,
started once): spawn to ``/readyz`` answering 200, each guard revision in turn, with the
guard process's resident memory and the CPU it used by then (its child's not counted:
readiness waits on the child's own start, which the guard cannot make shorter).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TextIO

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from benchmarks.processes import BenchmarkError, Via, background_server, child_pids, free_port, new_child
from benchmarks.results import DIRECT, Row
from benchmarks.stats import summarize

SCENARIO = "startup"
START_SECONDS = 60.0
HTTP_CASE = "spawn to /readyz · HTTP guard, mcp-server-time over stdio"
RELAY_CASE = "spawn to /readyz · HTTP guard, server-everything over HTTP"


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


async def _ready(port: int) -> bool:
    """Whether ``/readyz`` answers 200 (every upstream connected)."""
    request = f"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        answer = b""
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError):
            while b"\r\n" not in answer:
                answer += await stream.receive()
    return answer.startswith(b"HTTP/1.1 200")


async def _ready_once(via: Via, port: int, errlog: TextIO) -> tuple[float, float, float]:
    """Seconds from spawning an HTTP guard to its ``/readyz`` answering 200; its RSS (MB) and CPU seconds then."""
    started = time.perf_counter()
    async with background_server(via.argv, port, errlog, via.env, startup_seconds=START_SECONDS) as guard:
        with anyio.fail_after(START_SECONDS):
            while not await _ready(port):  # noqa: ASYNC110 - readiness is asked over HTTP, nothing to wait on
                await anyio.sleep(0.01)
        elapsed = time.perf_counter() - started
        cpu = guard.cpu_times()
        return elapsed, guard.memory_info().rss / 2**20, cpu.user + cpu.system


async def measure_http(
    vias: Sequence[Callable[[int], Via]], rounds: int, errlog: TextIO, case: str = HTTP_CASE
) -> list[Row]:
    """``rounds`` start-ups of every HTTP guard (``vias``: its command for a port), interleaved; p50 to ready."""
    samples: dict[str, list[tuple[float, float, float]]] = {}
    for index in range(rounds):
        for make in vias if index % 2 == 0 else list(reversed(vias)):
            port = free_port()
            via = make(port)
            samples.setdefault(via.name, []).append(await _ready_once(via, port, errlog))
    rows = []
    for name, taken in samples.items():
        values: dict[str, float | int | str] = {
            "n": rounds,
            "start_ms": summarize([elapsed for elapsed, _, _ in taken]).p50 * 1e3,
            "rss_mb": summarize([rss for _, rss, _ in taken]).p50,
            "ready_cpu_ms": summarize([cpu for _, _, cpu in taken]).p50 * 1e3,
        }
        rows.append(Row(SCENARIO, case, name, values))
    return rows
