"""An upstream MCP server run as a child process, spoken to in JSON-RPC lines over its stdin and stdout.

Not the SDK's stdio client: that one filters the environment (an upstream must inherit ours),
hides the process (we report its exit status), and parses every line into models. The child
gets its own process group so that wrappers such as ``npx`` or ``uvx`` leave no orphans when
it is stopped, and that group ends when the guard dies, however it dies (see
:mod:`mcp_loop_guard.posix`); its exit is watched directly (a pidfd where the system has
them), since a grandchild holding the pipes would make a dead upstream look alive. What clients
read of a child names it by its server's name and says how it ended; its command line and last
stderr lines (which may hold a path or a secret) go to the operator's log only, once, when it ends.
Its stdin is written through an :class:`Outbox`, so no writer ever waits for the child to read.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

import anyio

from mcp_loop_guard import posix
from mcp_loop_guard.proxy.wire.fd import PIPE_BYTES, Fd, enlarge_pipe
from mcp_loop_guard.proxy.wire.lines import LineReader
from mcp_loop_guard.proxy.wire.outbox import Outbox, stuck

logger = logging.getLogger(__name__)
upstream_logger = logging.getLogger("mcp_loop_guard.upstream")
"""Carries upstreams' stderr lines when logs are JSON."""

__all__ = ["ChildProcess", "UpstreamStartError", "spawn", "stop_all_groups"]

TERM_GRACE = 2.0
"""Seconds a child gets after SIGTERM before SIGKILL."""
EOF_GRACE = 0.4
"""Seconds a child gets to exit by itself once its stdin is closed (MCP's way to ask it to stop)."""
STDERR_TAIL_LINES = 5
"""How many of the child's last stderr lines the log quotes when it ends."""
STDERR_DRAIN = 0.5
"""Seconds the exit's log line waits for the child's last stderr lines to be read."""

_stderr_as_logs = False


def relay_stderr_as_logs(enabled: bool) -> None:
    """Relay upstreams' stderr lines as log records (JSON logs) instead of byte for byte."""
    global _stderr_as_logs  # noqa: PLW0603 - one process-wide output format, set once at start
    _stderr_as_logs = enabled


class UpstreamStartError(Exception):
    """The upstream command could not be started at all; the text names the server, ``command_line`` the command."""

    def __init__(self, message: str, command_line: str) -> None:
        """``command_line``: for the operator's log only."""
        super().__init__(message)
        self.command_line = command_line


def _pipe() -> tuple[int, int]:
    """A pipe with a 1 MB buffer where the system allows it: a large result then needs few wake-ups."""
    read_end, write_end = os.pipe()
    enlarge_pipe(write_end)
    return read_end, write_end


