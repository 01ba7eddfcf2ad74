"""File descriptors read and written on the event loop, without a thread hop per line.

Pipes and sockets (what every MCP client gives a stdio server) are made non-blocking and
waited on with the loop's own readiness calls; files and terminals fall back to a thread per
read or write. While a stdio guard serves, fd 0 reads /dev/null and fd 1 points at stderr, so
a stray print or an inherited descriptor can never corrupt the protocol channel.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - a descriptor watched across reads is asyncio's add_reader; anyio has none
import errno
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.to_thread

from mcp_loop_guard.posix import PIPE_BYTES, enlarge_pipe, set_nonblocking
from mcp_loop_guard.proxy.wire.buffer import ReadBuffer

__all__ = ["PIPE_BYTES", "Fd", "Writer", "claimed_stdio", "enlarge_pipe"]

READ_CHUNK = 1 << 16
_OWN_BUFFER = 1 << 17
"""From this read size on, reads go into a buffer kept across reads (see :class:`ReadBuffer`)."""


class Fd:
    """One private descriptor, read or written on the loop when it can be non-blocking."""

    def __init__(self, fd: int, read_size: int = READ_CHUNK) -> None:
        """Take over ``fd`` (closing it stays the owner's job)."""
        self.fd = fd
        self.read_size = read_size
        self.closed = False
        self.on_loop = set_nonblocking(fd)
        self.waiter: asyncio.Future[bytes] | None = None
        """What the reader waits on; closing the descriptor completes it with end of file."""
        self.before_close: Callable[[], None] | None = None
        """Told first when the descriptor is closed (a reader watching it its own way lets go of it)."""
        self._early: bytes | None = None
        """A chunk the loop read for a reader that was cancelled before it took it."""
        self._writing: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None
        """The loop writing the rest of a message as room comes, and the writer waiting for its end."""
        self._watched: asyncio.AbstractEventLoop | None = None
        """The loop watching the descriptor for reading, between one read and the next."""
        self.grow = False
        """Enlarge the pipe the first time a message does not fit (:func:`enlarge_pipe`)."""
        self.buffer = ReadBuffer.create(read_size) if read_size >= _OWN_BUFFER else None

    def close(self) -> None:
        """Close the descriptor, once, waking a task that waits on it first.

        The number may be reused by another file at once: a reader still waiting on it would
        then wait on (or read) the new file, so it is woken to see end of file instead.
        """
        if not self.closed:
            self.closed = True
            self.unwatch()
            if self.before_close is not None:
                self.before_close()
            self._end_write(BrokenPipeError(errno.EPIPE, "the descriptor was closed"))
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(b"")
            if self.on_loop:
                with suppress(RuntimeError):  # no event loop (closed at exit): nobody can be waiting
                    anyio.notify_closing(self.fd)
            with suppress(OSError):
                os.close(self.fd)
            if self.buffer is not None:
                self.buffer.close()

    async def read(self) -> bytes:
        """The next chunk; b"" at end of file, or once the descriptor was closed.

        While the loop watches the descriptor, the chunk is read by the loop's readiness
        callback itself and handed over: reading here first would find the pipe empty (the
        peer has not answered yet) and cost a system call, and the readiness the loop
        reported for data already read would wake the reader once more for nothing.

        Raises:
            OSError: the descriptor failed.
        """
        if not self.on_loop:
            return await anyio.to_thread.run_sync(os.read, self.fd, self.read_size, abandon_on_cancel=True)
        if self._early is not None:
            chunk, self._early = self._early, None
            return chunk
        if self.closed:
            return b""
        loop = asyncio.get_running_loop()
        if self._watched is not loop:
            try:  # not watched (the first read, or nobody read for a while): the data may be there already
                return self.read_now()
            except BlockingIOError:
                self.unwatch()
                loop.add_reader(self.fd, self._ready)
                self._watched = loop
        waiter: asyncio.Future[bytes] = loop.create_future()
        self.waiter = waiter
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._early = waiter.result()  # read for us, then the reader was cancelled: keep it
            raise
        finally:
            self.waiter = None

    def _ready(self) -> None:
        """The descriptor can be read: read it for the waiting reader; nobody waiting ends the watch.

        A descriptor nobody reads must not keep the loop busy, and its data stays in the pipe
        (backpressure) until the next read.
        """
        waiter = self.waiter
        if waiter is None or waiter.done():
            self.unwatch()
            return
        try:
            chunk = self.read_now()
        except BlockingIOError:
            return  # readiness reported for data that is gone
        except OSError as error:
            waiter.set_exception(error)
            return
        waiter.set_result(chunk)

    def read_now(self) -> bytes:
        """One read of what is there, without waiting (a large read size through :class:`ReadBuffer`).

        Raises:
            BlockingIOError: nothing to read now.
            OSError: the descriptor failed.
        """
        if self.buffer is None:
            return os.read(self.fd, self.read_size)
        return self.buffer.read(self.fd)

    def unwatch(self) -> None:
        """Stop the loop watching the descriptor for :meth:`read` (another reader takes over, or nobody reads)."""
        if self._watched is not None:
            with suppress(RuntimeError, ValueError, OSError):  # a loop already closed
                self._watched.remove_reader(self.fd)
            self._watched = None

    def write_now(self, data: bytes | memoryview) -> int:
        """Write what fits without waiting; the number of bytes written (0 when the pipe is full)."""
        if self.closed:
            raise BrokenPipeError(errno.EPIPE, "the descriptor was closed")
        if not self.on_loop:
            return 0
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0

    async def write(self, data: bytes | memoryview) -> None:
        """Write all of ``data``.

        What does not fit in the pipe is written by the loop's writability callback, as much
        as fits each time the reader makes room, and the writer is woken once, at the end: a
        megabyte through a 64 KB pipe is sixteen writes but one wake-up.

        Raises:
            OSError: the reader went away (BrokenPipeError) or the descriptor failed.
        """
        view = memoryview(data)
        if not self.on_loop:
            while view:
                if self.closed:
                    raise BrokenPipeError(errno.EPIPE, "the descriptor was closed")
                view = view[await anyio.to_thread.run_sync(os.write, self.fd, view) :]
            return
        view = view[self.write_now(view) :]
        if not view:
            return
        if self.grow:
            self.grow = False
            enlarge_pipe(self.fd)
            view = view[self.write_now(view) :]
            if not view:
                return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def writable() -> None:
            nonlocal view
            try:
                while view:
                    view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                return  # the reader has not made room for all of it yet
            except OSError as error:
                self._end_write(error)
                return
            self._end_write(None)

        self._writing = (loop, done)
        loop.add_writer(self.fd, writable)
        try:
            await done
        finally:
            if self._writing is not None and self._writing[1] is done:
                self._end_write(None)

    def _end_write(self, error: OSError | None) -> None:
        """Stop watching for room, and wake the writer (with ``error``, when there is one)."""
        if self._writing is None:
            return
        loop, done = self._writing
        self._writing = None
        with suppress(RuntimeError, ValueError, OSError):  # a loop already closed
            loop.remove_writer(self.fd)
        if not done.done():
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)


