"""Legacy SSE clients (``/sse`` + ``/messages/``) of the HTTP guard in front of one stdio server, relayed like the rest.

The SDK's SSE transport frames the connection (the endpoint event, the session id in the POST
URL, the Host and Origin checks); each message it hands over goes to the session's message
relay, and everything the relay sends goes back on the connection's one event stream. The
session ends with the connection; an aborted one closes the connection once its refusal is out.
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio
import mcp_types as types
from mcp.server.sse import SseServerTransport
from mcp.shared.message import SessionMessage
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.proxy.downstream.http.middleware import HostRules, token_of, transport_security
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession, stream_pair
from mcp_loop_guard.proxy.wire.messages import Message

__all__ = ["SseSessions"]

logger = logging.getLogger(__name__)


class Opens(Protocol):
    """What opens and ends the sessions (the relay in front of the shared child)."""

    async def room(self, send: Send) -> bool:
        """Room for one more session, or the client was answered 503."""
        ...

    def new_session(self, token: str, *, kind: str = "session") -> MuxedSession:
        """A new session with its relay."""
        ...

    async def end(self, session: MuxedSession) -> None:
        """End a session."""
        ...


CLOSE_WAIT = 2.0
"""Seconds an ended session's event stream gets to write its last messages (an aborting refusal) and end."""


class SseSessions:
    """Legacy SSE connections, each one session of the relay."""

    def __init__(self, relay: Opens, security: HostRules, max_bytes: int) -> None:
        """Sessions are opened and ended by ``relay``."""
        self.relay = relay
        self.sse = SseServerTransport(
            "/messages/", security_settings=transport_security(security), max_request_body_size=max_bytes
        )

    async def handle_sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One SSE connection: a session until the client leaves, or until it is ended here."""
        if not await self.relay.room(send):
            return
        session = self.relay.new_session(token_of(scope), kind="sse")
        pipe = session.pipe
        assert pipe is not None
        writer, reader = stream_pair()
        session.sse_out = writer
        try:
            with anyio.CancelScope() as connection:  # cancelled, the event stream's response ends too
                async with (
                    self.sse.connect_sse(scope, receive, send) as (read, write),
                    anyio.create_task_group() as tg,
                ):

                    async def outgoing() -> None:
                        async with reader:
                            async for line in reader:
                                try:
                                    message = types.jsonrpc_message_adapter.validate_json(line)
                                except ValidationError:
                                    logger.warning("SSE session %s: dropped a message SSE cannot carry", session.short)
                                    continue
                                await write.send(SessionMessage(message))
                        # The session ended here (aborted, expired): the event stream ends after its last
                        # message, which ends the connection; cut only if the client stopped reading.
                        await write.aclose()
                        await anyio.sleep(CLOSE_WAIT)
                        connection.cancel()

                    tg.start_soon(outgoing)
                    async for item in read:
                        if isinstance(item, Exception):
                            continue
                        body = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                        await pipe.take_client(Message(body))
                    connection.cancel()
        finally:
            await self.relay.end(session)

    async def handle_messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A message posted to an SSE session."""
        await self.sse.handle_post_message(scope, receive, send)