@dataclass(eq=False)  # compared and hashed by identity: one child is one process
class ChildProcess:
    """A running upstream and the facts a user needs when it goes away."""

    command: tuple[str, ...]
    process: subprocess.Popen[bytes]
    to_child: Fd
    """Our end of the child's stdin pipe."""
    from_child: Fd
    """Our end of the child's stdout pipe."""
    from_stderr: Fd
    display: str = ""
    """The command line for the operator's log (the config's own text, without expanded secrets)."""
    name: str = ""
    """How texts a client reads name it: its server's public name."""
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    stopping: bool = False
    """The guard asked it to stop: its exit is expected, not a crash."""
    adopted: bool = False
    """Taken over by a running relay (a child started before the event loop that nobody took is killed)."""
    sent: int | None = None
    """The strongest signal the guard sent the group: SIGTERM, then SIGKILL."""
    _exited: anyio.Event | None = None
    _stderr_read: anyio.Event | None = None
    _outbox: Outbox | None = None

    @property
    def outbox(self) -> Outbox:
        """What is written to the child's stdin, in order, as it reads."""
        if self._outbox is None:
            self._outbox = Outbox(self.to_child)
        return self._outbox

    async def write(self, line: bytes) -> None:
        """One whole line to the child's stdin, never interleaved with another writer's (sessions share a child).

        It never waits for the child to read: the line is queued behind the others (see :class:`Outbox`).

        Raises:
            OSError: the child stopped reading (BrokenPipeError, or BacklogFullError: it left too much unread) or its
                stdin was closed.
        """
        self.outbox.put(line)

    async def input_stuck(self, after: float, counts: Callable[[float], bool]) -> None:
        """Return once lines for the child have waited ``after`` seconds unread, when ``counts(since)`` holds."""
        await stuck(self.outbox, after, counts)

    def escalate(self) -> None:
        """Signal the whole group one step harder than before: SIGTERM, then SIGKILL (safe in a signal handler)."""
        self.stopping = True
        self.sent = signal.SIGKILL if self.sent is not None else signal.SIGTERM
        posix.signal_group(self.process.pid, self.sent)

    @property
    def exited(self) -> anyio.Event:
        """Set once the process has ended (created in the event loop, on first use)."""
        if self._exited is None:
            self._exited = anyio.Event()
        return self._exited

    def kill_now(self) -> None:
        """Kill the whole process group at once and reap it (outside the event loop)."""
        self.sent = signal.SIGKILL
        posix.signal_group(self.process.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(TERM_GRACE)
        _live.discard(self)
        for fd in (self.to_child, self.from_child, self.from_stderr):
            fd.close()

    @property
    def pid(self) -> int:
        """The child's process id, which is also its process group id."""
        return self.process.pid

    @property
    def label(self) -> str:
        """How texts a client reads name it: the server's name, never the command line."""
        return self.name or "upstream"

    @property
    def command_line(self) -> str:
        """The command as a user would type it, for the operator's log."""
        return self.display or shlex.join(self.command)

    @property
    def returncode(self) -> int | None:
        """Exit status once the child has exited, negative for a signal."""
        return self.process.returncode

    def describe_exit(self, *, stderr: bool = False) -> str:
        """One clause saying how the child ended (and its last stderr lines, for the log, when asked)."""
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
        if stderr and self.stderr_tail:
            how += "; its last stderr lines: " + " | ".join(self.stderr_tail)
        return how

    def close_stdin(self, *, drained: bool = True) -> None:
        """Close the child's stdin (how an MCP client asks a stdio server to exit), after what waits to be written.

        ``drained=False``: at once, dropping what waits (a child that is not reading).
        """
        self.stopping = True
        if self._outbox is None:
            self.to_child.close()
        else:
            self._outbox.close(drained=drained)

    async def watch(self) -> None:
        """Set :attr:`exited` when the process ends (and reap it)."""
        pidfd = posix.exit_watch(self.process.pid)
        try:
            while self.process.poll() is None:
                if pidfd is not None:
                    await anyio.wait_readable(pidfd)
                else:
                    await anyio.sleep(0.05)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        self.exited.set()
        if not self.stopping:  # the operator's record of a crash, whoever is told of it (and however briefly)
            with anyio.CancelScope(shield=True), anyio.move_on_after(STDERR_DRAIN):
                await self._stderr_done().wait()
            logger.warning("upstream `%s` (`%s`) %s", self.label, self.command_line, self.describe_exit(stderr=True))

    def _stderr_done(self) -> anyio.Event:
        if self._stderr_read is None:
            self._stderr_read = anyio.Event()
        return self._stderr_read

    async def relay_stderr(self) -> None:
        """Pass the child's stderr on (byte for byte, or as log records), keeping its last lines."""
        lines = LineReader(4096)
        with suppress(OSError):
            while chunk := await self.from_stderr.read():
                if not _stderr_as_logs:
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.buffer.flush()
                for line in lines.feed(chunk):
                    if isinstance(line, bytes) and line.strip():
                        text = line.decode(errors="replace").rstrip()
                        self.stderr_tail.append(text.strip()[:300])
                        if _stderr_as_logs:
                            upstream_logger.info("%s", text, extra={"upstream": self.label})
        self._stderr_done().set()

    async def stop(self, *, eof_grace: float = EOF_GRACE, term_grace: float = TERM_GRACE) -> None:
        """Close stdin, wait a moment, SIGTERM the group, wait, SIGKILL the group. Bounded and shielded.

        Once a signal of the guard's own has reached the group already, the wait for stdin's end
        is skipped. The child is reaped here; other members that ended count as gone even before
        whoever adopted them reaps them (the group watch's reaper may be seconds late).
        """
        with anyio.CancelScope(shield=True):
            self.close_stdin()
            if self.sent is None:
                await self._reaped(eof_grace)
            self.close_stdin(drained=False)
            pgid = self.process.pid
            if self.sent is None and posix.group_runs(pgid):
                self.escalate()
            if self.sent == signal.SIGTERM:
                with anyio.move_on_after(term_grace):
                    while self.process.poll() is None or posix.group_runs(pgid):  # noqa: ASYNC110 - no event for a group
                        await anyio.sleep(0.05)  # a look at the group reads /proc on Linux: not too often
                if posix.group_runs(pgid):
                    self.escalate()
            await self._reaped(term_grace)
            _live.discard(self)
            self.from_child.close()
            self.from_stderr.close()

    async def _reaped(self, limit: float) -> None:
        """Wait up to ``limit`` seconds for the process to end, reaping it."""
        with anyio.move_on_after(limit):
            while self.process.poll() is None:  # noqa: ASYNC110 - polled: reaping is the point
                await anyio.sleep(0.01)
        if self.process.returncode is not None:
            self.exited.set()


_live: set[ChildProcess] = set()
"""Children not yet stopped, for a signal that must end them at once."""
_stopping = False


def stop_all_groups() -> None:
    """Every live child's group one step harder (SIGTERM, then SIGKILL), now; no child starts after this.

    Called from a signal handler: it only signals, never waits.
    """
    global _stopping  # noqa: PLW0603 - the guard stops once
    _stopping = True
    for child in list(_live):
        child.escalate()


def spawn(
    command: Sequence[str],
    *,
    name: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    display: str = "",
) -> ChildProcess:
    """Start ``command`` now (a plain fork and exec: usable before the event loop runs).

    ``name``: how texts a client reads name it (see ``StdioServer.public_name``).

    Raises:
        UpstreamStartError: the command cannot be started (not found, not executable, bad cwd).
    """
    label = display or shlex.join(command)
    if _stopping:
        raise UpstreamStartError(f"cannot start upstream `{name}`: the guard is stopping", label)
    child_in, to_child = _pipe()
    from_child, child_out = _pipe()
    from_stderr, child_err = os.pipe()
    try:
        process = subprocess.Popen(
            list(command),
            stdin=child_in,
            stdout=child_out,
            stderr=child_err,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            close_fds=True,
            **posix.group_spawn_options(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        for fd in (to_child, from_child, from_stderr):
            os.close(fd)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UpstreamStartError(f"cannot start upstream `{name}`: {reason}", label) from exc
    finally:
        for fd in (child_in, child_out, child_err):
            os.close(fd)
    for fd in (to_child, from_child, from_stderr):
        os.set_inheritable(fd, False)
    child = ChildProcess(
        tuple(command), process, Fd(to_child), Fd(from_child, PIPE_BYTES), Fd(from_stderr), display, name
    )
    _live.add(child)
    return child
