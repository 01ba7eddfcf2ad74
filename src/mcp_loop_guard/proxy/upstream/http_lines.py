"""One streamable HTTP upstream for the message relay: each message the client writes is POSTed as it came.

The stdio guard in front of a remote server relays messages, not SDK requests, as it does
for a child process: each line becomes one POST with the same body, sent in the client's
order, and what comes back (a JSON body, or the events of a stream) goes to the relay as
lines do. The server's ``Mcp-Session-Id`` and the negotiated protocol version go with every
later message; a GET stream carries what the server sends unasked, and a call's stream the
server closed before its answer is resumed (:mod:`.http_streams`). A session the server
forgot (404) is opened again with the client's ``initialize`` replayed, as for a restarted
child. 2026-07-28 messages carry that era's routing headers (``Mcp-Method``, ``Mcp-Name``,
the version from their ``_meta``, and ``Mcp-Param-*`` for tools whose schema asks for them).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from mcp_loop_guard import codec
from mcp_loop_guard.config import HttpServer
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.channel import Receiver, UpstreamDownError
from mcp_loop_guard.proxy.upstream.exchange import Response, UpstreamHttpError
from mcp_loop_guard.proxy.upstream.http_answers import EVENTS, JSON, Resume, drain, read_messages
from mcp_loop_guard.proxy.upstream.http_headers import ParamHeaders, routing_headers
from mcp_loop_guard.proxy.upstream.http_streams import HttpStreams
from mcp_loop_guard.proxy.wire.header_text import UnsafeHeaderError
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

logger = logging.getLogger(__name__)

__all__ = ["HttpLines"]

_ACCEPT = (b"accept", JSON + b", " + EVENTS)
_CONTENT = (b"content-type", JSON)

HOLD = 10.0
"""Seconds a notification or response may hold up the next message while the server takes it."""


class HttpLines(HttpStreams):
    """A streamable HTTP upstream as a channel of messages (see :class:`~.channel.Channel`)."""

    def __init__(
        self,
        spec: HttpServer,
        receiver: Receiver,
        *,
        max_bytes: int,
        handshake_timeout: float,
    ) -> None:
        """What the server says goes to ``receiver``, with the requests it could not be asked or broke off."""
        super().__init__(spec, receiver, max_bytes=max_bytes, handshake_timeout=handshake_timeout)
        self.session: bytes | None = None
        """The server's ``Mcp-Session-Id`` (handshake era)."""
        self.version: bytes | None = None
        """The protocol version the handshake agreed on, sent as ``MCP-Protocol-Version``."""
        self.params = ParamHeaders()
        self._tg: anyio.abc.TaskGroup | None = None
        self._reopening = anyio.Lock()
        self._busy = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._down_reason = ""
        self._listening: bytes | None = None
        self._handshaken: Callable[[], None] | None = None
        """Lets the message after the client's initialize go, once its answer is in."""

    def down_reason(self) -> str | None:
        """Why the last message could not reach the upstream, until one does again."""
        return self._down_reason or None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; the server's session is ended (DELETE) on the way out."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
                await self._end_session()
                if self.owns_exchange:
                    await self.exchange.aclose()

    def learn_tools(self, tools: list[Any]) -> None:
        """Keep the tools' ``Mcp-Param-*`` declarations, for 2026-07-28 calls."""
        self.params.learn(tools)

    def end_input(self) -> None:
        """Nothing to close: each message was its own request."""

    async def wait_ended(self) -> None:
        """Wait until every request sent has been answered."""
        await self._idle.wait()

    # --- sending -----------------------------------------------------------------------------

    async def send_message(self, message: Message) -> None:
        """POST one message, in order: returns once it is written (a request's answer is read in its own task).

        The handshake and each notification or response go on alone until the server took
        them (the session id comes with the handshake's answer), but never for longer than
        :data:`HOLD`, or the server's call timeout when shorter (the handshake timeout for
        ``initialize``): a server that never answers holds up no other message for long.

        Raises:
            UpstreamDownError: the upstream could not be reached.
        """
        assert self._tg is not None, "run() first"
        async with self._order:
            sending = _Sending(anyio.Event())
            self._tg.start_soon(self._post, message, sending)
            with anyio.move_on_after(self.handshake_timeout if message.method == "initialize" else self._hold):
                await sending.released.wait()
            sending.returned = True
            if sending.failure is not None:
                raise UpstreamDownError(sending.failure)

    @property
    def _hold(self) -> float:
        """How long a notification or response may hold up the next message: a call timeout set shorter bounds it."""
        return min(HOLD, self.handshake_timeout)

    async def _post(self, message: Message, sending: _Sending) -> None:
        def sent() -> None:
            if not first_answer:
                sending.released.set()

        first_answer = message.method == "initialize" or not message.is_request
        if message.method == "initialize":
            self._handshaken = sending.released.set
        ident = message.id if message.is_request else None
        if not self._busy:
            self._idle = anyio.Event()
        self._busy += 1
        try:
            await self._exchange(message, ident, sent)
        except UpstreamHttpError as error:
            self._down_reason = str(error)
            if not sending.returned and not sending.released.is_set():
                sending.failure = str(error)  # the caller raises it
            elif ident is not None:
                await self.receiver.upstream_failed(ident, str(error))
        except UnsafeHeaderError as error:  # the message reader refuses such client text first
            logger.warning("refused to send a %r upstream: %s", (message.method or "")[:80], error)
            await self._answers_none(message, ident, f"was not sent the request: {error}")
        finally:
            self._busy -= 1
            if not self._busy:
                self._idle.set()
            sending.released.set()

    async def _exchange(self, message: Message, ident: RequestId | None, sent: Callable[[], None]) -> None:
        body = message.raw if message.raw is not None else codec.dumps(message.body)
        session = self.session
        for attempt in (1, 2):
            async with self.exchange.send("POST", self._headers(message), body, sent=sent) as response:
                self._down_reason = ""
                if response.status_code == 404 and session is not None and attempt == 1:
                    await drain(response)
                    if message.method == "initialize":
                        break
                    sent = _nothing
                    await self._reopen(session)
                    continue
                if message.method == "initialize":
                    self._opened(response)
                sent()
                await self._answers(response, message, ident)
                return
        await self._answers_none(message, ident, replies.FORGOT_SESSION)

    def _headers(self, message: Message) -> list[tuple[bytes, bytes]]:
        headers = [_ACCEPT, _CONTENT]
        params = message.body.get("params")
        modern = routing_headers(message.method, params, self.params)
        if modern:
            headers.extend(modern)
            return headers
        if message.method != "initialize":
            headers.extend(self._session_headers())
        elif self.session is not None:
            headers.append((b"mcp-session-id", self.session))
        return headers

    def _opened(self, response: Response) -> None:
        """The handshake's answer: its session id from now on, and the GET stream for it."""
        session = response.header(b"mcp-session-id")
        if response.is_success:
            self.session = session
            if session is not None and self._listening != session and self._tg is not None:
                self._listening = session
                self._tg.start_soon(self._listen, session)

    # --- answers -----------------------------------------------------------------------------

    async def _answers(self, response: Response, message: Message, ident: RequestId | None) -> None:
        """Hand every message of one POST's answer on; a request left without its answer is failed.

        A stream the server closed before the answer (the spec's polling: it wrote an event id
        first) is picked up again with a GET carrying ``Last-Event-ID``.
        """
        resume = Resume()
        answered = await self._hand_on(read_messages(response, ident, self.max_bytes, resume), message, ident)
        if response.status_code == 202 or ident is None or answered:
            if not response.is_success and ident is None:
                logger.debug("upstream %s answered a %s with HTTP %d", self.label, message.method, response.status_code)
            return
        if response.is_success and resume.last_id is not None and await self._resumed(message, ident, resume):
            return
        await self._answers_none(message, ident, _no_answer(response))

    async def _answers_none(self, message: Message, ident: RequestId | None, why: str) -> None:
        if ident is None:
            return
        reason = replies.upstream(self.label, why)
        if ident in self._own:
            self._own.give_up(ident)
        else:
            await self.receiver.upstream_failed(ident, reason)

    async def _take(self, item: Message | Oversized, sent: Message | None = None) -> None:
        handshake = False
        if isinstance(item, Message) and item.is_response:
            ident = item.id
            if sent is not None and sent.method == "initialize" and ident == sent.id:
                handshake = True
                version = (item.body.get("result") or {}).get("protocolVersion")
                self.version = version.encode() if isinstance(version, str) else None
            if self._own.answered(item):
                return
        await self.receiver.from_upstream(item)
        release = self._handshaken
        if handshake and release is not None:
            self._handshaken = None
            release()  # the client's next message may go now, with the session id

    # --- the guard's own ---------------------------------------------------------------------

    async def request(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        """A request of the guard's own, carrying the session: the answer's body, or None."""
        try:
            return await self._own.ask(
                method, params, self.send_message, within=within if math.isfinite(within) else self.handshake_timeout
            )
        except UpstreamDownError:
            return None

    async def _reopen(self, stale: bytes) -> None:
        """The server forgot the session: open another with the client's handshake, then go on."""
        async with self._reopening:
            if self.session != stale:
                return  # another request opened it again already
            self.session = None
            if self.initialize is None:
                return
            logger.warning("upstream %s forgot the session; opening another with the client's handshake", self.label)

            async def handshake(message: Message) -> None:
                await self._exchange(message, message.id, _nothing)

            answer = await self._own.ask(
                "initialize", self.initialize.get("params"), handshake, within=self.handshake_timeout
            )
            if answer is None or "result" not in answer:
                return
            if self.initialized is not None:
                await self._exchange(Message({"jsonrpc": "2.0", "method": "notifications/initialized"}), None, _nothing)
            self.restarts += 1
            if self._tg is not None:
                self._tg.start_soon(self.receiver.upstream_restarted)


@dataclass
class _Sending:
    """One message on its way: when the next may go, and a failure its sender must raise."""

    released: anyio.Event
    failure: str | None = None
    returned: bool = False
    """The sender stopped waiting: a later failure is the receiver's to report (``upstream_failed``)."""


def _nothing() -> None:
    pass


def _no_answer(response: Response) -> str:
    if not response.is_success:
        return replies.http_refused(response.status_code)
    return replies.NO_RESPONSE_IN_ANSWER
