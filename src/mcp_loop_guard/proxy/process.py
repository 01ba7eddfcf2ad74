"""Run an upstream MCP server as a child process speaking JSON-RPC lines on stdio.

Not the SDK's stdio client: that one filters the environment (an upstream must
inherit ours), hides the process (we report its exit status), and parses
through a text decoder. The child gets its own process group so that
wrappers such as ``npx`` or ``uvx`` leave no orphans when we stop it.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field

import anyio
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from mcp_loop_guard.proxy.jsonlines import BadLine, encode, parse_line

logger = logging.getLogger(__name__)

GRACE_SECONDS = 2.0
"""How long a child gets after stdin closes, and again after SIGTERM, before the next step."""


class UpstreamStartError(Exception):
    """The upstream command could not be started at all."""


@dataclass
class ChildProcess:
    """An upstream child and the facts a user needs when it goes away."""

    command: Sequence[str]
    process: Process
    exited: anyio.Event = field(default_factory=anyio.Event)

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
            with suppress(ValueError):
                return f"was killed by {signal.Signals(-code).name}"
            return f"was killed by signal {-code}"
        return f"exited with status {code}"


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


async def stop_child(child: ChildProcess) -> None:
    """Close stdin, wait, SIGTERM the group, wait, SIGKILL the group. Bounded and shielded."""
    process = child.process
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
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


@asynccontextmanager
async def open_child(
    command: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> AsyncIterator[
    tuple[ChildProcess, MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """Start ``command`` and yield it with the SDK-shaped stream pair that talks to it.

    The read stream ends when the child closes its stdout (usually because it
    died), which makes every pending request fail at once instead of hanging.
    """
    full_env = {**os.environ, **(env or {})}
    try:
        process = await anyio.open_process(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # the child's stderr is ours: its logs reach the user unchanged
            env=full_env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise UpstreamStartError(f"cannot start upstream `{shlex.join(command)}`: {exc.strerror or exc}") from exc
    child = ChildProcess(tuple(command), process)
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    bad_lines = 0

    async def reader() -> None:
        nonlocal bad_lines
        assert process.stdout is not None
        buffer = b""
        async with read_send:
            with suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stdout:
                    *lines, buffer = (buffer + chunk).split(b"\n")
                    for line in lines:
                        parsed = parse_line(line)
                        if isinstance(parsed, BadLine):
                            bad_lines += 1
                            if bad_lines == 1:
                                logger.warning(
                                    "upstream `%s` wrote a line to stdout that is not JSON-RPC (%s); "
                                    "ignoring it and any further ones",
                                    child.label,
                                    parsed.problem,
                                )
                        elif parsed is not None:
                            await read_send.send(parsed)

    async def writer() -> None:
        assert process.stdin is not None
        async with write_receive:
            try:
                async for message in write_receive:
                    await process.stdin.send(encode(message))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                logger.debug("upstream stdin closed")
                async for _ in write_receive:  # drain so senders never block on a dead child
                    pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_exit, child)
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield child, read_receive, write_send
        finally:
            write_send.close()
            await stop_child(child)
            tg.cancel_scope.cancel()
