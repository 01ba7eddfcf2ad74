"""Run an upstream MCP server as a child process speaking JSON-RPC lines on stdio.

Not the SDK's stdio client: that one filters the environment (an upstream must
inherit ours), hides the process (we report its exit status), and parses
through a text decoder. The child gets its own process group so that
wrappers such as ``npx`` or ``uvx`` leave no orphans when we stop it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shlex
import signal
import subprocess
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from mcp_loop_guard.proxy.jsonlines import (
    BadLine,
    LineReader,
    Oversized,
    encode,
    malformed_answer,
    parse_line,
    too_large,
)
from mcp_loop_guard.proxy.stdio import Fd, send_quickly

logger = logging.getLogger(__name__)
upstream_logger = logging.getLogger("mcp_loop_guard.upstream")
"""Carries upstreams' stderr lines when logs are JSON."""

GRACE_SECONDS = 2.0
"""How long a child gets after stdin closes, and again after SIGTERM, before the next step."""


class UpstreamStartError(Exception):
    """The upstream command could not be started at all."""


STDERR_TAIL_LINES = 5
"""How many of the child's last stderr lines an error message quotes."""

_stderr_as_logs = False


def relay_stderr_as_logs(enabled: bool) -> None:
    """Relay upstreams' stderr lines as log records (JSON logs) instead of byte for byte."""
    global _stderr_as_logs  # noqa: PLW0603 - one process-wide output format, set once at start
    _stderr_as_logs = enabled


@dataclass(eq=False)  # compared and hashed by identity: one child is one process
class ChildProcess:
    """An upstream child and the facts a user needs when it goes away."""

    command: Sequence[str]
    process: Process
    to_child: Fd
    """Our end of the child's stdin pipe; the stdin pump closes it."""
    from_child: Fd
    """Our end of the child's stdout pipe."""
    exited: anyio.Event = field(default_factory=anyio.Event)
    stdin_closed: anyio.Event = field(default_factory=anyio.Event)
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))

    @property
    def label(self) -> str:
        """The command as a user would type it, for error messages."""
        return shlex.join(self.command)

    @property
    def returncode(self) -> int | None:
        """Exit status once the child has exited, negative for a signal."""
        return self.process.returncode

    def describe_exit(self) -> str:
        """One clause saying how the child ended."""
        code = self.returncode
        if code is None:
            return "closed its stdout"
        if code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with status {code}"
        if self.stderr_tail:
            how += "; its last stderr lines: " + " | ".join(self.stderr_tail)
        return how


async def _watch_exit(child: ChildProcess) -> None:
    # Polled, not process.wait(): on asyncio that also waits for the pipes to close,
    # and a grandchild holding them would make a dead upstream look alive.
    while child.process.returncode is None:  # noqa: ASYNC110 - nothing to wait on but the status
        await anyio.sleep(0.05)
    child.exited.set()


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal the whole group; False when nobody is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a group member changed owner
        return True
    return True


_live: set[ChildProcess] = set()
"""Children not yet stopped, for a signal that must end them at once."""


def terminate_children_now() -> None:
    """SIGTERM every live child's process group now, without waiting out any grace period."""
    for child in list(_live):
        _signal_group(child.process.pid, signal.SIGTERM)


async def stop_child(child: ChildProcess) -> None:
    """Close stdin, wait, SIGTERM the group, wait, SIGKILL the group. Bounded and shielded."""
    process = child.process
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(GRACE_SECONDS / 4):
            await child.stdin_closed.wait()  # the stdin pump closes it once its stream ends
        with anyio.move_on_after(GRACE_SECONDS):
            await child.exited.wait()
        pgid = process.pid
        if _signal_group(pgid, signal.SIGTERM):
            with anyio.move_on_after(GRACE_SECONDS):
                while _signal_group(pgid, 0):  # noqa: ASYNC110 - group exit has no event
                    await anyio.sleep(0.02)
            _signal_group(pgid, signal.SIGKILL)
        with anyio.move_on_after(GRACE_SECONDS):
            await child.exited.wait()


_READ_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031  # Linux fcntl command; not exported by the fcntl module on Python 3.11
_PIPE_ERRORS = (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError)


