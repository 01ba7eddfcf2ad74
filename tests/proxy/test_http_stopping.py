"""Two HTTP guards in one process: stopping one answers its own calls in flight, never the other's.

Both guards and the upstream they relay to run in the test's event loop, on free local
ports: the upstream is an SDK server whose ``hold`` tool answers once the test lets it, the
guards are the guard's own HTTP serving (its relays, its store, its stopping), the clients
the SDK's streamable HTTP client. One front for each relay that answers calls at a stop:
request by request to one HTTP server, a session relay through a router, and requests
without a session (``--stateless`` in front of several servers), each relayed on its own over
a share of one router.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import mcp_types as types
import pytest
import uvicorn
from mcp.server import MCPServer

from mcp_loop_guard.config import GuardConfig, HttpServer
from mcp_loop_guard.plan import plan
from mcp_loop_guard.proxy.downstream.http.app import GuardStop, serve
from mcp_loop_guard.proxy.downstream.http.listen import listen
from mcp_loop_guard.settings import load_settings
from tests.http_harness import LOCALHOST, free_port, open_http_session
from tests.proxy.http_inproc import QuietServer

pytestmark = pytest.mark.anyio

FRONTS = {
    "relayed": (1, False, "hold"),
    "routed": (2, False, "one__hold"),
    "stateless": (2, True, "one__hold"),
}
"""Front -> (servers behind the guard, ``--stateless``, the name the client calls ``hold`` by)."""
LIMIT = 30
"""Seconds any step may take on a loaded machine."""


@dataclass
class Upstream:
    """An SDK server whose ``hold`` calls wait until :attr:`release` is set."""

    url: str = ""
    held: int = 0
    both_held: anyio.Event = field(default_factory=anyio.Event)
    """Set once two calls are held."""
    release: anyio.Event = field(default_factory=anyio.Event)


@asynccontextmanager
async def serving_upstream() -> AsyncIterator[Upstream]:
    """The upstream on a free port, in this event loop."""
    upstream = Upstream()
    server = MCPServer("held")

    @server.tool()
    async def hold(tag: str) -> str:
        """Answers once the test releases it."""
        upstream.held += 1
        if upstream.held == 2:
            upstream.both_held.set()
        await upstream.release.wait()
        return f"released {tag}"

    port = free_port()
    upstream.url = f"http://{LOCALHOST}:{port}/mcp"
    config = uvicorn.Config(server.streamable_http_app(), host=LOCALHOST, port=port, log_config=None)
    quiet = QuietServer(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(quiet.serve)
        yield upstream
        quiet.should_exit = True


@dataclass
class Guard:
    """One guard served in this event loop, and what stops it."""

    url: str
    stop: GuardStop
    sockets: list[socket.socket]
    answer: types.CallToolResult | None = None
    answered: anyio.Event = field(default_factory=anyio.Event)


def start_guard(tg: anyio.abc.TaskGroup, upstream: str, servers: int, *, stateless: bool) -> Guard:
    """A guard in front of ``servers`` entries for the upstream, served in ``tg`` on a free port."""
    port = free_port()
    names = ["one", "two"][:servers]
    config = GuardConfig(None, tuple(HttpServer(name, upstream) for name in names), {})
    settings = load_settings(None, transport="http", host=LOCALHOST, port=port, stateless=stateless, state="memory")
    guard = Guard(f"http://{LOCALHOST}:{port}/mcp", GuardStop(), listen(LOCALHOST, port))
    tg.start_soon(serve, plan(config, settings), guard.stop, None, guard.sockets)
    return guard


async def call_hold(guard: Guard, tool: str, tag: str) -> None:
    """Calls ``hold`` through the guard and keeps its answer."""
    async with open_http_session(guard.url) as opened:
        guard.answer = await opened.session.call_tool(tool, {"tag": tag})
        guard.answered.set()


def text_of(result: types.CallToolResult) -> str:
    """The text of a tool result."""
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.mark.parametrize("front", FRONTS)
async def test_stopping_one_guard_leaves_the_other_serving(front: str) -> None:
    """One guard's stop answers its call in flight with the stopping error; the other guard's call completes."""
    servers, stateless, tool = FRONTS[front]
    async with serving_upstream() as upstream, anyio.create_task_group() as tg:
        first = start_guard(tg, upstream.url, servers, stateless=stateless)
        second = start_guard(tg, upstream.url, servers, stateless=stateless)
        tg.start_soon(call_hold, first, tool, "first")
        tg.start_soon(call_hold, second, tool, "second")
        with anyio.fail_after(LIMIT):
            await upstream.both_held.wait()  # both calls are in flight upstream

        first.stop.drain()
        with anyio.fail_after(LIMIT):
            await first.answered.wait()
        upstream.release.set()
        with anyio.fail_after(LIMIT):
            await second.answered.wait()
        second.stop.drain()
        tg.cancel_scope.cancel()
    for listening in [*first.sockets, *second.sockets]:
        listening.close()

    assert first.answer is not None
    assert first.answer.is_error, first.answer
    assert "shutting down" in text_of(first.answer), first.answer
    assert second.answer is not None
    assert not second.answer.is_error, second.answer
    assert text_of(second.answer) == "released second", second.answer
