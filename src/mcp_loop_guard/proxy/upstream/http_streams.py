"""The event streams of one streamable HTTP session: resumed after the server closed them, and the GET stream."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anyio

from mcp_loop_guard.proxy.upstream.exchange import OneHttpServer, UpstreamHttpError
from mcp_loop_guard.proxy.upstream.http_answers import EVENTS, Resume, drain, read_messages
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

logger = logging.getLogger(__name__)

__all__ = ["HttpStreams"]

RESUME_ATTEMPTS = 3
"""Resumptions in a row that bring no new event before a request is answered with an error."""
RESUME_WAIT_LIMIT = 5.0
"""The longest wait before resuming a stream, whatever its ``retry`` field asks."""
LISTEN_RETRY = (1.0, 30.0)
"""Seconds before the GET stream is opened again after it ended: the first wait, and the longest."""


class HttpStreams(OneHttpServer):
    """The session's headers and its event streams; :class:`~.http_lines.HttpLines` sends the messages."""

    session: bytes | None
    """The server's ``Mcp-Session-Id`` (handshake era)."""
    version: bytes | None
    """The protocol version the handshake agreed on, sent as ``MCP-Protocol-Version``."""

    async def _take(self, item: Message | Oversized, sent: Message | None = None) -> None:
        """One message from the upstream, for the relay (or for a request of the guard's own)."""
        raise NotImplementedError

    async def _hand_on(
        self, items: AsyncIterator[Message | Oversized], message: Message, ident: RequestId | None
    ) -> bool:
        """Pass each message on; True once the answer to ``ident`` was among them."""
        answered = False
        async for item in items:
            if isinstance(item, Message) and item.is_response and item.id == ident:
                answered = True
            elif isinstance(item, Oversized):
                answered = answered or item.request_id == ident
            await self._take(item, message)
        return answered

    async def _resumed(self, message: Message, ident: RequestId, resume: Resume) -> bool:
        """Resume a request's event stream until its answer comes; False when the server stops offering it."""
        idle = 0
        while idle < RESUME_ATTEMPTS and resume.last_id is not None:
            await anyio.sleep(min(resume.retry or 0.0, RESUME_WAIT_LIMIT))
            last = resume.last_id
            headers = [(b"accept", EVENTS), (b"last-event-id", last), *self._session_headers()]
            try:
                async with self.exchange.send("GET", headers) as response:
                    if not response.is_success:
                        await drain(response)
                        return False
                    items = read_messages(response, ident, self.max_bytes, resume)
                    if await self._hand_on(items, message, ident):
                        return True
            except UpstreamHttpError as error:
                logger.debug("upstream %s: resuming a stream failed (%s)", self.label, error)
            idle = 0 if resume.last_id != last else idle + 1
        return False

    def _session_headers(self) -> list[tuple[bytes, bytes]]:
        headers = []
        if self.session is not None:
            headers.append((b"mcp-session-id", self.session))
        if self.version is not None:
            headers.append((b"mcp-protocol-version", self.version))
        return headers

    async def _listen(self, session: bytes) -> None:
        """The GET stream of one session: what the server sends unasked (until the session changes)."""
        wait = LISTEN_RETRY[0]
        while self.session == session:
            headers = [(b"accept", EVENTS), *self._session_headers()]
            try:
                async with self.exchange.send("GET", headers) as response:
                    if not response.is_success or not (response.header(b"content-type") or b"").startswith(EVENTS):
                        await drain(response)
                        return  # 405: the server has no such stream
                    wait = LISTEN_RETRY[0]
                    async for item in read_messages(response, None, self.max_bytes):
                        await self._take(item)
            except UpstreamHttpError as error:
                logger.debug("upstream %s: the GET stream ended (%s)", self.label, error)
            await anyio.sleep(wait)
            wait = min(wait * 2, LISTEN_RETRY[1])

    async def _end_session(self) -> None:
        if self.session is None:
            return
        headers = self._session_headers()
        self.session = None
        try:
            async with self.exchange.send("DELETE", headers) as response:
                await drain(response)
        except UpstreamHttpError as error:
            logger.debug("could not end the session at upstream %s: %s", self.label, error)
