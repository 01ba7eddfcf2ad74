"""One stdio upstream for the message relay: its child process, restarted after a crash, and the guard's own requests.

The client's own ``initialize`` reaches the first child as it was sent. When the child dies,
the next message after a backoff delay starts a new one and replays that ``initialize``
(and ``notifications/initialized``) itself, so the client's session goes on. Until the delay
has passed, messages fail at once with the reason, so a crash-looping server is never
hammered. Requests the guard sends itself (the replayed ``initialize``, a ``tools/list`` to
learn annotations) carry ids of their own and their answers never reach the client.

Nothing waits for the child to read its stdin (see :class:`~mcp_loop_guard.proxy.wire.outbox.Outbox`). A child
that keeps sending requests but has read none of its input for :data:`STUCK_SECONDS` cannot
be reading their answers either: it is stopped as a crash, with that reason, so the calls in
flight get an error instead of waiting forever.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc

from mcp_loop_guard.config import ServerSpec, StdioServer
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.backoff import HANDSHAKE_TIMEOUT, Backoff
from mcp_loop_guard.proxy.upstream.channel import Receiver, UpstreamDownError
from mcp_loop_guard.proxy.upstream.child import ChildProcess, UpstreamStartError, spawn
from mcp_loop_guard.proxy.wire.feed import feed_lines
from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized
from mcp_loop_guard.proxy.wire.messages import Message, RequestId, own_request_id, parse

logger = logging.getLogger(__name__)

STUCK_SECONDS = 10.0
"""How long a child that sends requests may leave its input unread before it is stopped."""


@dataclass
class _Own:
    """A request of the guard's own, awaiting its answer."""

    done: anyio.Event
    child: ChildProcess
    """The child asked: only its end releases the request (a replaced child ends after its successor started)."""
    answer: dict[str, Any] | None = None


