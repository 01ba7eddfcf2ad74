"""Serve MCP on our own stdin/stdout without a thread hop per line.

The SDK's stdio server reads and writes through worker threads (one hop per
line read, two per line written), which dominated a proxy's per-call cost.
When stdin/stdout are pipes or sockets (the case for every MCP client), this
transport uses non-blocking descriptors on the event loop instead; for files
and terminals it falls back to a thread per read or write.

While serving, fd 0 reads /dev/null and fd 1 points at stderr, so a stray print
or an inherited descriptor can never corrupt the protocol channel.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from mcp_loop_guard.proxy.jsonlines import (
    INVALID_REQUEST,
    BadLine,
    LineReader,
    Oversized,
    encode,
    error_line,
    malformed_answer,
    parse_line,
    response_id,
)

logger = logging.getLogger(__name__)

_READ_CHUNK = 1 << 16


@dataclass
class StdioChannel:
    """The downstream stream pair plus the one control the proxy needs: close after a reply."""

    read_stream: MemoryObjectReceiveStream[SessionMessage | Exception]
    write_stream: MemoryObjectSendStream[SessionMessage]
    closed: anyio.Event = field(default_factory=anyio.Event)
    """Set once the channel is finished: client EOF, or a close-after reply written."""
    eof: anyio.Event = field(default_factory=anyio.Event)
    """Set when the client closed stdin: the session must end soon, whatever is in flight."""
    _close_after: set[types.RequestId] = field(default_factory=set)

    def close_after_reply(self, request_id: types.RequestId) -> None:
        """Close stdout right after the response to ``request_id`` is written."""
        self._close_after.add(request_id)


def _is_stream(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class Fd:
    """One private descriptor, read or written on the loop when it can be non-blocking."""

    def __init__(self, fd: int, read_size: int = _READ_CHUNK) -> None:
        self.fd = fd
        self.read_size = read_size
        self.on_loop = _is_stream(fd)
        if self.on_loop:
            os.set_blocking(fd, False)

    async def read(self) -> bytes:
        if not self.on_loop:
            return await anyio.to_thread.run_sync(os.read, self.fd, self.read_size, abandon_on_cancel=True)
        while True:
            try:
                return os.read(self.fd, self.read_size)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.on_loop:
                try:
                    written = os.write(self.fd, view)
                except BlockingIOError:
                    await anyio.wait_writable(self.fd)
                    continue
            else:
                written = await anyio.to_thread.run_sync(os.write, self.fd, view)
            view = view[written:]


@asynccontextmanager
async def _claimed_stdio() -> AsyncIterator[tuple[Fd, Fd]]:
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
    try:
        yield Fd(wire_in), Fd(wire_out)
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (saved_in, saved_out, wire_in, wire_out):
            with suppress(OSError):
                os.close(fd)


async def send_quickly(send: MemoryObjectSendStream[SessionMessage | Exception], message: SessionMessage) -> None:
    """Hand a message on without a task switch when there is room (several times cheaper than ``send``)."""
    try:
        send.send_nowait(message)
    except anyio.WouldBlock:
        await send.send(message)


class _Wire:
    """The two pumps between the descriptors and the channel's streams."""

    def __init__(self, channel: StdioChannel, stdin: Fd, stdout: Fd, max_bytes: int) -> None:
        self.channel = channel
        self.stdin, self.stdout = stdin, stdout
        self.max_bytes = max_bytes
        self.in_flight: set[types.RequestId] = set()
        # Error replies for bad lines come from the reader, so writes are serialized by a lock.
        self.write_lock = anyio.Lock()

    async def write(self, data: bytes) -> None:
        async with self.write_lock:
            await self.stdout.write(data)

    async def reject(self, request_id: types.RequestId | None, message: str) -> None:
        logger.warning("rejected a message from the client: %s", message)
        await self.write(error_line(request_id, INVALID_REQUEST, f"Invalid Request: {message}"))

    async def take(self, line: bytes | Oversized, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        if isinstance(line, Oversized):
            limit = f"{line.size} bytes is over the limit of {self.max_bytes} (LOOP_GUARD_MAX_MESSAGE_BYTES)"
            await self.reject(line.request_id, f"message of {limit}")
            return
        parsed = parse_line(line)
        if isinstance(parsed, BadLine):
            logger.warning("rejected a line from the client: %s", parsed.problem)
            if parsed.reply:
                await self.write(parsed.reply)
            elif parsed.response_to is not None:
                await send.send(malformed_answer(parsed.response_to))  # so our request does not wait forever
            return
        if parsed is None:
            return
        message = parsed.message
        if isinstance(message, types.JSONRPCRequest):
            if message.id in self.in_flight:
                await self.reject(message.id, "a request with this id is still in flight")
                return
            self.in_flight.add(message.id)
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            self.in_flight.discard((message.params or {}).get("requestId"))  # no response will follow
        await send_quickly(send, parsed)

    async def read(self, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        lines = LineReader(self.max_bytes)
        async with send:
            try:
                while chunk := await self.stdin.read():
                    for line in lines.feed(chunk):
                        await self.take(line, send)
                for line in lines.feed(b"\n"):
                    await self.take(line, send)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                logger.debug("the session ended; no longer reading stdin")
            finally:
                self.channel.eof.set()

    async def write_out(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        async with receive:
            async for message in receive:
                try:
                    await self.write(encode(message))
                except (BrokenPipeError, ConnectionResetError):
                    logger.info("the client closed stdout; stopping")
                    break
                rid = response_id(message)
                if rid is not None:
                    self.in_flight.discard(rid)
                    if rid in self.channel._close_after:
                        break
        self.channel.closed.set()


@asynccontextmanager
async def open_stdio_channel(max_bytes: int = 64 * 1024 * 1024) -> AsyncIterator[StdioChannel]:
    """Serve JSON-RPC lines on this process's stdin/stdout until the client closes stdin.

    Lines over ``max_bytes`` and requests reusing an id still in flight are answered
    with -32600 here and never reach the server.
    """
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    channel = StdioChannel(read_receive, write_send)
    async with _claimed_stdio() as (stdin, stdout), anyio.create_task_group() as tg:
        wire = _Wire(channel, stdin, stdout, max_bytes)
        # The serving loop sees EOF from read(); it closes write_send when done, which ends write_out().
        tg.start_soon(wire.read, read_send)
        tg.start_soon(wire.write_out, write_receive)
        try:
            yield channel
        finally:
            tg.cancel_scope.cancel()