class _Pumps:
    """Move bytes between the child's pipes and the session's streams."""

    def __init__(self, child: ChildProcess, max_bytes: int) -> None:
        self.child = child
        self.max_bytes = max_bytes
        self.bad_lines = 0

    async def deliver(self, line: bytes | Oversized, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        if isinstance(line, Oversized):
            logger.warning(
                "upstream `%s` sent a %d-byte message (limit %d); not relayed",
                self.child.label,
                line.size,
                self.max_bytes,
            )
            if line.request_id is not None:
                # Answer the request it was for, so the caller gets an error instead of waiting forever.
                await send.send(too_large(line, self.max_bytes))
            return
        parsed = parse_line(line)
        if isinstance(parsed, BadLine) and parsed.response_to is not None:
            logger.warning("upstream `%s` sent a malformed response; its request gets an error", self.child.label)
            await send.send(malformed_answer(parsed.response_to))
        elif isinstance(parsed, BadLine):
            self.bad_lines += 1
            if self.bad_lines == 1:
                logger.warning(
                    "upstream `%s` wrote a line to stdout that is not JSON-RPC (%s); ignoring it and any further ones",
                    self.child.label,
                    parsed.problem,
                )
        elif parsed is not None:
            await send_quickly(send, parsed)

    async def stdout(self, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        lines = LineReader(self.max_bytes)
        async with send:
            with suppress(OSError):
                while chunk := await self.child.from_child.read():
                    for line in lines.feed(chunk):
                        await self.deliver(line, send)

    async def stderr(self) -> None:
        assert self.child.process.stderr is not None
        lines = LineReader(4096)
        with suppress(*_PIPE_ERRORS):
            async for chunk in self.child.process.stderr:
                if not _stderr_as_logs:
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.buffer.flush()
                for line in lines.feed(chunk):
                    if isinstance(line, bytes) and line.strip():
                        text = line.decode(errors="replace").rstrip()
                        self.child.stderr_tail.append(text.strip()[:300])
                        if _stderr_as_logs:
                            upstream_logger.info("%s", text, extra={"upstream": self.child.label})

    async def stdin(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        pipe = self.child.to_child
        try:
            async with receive:
                try:
                    async for message in receive:
                        await pipe.write(encode(message))
                except OSError:
                    logger.debug("upstream stdin closed")
                    async for _ in receive:  # drain so senders never block on a dead child
                        pass
        finally:
            # Closing stdin is how an MCP client asks a stdio server to exit.
            os.close(pipe.fd)
            self.child.stdin_closed.set()


def _pipe() -> tuple[int, int]:
    """A pipe with a 1 MB buffer where the system allows it: a large result then needs few wake-ups."""
    read_end, write_end = os.pipe()
    with suppress(OSError):
        fcntl.fcntl(write_end, _F_SETPIPE_SZ, _READ_SIZE)
    return read_end, write_end


@asynccontextmanager
async def open_child(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_bytes: int = 64 * 1024 * 1024,
) -> AsyncIterator[
    tuple[ChildProcess, MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """Start ``command`` and yield it with the SDK-shaped stream pair that talks to it.

    The read stream ends when the child closes its stdout (usually because it
    died), which makes every pending request fail at once instead of hanging.
    """
    # Our own pipes, read and written on the event loop (no asyncio subprocess protocol in between).
    child_in, to_child = _pipe()
    from_child, child_out = _pipe()
    try:
        process = await anyio.open_process(
            list(command),
            stdin=child_in,
            stdout=child_out,
            stderr=subprocess.PIPE,  # passed on unchanged, and its last lines kept for error messages
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        os.close(to_child)
        os.close(from_child)
        raise UpstreamStartError(f"cannot start upstream `{shlex.join(command)}`: {exc.strerror or exc}") from exc
    finally:
        os.close(child_in)
        os.close(child_out)
    child = ChildProcess(tuple(command), process, Fd(to_child), Fd(from_child, _READ_SIZE))
    _live.add(child)
    pumps = _Pumps(child, max_bytes)
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_exit, child)
        tg.start_soon(pumps.stdout, read_send)
        tg.start_soon(pumps.stderr)
        tg.start_soon(pumps.stdin, write_receive)
        try:
            yield child, read_receive, write_send
        finally:
            write_send.close()
            await stop_child(child)
            _live.discard(child)
            tg.cancel_scope.cancel()
    os.close(from_child)
