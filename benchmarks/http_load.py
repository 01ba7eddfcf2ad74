"""Scenario 2: streamable HTTP, many concurrent sessions, directly and through proxies.

Every target keeps ``sessions`` warm sessions; a burst has each session make
sequential echo calls, all sessions at once. Bursts alternate between targets
(A B, B A, ...), and each target's throughput is its calls over the time its
bursts took. The load comes from one Python process, as the guard's would
from one agent host; its CPU share is reported, since on two cores a busy
client competes with the servers it measures.

The upstream is server-everything in its streamable HTTP mode. The guard and
FastMCP forward HTTP to it; mcp-proxy can only put HTTP in front of a stdio
server, so it runs its own server-everything over stdio, shared by all sessions.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TextIO

import anyio
import httpx2
import psutil
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from benchmarks.processes import BenchmarkError, cpu_seconds
from benchmarks.results import DIRECT, Row
from benchmarks.stats import ratio, summarize
from benchmarks.stdio_rtt import CALL_SECONDS, call

SCENARIO = "http"
TLS = ssl.create_default_context()
"""One TLS context for the load's clients: httpx builds one per client by default, tens of ms each."""
KEY_HEADER = "X-Loop-Guard-Key"
SDK_TIMEOUT = httpx2.Timeout(30, read=300)
"""The SDK's own client timeouts (a long read: a session's GET stream stays open while idle)."""


@dataclass(frozen=True)
class HttpTarget:
    """A running endpoint to load, and the process serving it (for its CPU time)."""

    via: str
    url: str
    process: psutil.Process | None
    note: str = ""
    keyed: bool = False
    """Each session names its own agent (``X-Loop-Guard-Key``): a stateless guard has no sessions to tell apart."""
    argument: str = "message"
    """The echo tool's argument (server-everything's ``message``, the fixture server's ``text``)."""


@asynccontextmanager
async def open_sessions(url: str, count: int, *, keyed: bool = False) -> AsyncIterator[list[ClientSession]]:
    """``count`` initialized sessions to ``url``, each with its own HTTP connection pool (and key, if ``keyed``).

    Raises:
        BenchmarkError: a session could not be initialized.
    """
    async with AsyncExitStack() as stack:
        sessions = []
        for index in range(count):
            if keyed:
                client = httpx2.AsyncClient(headers={KEY_HEADER: f"bench-{index}"}, timeout=CALL_SECONDS, verify=TLS)
            else:
                client = httpx2.AsyncClient(timeout=SDK_TIMEOUT, verify=TLS)
            await stack.enter_async_context(client)
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
            session = await stack.enter_async_context(ClientSession(read, write))
            try:
                with anyio.fail_after(CALL_SECONDS):
                    await session.initialize()
            except TimeoutError as exc:
                raise BenchmarkError(f"no session could be initialized at {url}") from exc
            sessions.append(session)
        yield sessions


async def burst(
    sessions: Sequence[ClientSession], calls: int, tag: str, argument: str = "message"
) -> tuple[list[float], float]:
    """Every session makes ``calls`` sequential echo calls, all sessions at once; latencies and wall time."""
    latencies: list[float] = []

    async def worker(index: int, session: ClientSession) -> None:
        for k in range(calls):
            started = time.perf_counter()
            await call(session, "echo", {argument: f"{tag} session {index} call {k}"})
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index, session in enumerate(sessions):
            tg.start_soon(worker, index, session)
    return latencies, time.perf_counter() - started


async def measure(
    targets: Sequence[HttpTarget],
    sessions: int,
    calls: int,
    rounds: int,
    advance: Callable[[int], None],
    *,
    case: str | None = None,
) -> list[Row]:
    """Interleaved bursts on every target; calls/s, p50 and p99 with ratios to direct."""
    case = case or f"echo, {sessions} sessions"
    latencies: dict[str, list[float]] = {t.via: [] for t in targets}
    walls: dict[str, float] = dict.fromkeys(latencies, 0.0)
    server_cpu: dict[str, float] = dict.fromkeys(latencies, 0.0)
    client_cpu: dict[str, float] = dict.fromkeys(latencies, 0.0)
    client = psutil.Process()
    async with AsyncExitStack() as stack:
        pools = [await stack.enter_async_context(open_sessions(t.url, sessions, keyed=t.keyed)) for t in targets]
        for target, pool in zip(targets, pools, strict=True):
            await burst(pool, 2, f"warmup {target.via}", target.argument)
        for r in range(rounds):
            order = list(zip(targets, pools, strict=True))
            for target, pool in order if r % 2 == 0 else reversed(order):
                cpu_before = cpu_seconds(target.process), cpu_seconds(client)
                got, wall = await burst(pool, calls, f"round {r}", target.argument)
                server_cpu[target.via] += cpu_seconds(target.process) - cpu_before[0]
                client_cpu[target.via] += cpu_seconds(client) - cpu_before[1]
                latencies[target.via].extend(got)
                walls[target.via] += wall
                advance(1)
    direct = summarize(latencies[DIRECT])
    direct_rate = len(latencies[DIRECT]) / walls[DIRECT]
    rows = []
    for target in targets:
        latency = summarize(latencies[target.via])
        rate = len(latencies[target.via]) / walls[target.via]
        values: dict[str, float | int | str] = {
            "n": latency.n,
            "calls_s": rate,
            "x_calls_s": ratio(rate, direct_rate),
            "p50_ms": latency.p50 * 1e3,
            "p99_ms": latency.p99 * 1e3,
            "x_p50": ratio(latency.p50, direct.p50),
            "x_p99": ratio(latency.p99, direct.p99),
            "cpu_ms": server_cpu[target.via] / latency.n * 1e3,
            "client_cpu_pct": client_cpu[target.via] / walls[target.via] * 100,
        }
        rows.append(Row(SCENARIO, case, target.via, values, target.note))
    return rows


INIT_BODY = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"idle-session","version":"0"}}}'
)
INITIALIZED_BODY = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


async def open_idle_sessions(url: str, count: int, log: TextIO, advance: Callable[[int], None]) -> int:
    """Initialize ``count`` sessions with raw HTTP and leave them idle (no GET stream); return how many opened."""
    import httpx2

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    opened = 0
    async with httpx2.AsyncClient(timeout=CALL_SECONDS, verify=TLS) as client:
        for _ in range(count):
            response = await client.post(url, content=INIT_BODY, headers=headers)
            session_id = response.headers.get("mcp-session-id")
            if response.status_code != 200 or not session_id:
                print(f"idle session refused: {response.status_code} {response.text[:200]}", file=log)
                break
            await client.post(
                url,
                content=INITIALIZED_BODY,
                headers={**headers, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"},
            )
            opened += 1
            advance(1)
    return opened


async def touch_keys(url: str, count: int, log: TextIO, advance: Callable[[int], None]) -> int:
    """One tools/call each for ``count`` sessionless agents (distinct ``X-Loop-Guard-Key``); how many answered."""
    import httpx2

    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "mcp-protocol-version": "2025-11-25",
    }
    answered = 0
    async with httpx2.AsyncClient(timeout=CALL_SECONDS, verify=TLS) as client:
        for index in range(count):
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"message": f"key {index}"}},
            }
            response = await client.post(url, json=body, headers={**headers, "x-loop-guard-key": f"agent-{index}"})
            if response.status_code != 200:
                print(f"keyed call refused: {response.status_code} {response.text[:200]}", file=log)
                break
            answered += 1
            advance(1)
    return answered
