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

from mcp_loop_guard.proxy.jsonlines import BadLine, encode, parse_line, response_id

logger = logging.getLogger(__name__)

_READ_CHUNK = 1 << 16


@dataclass
class StdioChannel:
    """The downstream stream pair plus the one control the proxy needs: close after a reply."""

    read_stream: MemoryObjectReceiveStream[SessionMessage | Exception]
    write_stream: MemoryObjectSendStream[SessionMessage]
    closed: anyio.Event = field(default_factory=anyio.Event)
    """Set once the channel is finished: client EOF, or a close-after reply written."""
    _close_after: set[types.RequestId] = field(default_factory=set)

    def close_after_reply(self, request_id: types.RequestId) -> None:
        """Close stdout right after the response to ``request_id`` is written."""
        self._close_after.add(request_id)


def _is_stream(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Fd:
    """One private descriptor, read or written on the loop when it can be non-blocking."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.on_loop = _is_stream(fd)
        if self.on_loop:
            os.set_blocking(fd, False)

    async def read(self) -> bytes:
        if not self.on_loop:
            return await anyio.to_thread.run_sync(os.read, self.fd, _READ_CHUNK, abandon_on_cancel=True)
        while True:
            try:
                return os.read(self.fd, _READ_CHUNK)
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
async def _claimed_stdio() -> AsyncIterator[tuple[_Fd, _Fd]]:
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
        yield _Fd(wire_in), _Fd(wire_out)
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (saved_in, saved_out, wire_in, wire_out):
            with suppress(OSError):
                os.close(fd)


@asynccontextmanager
async def open_stdio_channel() -> AsyncIterator[StdioChannel]:
    """Serve JSON-RPC lines on this process's stdin/stdout until the client closes stdin."""
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    channel = StdioChannel(read_receive, write_send)
    # Error replies for bad lines come from the reader task, so writes are serialized by a lock.
    write_lock = anyio.Lock()

    async with _claimed_stdio() as (stdin, stdout):

        async def write(data: bytes) -> None:
            async with write_lock:
                await stdout.write(data)

        async def reader() -> None:
            buffer = b""
            async with read_send:
                while True:
                    chunk = await stdin.read()
                    if not chunk:
                        break
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        parsed = parse_line(line)
                        if isinstance(parsed, BadLine):
                            logger.warning("rejected a line from the client: %s", parsed.problem)
                            if parsed.reply:
                                await write(parsed.reply)
                        elif parsed is not None:
                            await read_send.send(parsed)
                if buffer.strip() and (parsed := parse_line(buffer)) is not None:
                    if isinstance(parsed, BadLine):
                        logger.warning("rejected a line from the client: %s", parsed.problem)
                    else:
                        await read_send.send(parsed)

        async def writer() -> None:
            async with write_receive:
                async for message in write_receive:
                    try:
                        await write(encode(message))
                    except (BrokenPipeError, ConnectionResetError):
                        logger.info("the client closed stdout; stopping")
                        break
                    rid = response_id(message)
                    if rid is not None and rid in channel._close_after:
                        break
            channel.closed.set()

        async with anyio.create_task_group() as tg:

            async def read_until_eof() -> None:
                await reader()
                # The serving loop sees EOF; it closes write_send when done, which ends the writer.

            tg.start_soon(read_until_eof)
            tg.start_soon(writer)
            try:
                yield channel
            finally:
                tg.cancel_scope.cancel()