class Writer:
    """Whole messages onto one descriptor from several tasks, never interleaved.

    A message that fits in the pipe is written at once, without a task switch (the common
    case); otherwise the writer takes the descriptor until its message is out, and hands it
    to the next waiting writer in order.
    """

    def __init__(self, fd: Fd) -> None:
        """Serialize the writes to ``fd``."""
        self.fd = fd
        self._busy = False
        self._waiters: deque[anyio.Event] = deque()

    async def write(self, data: bytes) -> None:
        """Write one whole message.

        Raises:
            OSError: the reader went away or the descriptor failed.
        """
        rest: bytes | memoryview = data
        if self._busy:
            turn = anyio.Event()
            self._waiters.append(turn)
            try:
                await turn.wait()
            except BaseException:
                if turn.is_set():
                    self._hand_on()
                else:
                    self._waiters.remove(turn)
                raise
        else:
            written = self.fd.write_now(data)
            if written == len(data):
                return
            rest = memoryview(data)[written:]  # a view: the rest of a large message is not copied
            self._busy = True
        try:
            await self.fd.write(rest)
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the next writer owns the descriptor now
        else:
            self._busy = False


@asynccontextmanager
async def claimed_stdio() -> AsyncIterator[tuple[Fd, Fd]]:
    """Move the wire to private descriptors; point fd 0 at /dev/null and fd 1 at stderr."""
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    for fd in (wire_in, wire_out):
        os.set_inheritable(fd, False)
    stdin, stdout = Fd(wire_in), Fd(wire_out)
    stdout.grow = True  # a large result is then handed over at once, not 64 KB per wake-up
    try:
        yield stdin, stdout
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (saved_in, saved_out):
            os.close(fd)
        stdin.close()
        stdout.close()
