"""Legacy SSE clients (``/sse`` + ``/messages/``) of the HTTP guard's own sessions, relayed like the rest.

The 2024-11-05 transport: a GET to ``/sse`` opens the session's one event stream, whose
first event (``endpoint``) names where the client POSTs its messages (``/messages/`` with the
session's id); each POST is answered 202 and its message goes to the session's message
relay, and everything the relay sends goes out on the event stream as a ``message`` event,
its bytes as they came. The framing is the guard's own, so serving these clients loads no
SDK; Host and Origin are checked at the front door for every path. A POST is taken only
with the token the stream was opened with. The session ends with the stream; an aborted
one ends the stream once its refusal is out.
"""

from __future__ import annotations

import math
import re
from typing import Protocol
from urllib.parse import parse_qs, quote

import anyio
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.proxy.downstream.http.event_log import PING
from mcp_loop_guard.proxy.downstream.http.middleware import token_of
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession, MuxedSessions, stream_pair
from mcp_loop_guard.proxy.downstream.http.replies import read_body, until_disconnected
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire import sse

__all__ = ["SseSessions"]

MESSAGES = "/messages/"
"""Where a session's client POSTs its messages (with ``?session_id=``)."""
CLOSE_WAIT = 2.0
"""Seconds an ended session's event stream gets to write its last messages (an aborting refusal) and end."""
EVENT_STREAM = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no")]
_SESSION_ID = re.compile(rb"[0-9a-f]{32}")


class Opens(Protocol):
    """What opens and ends the sessions (the relay whose sessions they are)."""

    sessions: MuxedSessions

    async def room(self, send: Send) -> bool:
        """Room for one more session, or the client was answered 503."""
        ...

    def new_session(self, token: str, *, kind: str = "session") -> MuxedSession:
        """A new session with its relay."""
        ...

    async def end(self, session: MuxedSession) -> None:
        """End a session."""
        ...


class SseSessions:
    """Legacy SSE connections, each one session of the relay."""

    def __init__(self, relay: Opens, ping_seconds: float) -> None:
        """Sessions are opened and ended by ``relay``; an idle stream carries a comment every ``ping_seconds``."""
        self.relay = relay
        self.ping_seconds = ping_seconds

    async def handle_sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One SSE connection: a session until the client leaves, or until it is ended here."""
        if not await self.relay.room(send):
            return
        session = self.relay.new_session(token_of(scope), kind="sse")
        writer, reader = stream_pair()
        session.sse_out = writer
        path = quote(scope.get("root_path", "").rstrip("/") + MESSAGES)
        endpoint = f"{path}?session_id={session.session_id.decode()}".encode()
        try:
            await send({"type": "http.response.start", "status": 200, "headers": EVENT_STREAM})
            await _body(send, b"event: endpoint\ndata: " + endpoint + b"\n\n")
            async with anyio.create_task_group() as tg:
                tg.start_soon(until_disconnected, receive, tg.cancel_scope)
                await self._write_out(reader, send)
                with anyio.move_on_after(CLOSE_WAIT):  # a client that stopped reading is cut
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            await self.relay.end(session)

    async def _write_out(self, reader: anyio.abc.ObjectReceiveStream[bytes], send: Send) -> None:
        """Each line for the client as a ``message`` event, a comment while idle, until the session's stream ends."""
        async with reader:
            while True:
                with anyio.move_on_after(self.ping_seconds or math.inf) as idle:
                    line = await _next(reader)
                if idle.cancelled_caught:
                    await _body(send, PING)
                elif line is None:
                    return  # the session ended here (aborted, expired): its last messages are out
                else:
                    await _body(send, sse.encode(line.rstrip(b"\n")))

    async def handle_messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A message posted to an SSE session: 202, then it goes to the session's relay."""
        if scope["method"] != "POST":
            await _text(send, 405, b"Method Not Allowed", [(b"allow", b"POST")])
            return
        content_type = next((value for key, value in scope["headers"] if key == b"content-type"), b"")
        if not content_type.lower().startswith(b"application/json"):
            await _text(send, 400, b"Invalid Content-Type header")
            return
        found = parse_qs(scope.get("query_string", b"")).get(b"session_id")
        if not found:
            await _text(send, 400, b"session_id is required")
            return
        if _SESSION_ID.fullmatch(found[0]) is None:
            await _text(send, 400, b"Invalid session ID")
            return
        session = self.relay.sessions.lookup(found[0], token_of(scope))
        if session is None or session.kind != "sse" or session.pipe is None:
            await _text(send, 404, b"Could not find session")
            return
        message = wire.parse(await read_body(receive))
        if not isinstance(message, wire.Message) and not _answerable(message):
            await _text(send, 400, b"Could not parse message")
            return
        assert message is not None
        await _text(send, 202, b"Accepted")
        await session.pipe.take_client(message)  # a request refused by the reader gets its error on the stream


def _answerable(parsed: wire.BadLine | None) -> bool:
    """A request refused with its JSON-RPC error (a control character in its method...), not a broken body."""
    return parsed is not None and parsed.reply is not None and parsed.reply.body.get("id") is not None


async def _next(reader: anyio.abc.ObjectReceiveStream[bytes]) -> bytes | None:
    """The next line for the client, or None once the session's stream is closed."""
    try:
        return await reader.receive()
    except anyio.EndOfStream:
        return None


async def _body(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def _text(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """A plain-text response, as the SDK's SSE transport answers."""
    head = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*head, *(headers or [])]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
