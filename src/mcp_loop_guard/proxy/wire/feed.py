"""A descriptor's lines handled in the event loop's readiness callback, without waking a task per message.

A reader task that waits for each chunk costs, per message, a future, a wake-up, a second
pass of the event loop and the resumption of its whole chain of coroutines: about as much
CPU as the relay's own work on a small call. Here the loop's readiness callback reads the
chunk and runs each line's handler at once, in place, as far as it goes without waiting
(the common case: parse, judge, write). A handler that has to wait (a pipe full, a request
of the guard's own) is continued by the task that called :func:`feed_lines`, the *host*;
reading pauses until it and the lines read with it are done, so lines are handled one at a
time and in order, exactly as by a loop of ``await handle(line)``.

While a handler runs in the callback, the host is the current task (anyio's cancel scopes,
locks and ``current_task()`` see what they would in the host), and every handler runs in
one context, the host's copy, whichever half of it the callback ran.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - readiness callbacks and the current task are asyncio's; anyio has neither
import contextvars
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol

from mcp_loop_guard.proxy.wire.fd import Fd
from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized

__all__ = ["Chunks", "Handler", "feed_lines"]

Handler = Callable[[bytes | Oversized], Coroutine[Any, Any, None]]
"""What one line is handed to: it runs to its end before the next line is."""

_enter_task: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = getattr(
    asyncio.tasks, "_enter_task", None
)
_leave_task: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] | None = getattr(
    asyncio.tasks, "_leave_task", None
)
"""How asyncio marks a task current while it runs (its eager tasks use them); without them, lines go to the task."""


class Chunks(Protocol):
    """Anything read chunk by chunk (a descriptor, or a stand-in for one in tests)."""

    async def read(self) -> bytes:
        """The next chunk; b"" at the end."""
        ...


async def feed_lines(fd: Fd | Chunks, lines: LineReader, handle: Handler) -> None:
    """Read ``fd`` to its end, handing each line (and a last one without newline) to ``handle``, in order.

    A descriptor the loop cannot watch (a file, a terminal), or anything else read by chunks,
    is read by the calling task itself.

    Raises:
        OSError: reading failed (the lines read before were handled).
        Exception: what a handler raised (the lines after it are not handled).
    """
    host = asyncio.current_task()
    if not isinstance(fd, Fd) or not fd.on_loop or host is None or _enter_task is None or _leave_task is None:
        while chunk := await fd.read():
            for line in lines.feed(chunk):
                await handle(line)
        for line in _rest(lines):
            await handle(line)
        return
    await _Feeder(fd, lines, handle, host).run()


def _rest(lines: LineReader) -> list[bytes | Oversized]:
    """At the end: the last line, when the stream did not end with a newline."""
    return [line for line in lines.feed(b"\n") if line != b""]


class _Feeder:
    def __init__(self, fd: Fd, lines: LineReader, handle: Handler, host: asyncio.Task[Any]) -> None:
        self.fd = fd
        self.lines = lines
        self.handle = handle
        self.host = host
        self.loop = asyncio.get_running_loop()
        self.context = contextvars.copy_context()
        self.waiting: tuple[Coroutine[Any, Any, None], Any] | None = None
        """A handler that had to wait, and what it waits on: the host continues it."""
        self.backlog: deque[bytes | Oversized] = deque()
        self.ended = False
        self.error: BaseException | None = None
        self.wake: asyncio.Future[bytes] | None = None
        self.armed = False

    async def run(self) -> None:
        try:
            while True:
                if self.error is not None:
                    raise self.error
                if self.ended or self.fd.closed:
                    return
                if self.waiting is not None:
                    coro, awaited = self.waiting
                    self.waiting = None
                    await _Continued(coro, awaited, self.context)
                    continue
                if self.backlog:
                    line = self.backlog.popleft()
                    await _Continued(self.handle(line), None, self.context, started=False)
                    continue
                self._arm()
                self.wake = self.loop.create_future()
                self.fd.waiter = self.wake  # closing the descriptor wakes us
                try:
                    await self.wake
                finally:
                    self.fd.waiter = self.wake = None
        finally:
            self._disarm()

    def _arm(self) -> None:
        if not self.armed and not self.fd.closed:
            self.fd.unwatch()
            self.loop.add_reader(self.fd.fd, self._ready)
            self.fd.before_close = self._disarm  # before its number can be reused
            self.armed = True

    def _disarm(self) -> None:
        if self.armed:
            self.armed = False
            self.fd.before_close = None
            self.loop.remove_reader(self.fd.fd)

    def _pause(self) -> None:
        """Stop reading and let the host take over (a handler waits, the end came, or reading failed)."""
        self._disarm()
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(b"")

    def _ready(self) -> None:
        try:
            chunk = self.fd.read_now()
        except BlockingIOError:
            return
        except OSError as error:
            self.error = error
            self._pause()
            return
        if not chunk:
            self.ended = True
        try:
            items = self.lines.feed(chunk) if chunk else _rest(self.lines)
        except Exception as error:  # a fault of the framing: raised in the host, never lost in the loop's log
            self.error = error
            self._pause()
            return
        for index, item in enumerate(items):
            if not self._step(item):
                self.backlog.extend(items[index + 1 :])
                self._pause()
                return
        if self.ended:
            self._pause()

    def _step(self, item: bytes | Oversized) -> bool:
        """Run one line's handler in place; False when it has to wait (or failed): the host takes over."""
        assert _enter_task is not None
        assert _leave_task is not None
        coro = self.handle(item)
        _enter_task(self.loop, self.host)
        try:
            awaited = self.context.run(coro.send, None)
        except StopIteration:
            return True
        except BaseException as error:  # raised in the host, as a task's loop would
            self.error = error
            return False
        finally:
            _leave_task(self.loop, self.host)
        self.waiting = (coro, awaited)
        return False


class _Continued:
    """Await a coroutine the callback started (it yielded ``awaited``), in its context, from the host."""

    def __init__(
        self, coro: Coroutine[Any, Any, None], awaited: Any, context: contextvars.Context, *, started: bool = True
    ) -> None:
        self.coro = coro
        self.awaited = awaited
        self.context = context
        self.started = started

    def __await__(self) -> Generator[Any, Any, None]:
        coro, run = self.coro, self.context.run
        try:
            awaited = self.awaited if self.started else run(coro.send, None)
            while True:
                try:
                    sent = yield awaited
                except BaseException as error:  # handed to the coroutine, as a task would
                    awaited = run(coro.throw, error)
                else:
                    awaited = run(coro.send, sent)
        except StopIteration:
            return
