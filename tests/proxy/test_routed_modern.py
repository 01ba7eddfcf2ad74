"""2026-07-28 requests to an HTTP guard in front of several servers of that era: each relayed through a router of
its own, and yet the servers see no more connections and no more lists than from one client.

The guard and the servers (``tests/fixtures/parity_server.py``) are served in the test's own event
loop (:mod:`tests.proxy.http_inproc`); each server's app records the client port of every request
it gets, so the test sees how many connections the guard opened to it.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest
from mcp import Client
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_loop_guard.config import HttpServer
from tests.harness import FIXTURES_DIR, texts
from tests.http_harness import http_streams
from tests.proxy.http_inproc import serving_app, serving_guard

pytestmark = pytest.mark.anyio

sys.path.insert(0, str(FIXTURES_DIR))
from parity_server import build  # noqa: E402 - a fixture module, beside the fixture servers


class Seen:
    """What one server was sent: the client port of each request, and how many requests."""

    def __init__(self) -> None:
        self.ports: set[int] = set()
        self.requests = 0


class Recorded:
    """An app, with each HTTP request's client port noted."""

    def __init__(self, app: ASGIApp, record: Seen) -> None:
        self.app, self.record = app, record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.record.ports.add(scope["client"][1])
            self.record.requests += 1
        await self.app(scope, receive, send)


@asynccontextmanager
async def servers(*names: str) -> AsyncIterator[tuple[list[HttpServer], dict[str, Seen]]]:
    """The parity server once per name over streamable HTTP, each request's connection recorded."""
    async with AsyncExitStack() as stack:
        specs, seen = [], {}
        for name in names:
            app = build(name).streamable_http_app()
            seen[name] = record = Seen()

            origin = await stack.enter_async_context(serving_app(Recorded(app, record)))
            specs.append(HttpServer(name, origin + "/mcp"))
        yield specs, seen


async def test_each_request_goes_through_the_servers_kept_connections() -> None:
    """Twenty calls, each relayed through a router of its own, reach the server as twenty requests (no list of the
    guard's own first) over the connections the guard keeps for it, not a new one each (nor a TLS handshake)."""
    async with (
        servers("a", "b") as (specs, seen),
        serving_guard(specs) as guard,
        Client(http_streams(guard.url)) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        with anyio.fail_after(60):
            await client.list_tools()
            before, requests = len(seen["a"].ports), seen["a"].requests
            answers = [texts(await client.call_tool("a__echo", {"text": f"call {n}"})) for n in range(20)]
            sent = seen["a"].requests - requests
    assert answers == [[f"call {n}"] for n in range(20)]
    assert sent == 20  # the calls alone: no list of the guard's own first
    assert len(seen["a"].ports) - before <= 3, f"{len(seen['a'].ports) - before} new connections for 20 calls"
