"""A ``--stateless`` request that comes while the guard's first handshake with the server is under way.

The guard opens one session of its own at a server that gives each client a session, when
the first such request comes, and relays every request over a share of it. A request that
comes during that first handshake waits for it; when the handshake fails, the request is
answered with why at once, not after its whole wait (here a call timeout of ten minutes).
The server is the SDK's, in this event loop, behind a gate that holds the guard's
handshake (its ``initialize`` offering sampling) until the test lets it go, then refuses it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from mcp.server import MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_loop_guard.config import HttpServer
from tests.http_harness import KEY_HEADER, jsonrpc_payloads, raw_call
from tests.proxy.http_inproc import serving_app, serving_guard

pytestmark = pytest.mark.anyio

LIMIT = 30
"""Seconds any step may take on a loaded machine (far below the request's own wait)."""
WAIT = 600.0
"""The server's call timeout: how long a request would wait for the guard's first handshake."""


@dataclass
class Gate:
    """Holds the guard's own handshake (the one that offers sampling) until released, then answers 503."""

    app: ASGIApp
    held: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Every other request reaches the server as it came."""
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if _is_the_guards_handshake(body):
            self.held.set()
            await self.release.wait()
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"starting up"})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


def _is_the_guards_handshake(body: bytes) -> bool:
    message = json.loads(body)
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return False
    return "sampling" in message.get("params", {}).get("capabilities", {})


@asynccontextmanager
async def gated_server() -> AsyncIterator[tuple[Gate, HttpServer]]:
    """An SDK server (it opens a session per client) behind a gate, on a free port in this event loop."""
    server = MCPServer("gated")

    @server.tool()
    def echo(text: str) -> str:
        """Says it back."""
        return text

    gate = Gate(server.streamable_http_app())
    async with serving_app(gate) as origin:
        yield gate, HttpServer("gated", f"{origin}/mcp", call_timeout=WAIT)


async def test_a_request_during_the_first_handshake_is_answered_once_it_failed() -> None:
    """The handshake is refused while a request waits for it: the request gets the refusal's why, not a hang."""
    async with gated_server() as (gate, spec), serving_guard([spec], stateless=True) as guard:
        answers: list[dict[str, object]] = []

        async def call() -> None:
            answered = await raw_call(guard.url, "echo", {"text": "early"}, {KEY_HEADER: "k"}, request_id=7)
            answers.extend(jsonrpc_payloads(answered))

        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await gate.held.wait()  # the request opened the guard's session and waits for its handshake
                gate.release.set()
    (answer,) = answers
    assert answer["id"] == 7
    error = answer.get("error") or answer["result"]
    assert "gated" in json.dumps(error), answer  # the failure names the server