class StdioUpstream:
    """The child behind a stdio relay, as a line channel that restarts itself."""

    def __init__(
        self,
        spec: StdioServer,
        receiver: Receiver,
        *,
        max_bytes: int,
        first: ChildProcess | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        backoff: Backoff | None = None,
        lenient: bool = False,
    ) -> None:
        """``first``: a child already started (at process start, before the event loop).

        ``lenient``: a command that cannot start at first is reported and tried again at the
        next message (one of several servers), instead of failing :meth:`run`.
        """
        self.spec = spec
        self.receiver = receiver
        self.lenient = lenient
        self.max_bytes = max_bytes
        self.child = first
        self.handshake_timeout = handshake_timeout
        self.backoff = backoff or Backoff()
        self.initialize: dict[str, Any] | None = None
        """The client's initialize request, replayed to a restarted child."""
        self.initialized: bytes | None = None
        """The client's notifications/initialized line."""
        self.restarts = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._own: dict[str, _Own] = {}
        self._failures = 0
        self._retry_at = 0.0
        self._down_reason = ""
        self._lock = anyio.Lock()
        self._asked_at = -math.inf
        """When the child last sent a request (of its own: sampling, roots, ping)."""

    @property
    def label(self) -> str:
        """How messages name the upstream: its server's name (its command line is for the log only)."""
        return f"`{self.spec.public_name}`"

    def label_for(self, ident: RequestId) -> str:
        """Every request goes to the one child."""
        return self.label

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the child (and its successors) until cancelled; stop the last one on the way out.

        Raises:
            UpstreamStartError: the command cannot be started (unless ``lenient``).
        """
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self.child is None:
                    try:
                        self.child = self._spawn()
                    except UpstreamStartError as error:
                        if not self.lenient:
                            raise
                        self._start_failed(error)
                if self.child is not None:
                    tg.start_soon(self._serve, self.child)
                task_status.started()
                await anyio.sleep_forever()
        finally:
            if self.child is not None:
                await self.child.stop()

    def _spawn(self) -> ChildProcess:
        spec = self.spec
        return spawn(
            [spec.command, *spec.args], name=spec.public_name, env=spec.env, cwd=spec.cwd, display=spec.display
        )

    async def _serve(self, child: ChildProcess) -> None:
        """Read one child's output until it ends, then report its exit."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.watch)
            tg.start_soon(child.relay_stderr)
            tg.start_soon(self._watch_input, child)
            try:
                await feed_lines(child.from_child, LineReader(self.max_bytes), self._take)
            except OSError as error:
                logger.debug("reading upstream stdout failed: %s", error)
            with anyio.move_on_after(1.0):  # the exit status arrives a moment after stdout closes
                await child.exited.wait()
            tg.cancel_scope.cancel()
        self._went_down(child)
        for own in self._own.values():
            if own.child is child:
                own.done.set()
        await self.receiver.upstream_lost(self.down_reason() or replies.upstream(self.label, child.describe_exit()))

    async def _take(self, line: bytes | Oversized) -> None:
        parsed = line if isinstance(line, Oversized) else parse(line)
        if parsed is None:
            return
        if isinstance(parsed, Message):
            if parsed.is_request:
                self._asked_at = anyio.current_time()
            ident = parsed.body.get("id")
            own = self._own.pop(ident, None) if isinstance(ident, str) and parsed.is_response else None
            if own is not None:
                own.answer = parsed.body
                own.done.set()
                return
        await self.receiver.from_upstream(parsed)

    async def _watch_input(self, child: ChildProcess) -> None:
        """Stop the child once it asks without reading (see the module's text): a crash, from that moment."""
        await child.input_stuck(STUCK_SECONDS, lambda since: self._asked_at > since)
        if child is self.child:
            self._failed(replies.stuck(STUCK_SECONDS))
        child.from_child.close()  # the rest of its flood is not read: its calls are answered now, with the reason
        await child.stop(eof_grace=0)

    def _went_down(self, child: ChildProcess) -> None:
        if child is not self.child or child.stopping:
            return
        self._failed(child.describe_exit())

    def _failed(self, how: str) -> None:
        """The child is gone (``how``): no new one before the backoff delay, and messages fail with the reason."""
        self._failures += 1
        self._down_reason = replies.upstream(self.label, how)
        delay = self.backoff.delay(self._failures)
        self._retry_at = anyio.current_time() + delay
        logger.warning("%s; it is started again on the next request, no sooner than in %.1fs", self._down_reason, delay)

    def down_reason(self) -> str | None:
        """Why the upstream cannot take messages now, or None when it can."""
        return self._down_reason or None

    async def send_message(self, message: Message) -> None:
        """Write one message to the child (see :meth:`send`)."""
        await self.send(message.line())

    def learn_tools(self, tools: list[Any]) -> None:
        """Nothing to learn: a child's stdio carries every message the same way."""

    def end_input(self) -> None:
        """Close the child's stdin: a server exits at the end of its input."""
        if self.child is not None:
            self.child.close_stdin()

    async def wait_ended(self) -> None:
        """Wait for the child to exit."""
        if self.child is not None:
            await self.child.exited.wait()

    async def send(self, line: bytes) -> None:
        """Write one line to the child, starting a new child first if the last one died.

        Raises:
            UpstreamDownError: the child is dead and the backoff delay has not passed, or a new one failed to start.
        """
        child = self.child
        if child is None or child.exited.is_set() or self._down_reason:
            child = await self._ensure()
        try:
            await child.write(line)
        except OSError as error:
            raise UpstreamDownError(
                replies.upstream(self.label, replies.stopped_reading(error.strerror or error))
            ) from None

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the one server's new command replaces the old one (see :meth:`replace`)."""
        if len(servers) != 1 or not isinstance(servers[0], StdioServer):
            return replies.ONE_AND_SEVERAL if len(servers) > 1 else replies.OTHER_SERVERS
        await self.replace(servers[0])
        return None

    async def replace(self, spec: StdioServer) -> None:
        """Run another command from now on (a config reload): stop the child, start the new one at once.

        Requests in flight on the old child get an error saying it was replaced; the client's
        handshake is replayed to the new child, as after a crash.
        """
        async with self._lock:
            old, self.spec = self.child, spec
            self._failures, self._retry_at = 0, 0.0
            self._down_reason = replies.upstream(self.label, replies.REPLACED)
            if old is not None:
                await old.stop(eof_grace=0.2)
        try:
            await self._ensure()
        except UpstreamDownError as error:
            logger.warning("the reloaded upstream did not start: %s", error)

    async def _ensure(self) -> ChildProcess:
        async with self._lock:
            child = self.child
            if child is not None and not child.exited.is_set() and not self._down_reason:
                return child
            if anyio.current_time() < self._retry_at:
                raise UpstreamDownError(self._down_reason)
            if child is not None:
                await child.stop(eof_grace=0.05)
            try:
                child = self._spawn()
            except UpstreamStartError as error:
                self._start_failed(error)
                raise UpstreamDownError(str(error)) from None
            self.child = child
            self._down_reason = ""
            self.restarts += 1
            assert self._tg is not None
            self._tg.start_soon(self._serve, child)
            if self.initialize is not None:
                await self._replay(child)
            logger.info("restarted upstream %s", self.label)
            self._failures = 0
            self._tg.start_soon(self.receiver.upstream_restarted)
            return child

    def _start_failed(self, error: UpstreamStartError) -> None:
        """The command could not be started: no new attempt before the backoff delay."""
        logger.warning("%s (command: `%s`)", error, error.command_line)
        self._failures += 1
        self._down_reason = str(error)
        self._retry_at = anyio.current_time() + self.backoff.delay(self._failures)

    async def _replay(self, child: ChildProcess) -> None:
        """Repeat the client's handshake to a new child, so the client's session goes on."""
        assert self.initialize is not None
        params = self.initialize.get("params")
        answer = await self.request("initialize", params, within=self.handshake_timeout, child=child)
        if answer is None or "result" not in answer:
            why = child.describe_exit() if child.exited.is_set() else replies.NO_HANDSHAKE_AGAIN
            self._down_reason = replies.upstream(self.label, why)
            raise UpstreamDownError(self._down_reason)
        if self.initialized is not None:
            await child.write(self.initialized)

    async def request(
        self, method: str, params: Any, *, within: float, child: ChildProcess | None = None
    ) -> dict[str, Any] | None:
        """A request of the guard's own: the answer's body, or None (no answer in time, or the child died)."""
        target = child or self.child
        if target is None or target.exited.is_set():
            return None
        ident = own_request_id()
        own = _Own(anyio.Event(), target)
        self._own[ident] = own
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            body["params"] = params
        try:
            await target.write(Message(body).line())
            with anyio.move_on_after(within if math.isfinite(within) else HANDSHAKE_TIMEOUT):
                await own.done.wait()
        except OSError:
            return None
        finally:
            self._own.pop(ident, None)
        return own.answer
