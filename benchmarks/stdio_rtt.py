"""Scenario 1: sequential tools/call round trips over stdio, directly and through proxies.

Each target gets one warm session (initialized once, then N calls). The calls are
interleaved, one per target in turn (A B C, C B A, ...), so noise from other work
on the machine lands on every target alike. Arguments differ on every call, as in
real use, so the guard forwards and fingerprints every one instead of refusing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import psutil
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from benchmarks.processes import BenchmarkError, Via, child_pids, cpu_seconds, new_child
from benchmarks.results import DIRECT, Row
from benchmarks.stats import ratio, summarize

SCENARIO = "stdio"
CALL_SECONDS = 60.0
"""Longest a single call may take before the run fails (a 1 MB result on a busy machine included)."""


@dataclass(frozen=True)
class Case:
    """One kind of call: a tool, its arguments for call number ``i``, and the expected result size."""

    name: str
    tool: str
    arguments: Callable[[int], dict[str, Any]]
    calls: int
    warmup: int


@dataclass
class Connection:
    """A warm session to one target, and the process the client started for it."""

    via: Via
    session: ClientSession
    process: psutil.Process | None


@asynccontextmanager
async def connect(via: Via, errlog: TextIO) -> AsyncIterator[Connection]:
    """Start ``via`` over stdio and initialize a session with the SDK's client.

    Raises:
        BenchmarkError: the target did not complete the handshake.
    """
    if via.url is not None:
        async with streamable_http_client(via.url) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(CALL_SECONDS):
                await session.initialize()
            yield Connection(via, session, None)
        return
    before = child_pids()
    params = StdioServerParameters(command=via.argv[0], args=via.argv[1:], env=dict(via.env))
    async with stdio_client(params, errlog=errlog) as (read, write):
        process = new_child(before)
        async with ClientSession(read, write) as session:
            try:
                with anyio.fail_after(CALL_SECONDS):
                    await session.initialize()
            except (MCPError, TimeoutError) as exc:
                raise BenchmarkError(f"{via.name} did not initialize: {exc!r} (see the log)") from exc
            yield Connection(via, session, process)


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """One tools/call, sent as is: no output-schema checks, no hidden tools/list.

    Raises:
        BenchmarkError: the target answered with an error result.
    """
    request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
    with anyio.fail_after(CALL_SECONDS):
        result = await session.send_request(request, types.CallToolResult)
    if result.is_error:
        raise BenchmarkError(f"{tool} returned an error result: {result.content!r:.200}")
    return result


async def interleave(
    connections: Sequence[Connection], case: Case, advance: Callable[[int], None], scenario: str = SCENARIO
) -> list[Row]:
    """Run ``case`` on every connection in turn and summarize each target against direct."""
    samples: dict[str, list[float]] = {c.via.name: [] for c in connections}
    cpu_start: dict[str, float] = {}
    for i in range(case.warmup + case.calls):
        if i == case.warmup:
            cpu_start = {c.via.name: cpu_seconds(c.process) for c in connections}
        arguments = case.arguments(i)
        for connection in connections if i % 2 == 0 else reversed(connections):
            started = time.perf_counter()
            await call(connection.session, case.tool, arguments)
            elapsed = time.perf_counter() - started
            if i >= case.warmup:
                samples[connection.via.name].append(elapsed)
        advance(1)
    cpu = {c.via.name: (cpu_seconds(c.process) - cpu_start[c.via.name]) / case.calls for c in connections}
    summaries = {name: summarize(values) for name, values in samples.items()}
    direct = summaries[DIRECT]
    rows = []
    for connection in connections:
        name = connection.via.name
        latency = summaries[name]
        values: dict[str, float | int | str] = {
            "n": latency.n,
            "p50_ms": latency.p50 * 1e3,
            "p99_ms": latency.p99 * 1e3,
            "x_p50": ratio(latency.p50, direct.p50),
            "x_p99": ratio(latency.p99, direct.p99),
            "cpu_ms": cpu[name] * 1e3,
        }
        rows.append(Row(scenario, case.name, name, values, connection.via.note))
    return rows


async def run_group(
    vias: Sequence[Via],
    cases: Sequence[Case],
    errlog: TextIO,
    advance: Callable[[int], None],
    scenario: str = SCENARIO,
) -> list[Row]:
    """Open every target (one at a time, so each child is known), then run the cases on all of them."""
    async with AsyncExitStack() as stack:
        connections = [await stack.enter_async_context(connect(via, errlog)) for via in vias]
        rows: list[Row] = []
        for case in cases:
            rows.extend(await interleave(connections, case, advance, scenario))
        return rows
