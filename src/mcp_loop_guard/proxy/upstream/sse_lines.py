"""A legacy SSE server as the message relay's upstream: one event stream in, one POST per message out.

The server's GET event stream carries everything it sends; its first event names the
endpoint each client message is POSTed to, in the client's order. The stream is the session:
when it ends, the requests in flight get the reason at once, and the stream is opened again
(after a backoff delay) with the client's ``initialize`` replayed, so the client's session
goes on. Requests the guard sends itself carry ids of their own; their answers never reach
the client.
"""

from __future__ import annotations

import logging
import math
from typing import Any
from urllib.parse import urljoin, urlsplit

import anyio
import anyio.abc

from mcp_loop_guard.config import HttpServer
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.backoff import Backoff
from mcp_loop_guard.proxy.upstream.channel import Receiver, UpstreamDownError
from mcp_loop_guard.proxy.upstream.exchange import OneHttpServer, UpstreamHttpError
from mcp_loop_guard.proxy.upstream.http_answers import EVENTS, JSON, drain
from mcp_loop_guard.proxy.wire import sse
from mcp_loop_guard.proxy.wire.messages import Message, parse

__all__ = ["SseLines"]

logger = logging.getLogger(__name__)


class SseLines(OneHttpServer):
    """One legacy SSE session, opened again whenever its event stream ends."""

    def __init__(
        self,
        spec: HttpServer,
        receiver: Receiver,
        *,
        max_bytes: int,
        handshake_timeout: float,
        backoff: Backoff | None = None,
    ) -> None:
        """What the server says goes to ``receiver``; when the session ends, its requests in flight get why."""
        super().__init__(spec, receiver, max_bytes=max_bytes, handshake_timeout=handshake_timeout)
        self.backoff = backoff or Backoff()
        self._endpoint: str | None = None
        self._open = anyio.Event()
        self._tried = anyio.Event()
        """Set once the first attempt to open the stream succeeded or failed: messages then wait no more."""
        self._down = replies.STREAM_NOT_OPEN
        self._streams = 0

    def down_reason(self) -> str | None:
        """Why no message can go now, or None while the session is open."""
        return None if self._endpoint is not None else self._down

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the session's event stream open until cancelled."""
        task_status.started()
        failures = 0
        try:
            while True:
                reason = await self._listen()
                failures = 0 if self._endpoint is not None else failures + 1
                await self._lost(reason)
                await anyio.sleep(self.backoff.delay(max(failures, 1)))
        finally:
            with anyio.CancelScope(shield=True):
                await self.exchange.aclose()

    async def _listen(self) -> str:
        """One event stream, from its opening to its end; why it ended."""
        async with anyio.create_task_group() as tg:  # the handshake replayed to a reopened session runs beside it
            try:
                await self._read(tg)
                reason = replies.upstream(self.label, replies.STREAM_CLOSED)
            except UpstreamHttpError as error:
                reason = str(error)
            tg.cancel_scope.cancel()
        return reason

    async def _read(self, tg: anyio.abc.TaskGroup) -> None:
        async with self.exchange.send("GET", [(b"accept", EVENTS)]) as response:
            if not response.is_success:
                await drain(response)
                raise UpstreamHttpError(f"upstream {self.label} answered HTTP {response.status_code} to GET")
            splitter = sse.EventSplitter(self.max_bytes)
            try:
                async for chunk in response.chunks():
                    for event in splitter.feed(chunk):
                        await self._event(event, tg)
            except ValueError as error:  # an event over the size limit: the stream cannot go on
                raise UpstreamHttpError(f"upstream {self.label}: {error}") from None

    async def _event(self, event: bytes, tg: anyio.abc.TaskGroup) -> None:
        data = sse.data_of(event)
        if data is None:
            return
        if (sse.field_of(event, b"event") or b"message") == b"endpoint":
            self._opened(data.decode("utf-8", "replace").strip(), tg)
            return
        item = parse(data)
        if not isinstance(item, Message):
            if item is not None:
                logger.warning("upstream %s sent an event that is no JSON-RPC message; ignored", self.label)
            return
        if not self._own.answered(item):
            await self.receiver.from_upstream(item)

    def _opened(self, endpoint: str, tg: anyio.abc.TaskGroup) -> None:
        """The server named where messages go: the session is open (again)."""
        url = urljoin(self.spec.url, endpoint)
        here, there = urlsplit(self.spec.url), urlsplit(url)
        if (here.scheme, here.netloc) != (there.scheme, there.netloc):
            self._down = replies.upstream(self.label, replies.FOREIGN_ENDPOINT)
            logger.warning("%s", self._down)
            return
        self._endpoint = (there.path or "/") + (f"?{there.query}" if there.query else "")
        self._tried.set()
        self._streams += 1
        if self._streams > 1 and self.initialize is not None:
            tg.start_soon(self._reopened)
        else:
            self._open.set()

    async def _reopened(self) -> None:
        """A new session for the client's old one: its handshake replayed first."""
        assert self.initialize is not None
        answer = await self._ask("initialize", self.initialize.get("params"), within=self.handshake_timeout)
        if answer is None or "result" not in answer:
            self._down = replies.upstream(self.label, replies.NO_HANDSHAKE_AGAIN)
            logger.warning("%s", self._down)
            return
        if self.initialized is not None:
            await self._post(self.initialized.rstrip(b"\n"))
        self.restarts += 1
        self._open.set()
        logger.info("reopened the session with upstream %s", self.label)
        await self.receiver.upstream_restarted()

    async def _lost(self, reason: str) -> None:
        self._endpoint = None
        self._open = anyio.Event()
        self._down = reason
        self._tried.set()
        self._own.give_up()
        logger.warning("%s; opening it again", reason)
        await self.receiver.upstream_lost(reason)

    async def send_message(self, message: Message) -> None:
        """POST one message to the session's endpoint, in order with the ones before it.

        At start it waits for the first attempt to open the stream; while the stream is being
        opened again after it ended, messages fail at once with the reason, as for a dead child.

        Raises:
            UpstreamDownError: the session is not open, or the server refused the message.
        """
        if not self._open.is_set():
            with anyio.move_on_after(self.handshake_timeout):
                await self._tried.wait()
                if self._endpoint is not None:
                    await self._open.wait()  # the handshake is being replayed
        if not self._open.is_set():
            raise UpstreamDownError(replies.upstream(self.label, replies.not_connected(self._down)))
        await self._post(message.line().rstrip(b"\n"))

    async def _post(self, body: bytes) -> None:
        endpoint = self._endpoint
        if endpoint is None:
            raise UpstreamDownError(replies.upstream(self.label, replies.not_connected(self._down)))
        headers = [(b"content-type", JSON), (b"accept", JSON + b", " + EVENTS)]
        async with self._order:
            try:
                async with self.exchange.send("POST", headers, body, target=endpoint) as response:
                    await drain(response)
                    if not response.is_success:
                        status = response.status_code
                        raise UpstreamDownError(replies.upstream(self.label, replies.http_refused(status)))
            except UpstreamHttpError as error:
                raise UpstreamDownError(str(error)) from None

    async def wait_open(self, within: float) -> bool:
        """Wait up to ``within`` seconds for the event stream to open; whether it is open."""
        with anyio.move_on_after(within):
            await self._open.wait()
        return self._open.is_set()

    async def request(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        """A request of the guard's own: the answer's body, or None (no answer in time, or the session is down)."""
        if not self._open.is_set():
            return None
        return await self._ask(method, params, within=within)

    async def _ask(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        async def post(message: Message) -> None:
            await self._post(message.line().rstrip(b"\n"))

        try:
            return await self._own.ask(
                method, params, post, within=within if math.isfinite(within) else self.handshake_timeout
            )
        except UpstreamDownError:
            return None

    def learn_tools(self, tools: list[Any]) -> None:
        """Nothing to learn: every message goes the same way."""

    def end_input(self) -> None:
        """Nothing to close: the session ends with the guard (its event stream closes)."""

    async def wait_ended(self) -> None:
        """The answers still due come on the event stream while it is open."""
