"""Whole lines for one pipe, written in order as the reader takes them: a sender never waits for the reader.

A child's stdin is written by every part of the relay: the client's messages, the answers
the guard gives the upstream's own requests, its cancellations. If any of them waited for
the pipe, the task that reads the other direction would wait with it: an upstream that
floods requests without reading its stdin would stop the guard reading both the upstream's
stdout and the client's stdin (and with it the client's end of file). So a line is written
at once when it fits, and otherwise queued behind the others and written by the event loop
as the reader makes room. The queue is bounded by what the reader is doing: up to
:data:`SOFT_BYTES` always, more only while the reader keeps taking bytes (a large message
read slowly), never more than :data:`HARD_BYTES`. A line past that is refused
(:class:`BacklogFullError`): a request then gets an error at once, anything else is dropped.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - the loop's writability callback; anyio has none
import errno
import os
from collections import deque
from collections.abc import Callable
from contextlib import suppress

import anyio

from mcp_loop_guard.proxy.wire.fd import Fd

__all__ = ["HARD_BYTES", "SOFT_BYTES", "BacklogFullError", "Outbox", "stuck"]

SOFT_BYTES = 1 << 20
"""Queued bytes always accepted, whether or not the reader is reading."""
HARD_BYTES = 256 << 20
"""Queued bytes never exceeded, however steadily the reader reads."""
TAKING_SECONDS = 1.0
"""Past :data:`SOFT_BYTES`, lines are queued only if the reader took bytes this recently."""


class BacklogFullError(OSError):
    """The reader has not taken what waits for it: the line was not queued."""

    def __init__(self, waiting: int, stalled: float) -> None:
        """``waiting`` bytes queued, the last taken ``stalled`` seconds ago."""
        super().__init__(errno.ENOBUFS, f"{waiting / 1e6:.1f} MB of its input have waited unread for {stalled:.0f}s")


class Outbox:
    """One pipe's writer: lines in order, never interleaved, without ever waiting."""

    def __init__(
        self, fd: Fd, *, soft: int = SOFT_BYTES, hard: int = HARD_BYTES, taking: float = TAKING_SECONDS
    ) -> None:
        """Write to ``fd`` (a pipe; anything else is written at once, blocking); the bounds as in the module's text."""
        self.fd = fd
        self.soft, self.hard, self.taking = soft, hard, taking
        self.fd.before_close = self._forget
        self._queue: deque[bytes | memoryview] = deque()
        self._queued = 0
        self._error: OSError | None = None
        self._close_when_empty = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stalled_since: float | None = None
        """While lines wait: when the reader last took bytes (or the first line had to wait)."""
        self._waiting: anyio.Event | None = None

    @property
    def waiting(self) -> anyio.Event:
        """Set while lines wait for the reader (made in the event loop, on first use; a new one once they are out)."""
        if self._waiting is None:
            self._waiting = anyio.Event()
        return self._waiting

    @property
    def queued(self) -> int:
        """Bytes waiting for the reader."""
        return self._queued

    def put(self, line: bytes) -> None:
        """Write one whole line after the ones before it, now or as the reader makes room.

        Raises:
            BacklogFullError: too much waits for a reader that is not reading (see the module's text).
            OSError: the reader went away (BrokenPipeError) or the descriptor failed or was closed.
        """
        if self._error is not None:
            raise self._error
        if self.fd.closed or self._close_when_empty:
            raise BrokenPipeError(errno.EPIPE, "the descriptor was closed")
        if not self.fd.on_loop:
            view = memoryview(line)
            while view:
                view = view[os.write(self.fd.fd, view) :]
            return
        if not self._queue:
            written = self.fd.write_now(line)
            if written == len(line):
                return
            self._start(memoryview(line)[written:])
            return
        now = anyio.current_time()
        stalled = now - (self.stalled_since or now)
        if self._queued >= self.hard or (self._queued >= self.soft and stalled >= self.taking):
            raise BacklogFullError(self._queued, stalled)
        self._queue.append(line)
        self._queued += len(line)

    def _start(self, rest: memoryview) -> None:
        self._queue.append(rest)
        self._queued = len(rest)
        self._loop = asyncio.get_running_loop()
        self.stalled_since = self._loop.time()
        self._loop.add_writer(self.fd.fd, self._drain)
        self.waiting.set()

    def _drain(self) -> None:
        """The reader made room: write as much as fits, in order."""
        assert self._loop is not None
        took = False
        try:
            while self._queue:
                head = self._queue[0]
                written = os.write(self.fd.fd, head)
                took = True
                self._queued -= written
                if written < len(head):
                    self._queue[0] = memoryview(head)[written:]
                    break
                self._queue.popleft()
        except BlockingIOError:
            pass
        except OSError as error:
            self._error = error
            self._forget()
            return
        if took:
            self.stalled_since = self._loop.time()
        if not self._queue:
            self._forget()
            if self._close_when_empty:
                self.fd.close()

    def _forget(self) -> None:
        """Stop writing: the queue is empty, the reader is gone or the descriptor is being closed."""
        if self._loop is not None:
            with suppress(RuntimeError, ValueError, OSError):  # a loop already closed
                self._loop.remove_writer(self.fd.fd)
            self._loop = None
        self._queue.clear()
        self._queued = 0
        self.stalled_since = None
        if self._waiting is not None and self._waiting.is_set():
            self._waiting = None

    def close(self, *, drained: bool = True) -> None:
        """Close the descriptor: once what waits is written (``drained``), or now, dropping it."""
        if drained and self._queue and self._error is None:
            self._close_when_empty = True
            return
        self.fd.close()


async def stuck(outbox: Outbox, after: float, counts: Callable[[float], bool]) -> None:
    """Return once lines have waited ``after`` seconds with the reader taking none, and ``counts`` says it matters.

    ``counts(t)``: whether the reader's silence since loop time ``t`` is a fault (a reader that
    is only busy is not one), asked each time the wait is up.
    """
    while True:
        await outbox.waiting.wait()
        while (since := outbox.stalled_since) is not None:
            left = since + after - anyio.current_time()
            if left <= 0 and counts(since):
                return
            await anyio.sleep(max(left, after / 10))
