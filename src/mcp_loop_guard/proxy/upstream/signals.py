"""The guard's stop signals: every upstream group is told at once, and no signal kills the guard first.

Clients stop a stdio server with signals in quick succession (Claude Code sends SIGINT, then
SIGTERM 100 ms later) or with SIGKILL. So the guard's handler is installed before its first
upstream starts and stays until the process exits; it never gives a signal back to its
default action. At the first SIGINT or SIGTERM every upstream's whole process group gets
SIGTERM at once, from the handler itself, and no upstream starts after that; each later
signal sends SIGKILL to what is left. (The HTTP guard answers its calls in flight before it
stops its upstreams: its first signal leaves them alone, see :func:`upstreams_after_drain`.)
The session then ends as usual, at the event loop's pace (:func:`received`), and the guard
exits once its children are down. A signal that comes before the event loop runs ends the
start-up instead (:class:`Stopped`). SIGHUP reaches the session alone: with a config file it
reloads it, without one the session calls :func:`stop_upstreams` itself. (SIGKILL cannot be
handled: see :mod:`mcp_loop_guard.posix`.)
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import suppress
from types import FrameType

from mcp_loop_guard import posix
from mcp_loop_guard.proxy.upstream.child import stop_all_groups
from mcp_loop_guard.proxy.wire.fd import Fd

__all__ = ["Stopped", "exiting", "install", "received", "serving", "stop_upstreams", "upstreams_after_drain"]


class Stopped(BaseException):
    """A stop signal came before the event loop ran: start-up unwinds and the guard exits 128 + the signal."""

    def __init__(self, signum: int) -> None:
        """``signum``: the signal that stopped the guard."""
        super().__init__(signum)
        self.signum = signum


_raise = True
"""Before the event loop runs, the first stop signal raises :class:`Stopped` (only the first: the others
must not interrupt the unwinding it starts)."""
_wake: tuple[socket.socket, socket.socket] | None = None
"""From the handler to the event loop: one byte per signal, its number (a socket pair: pipe buffers count
against the user's allowance on Linux)."""
_reader: Fd | None = None
_first_reaches_upstreams = True
_stop_signals = 0


def _wake_channel() -> tuple[int, int]:
    """The descriptors the loop reads and the handler writes."""
    global _wake  # noqa: PLW0603 - one channel per process, made once
    if _wake is None:
        _wake = socket.socketpair()
        _wake[1].setblocking(False)  # a handler never waits: a full channel has the news already
    return _wake[0].fileno(), _wake[1].fileno()


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP from now until the process exits (call before starting any upstream)."""
    _wake_channel()
    posix.install_handler(_handle)


def exiting() -> None:
    """The guard's upstreams are down and its exit status is decided: stop signals are ignored from now on.

    Python puts back the default action of every signal it handled as it tears itself down, so
    a late signal (a client's SIGTERM 100 ms after its SIGINT, to a guard that stopped faster)
    would kill the guard with that signal instead of letting it exit with its status.
    """
    for signum in posix.STOP_SIGNALS:
        with suppress(ValueError, OSError):
            signal.signal(signum, signal.SIG_IGN)


def serving() -> None:
    """From now on the event loop takes the signals (:func:`received`); before, a signal raises :class:`Stopped`."""
    global _raise  # noqa: PLW0603 - the process has one start-up
    _raise = False


def upstreams_after_drain() -> None:
    """The first stop signal leaves the upstreams to the session, which stops them once its calls are answered.

    Later signals still reach them at once (SIGTERM, then SIGKILL).
    """
    global _first_reaches_upstreams  # noqa: PLW0603 - one guard per process
    _first_reaches_upstreams = False


def stop_upstreams() -> None:
    """Every upstream group one step harder (SIGTERM, then SIGKILL); no upstream starts after this."""
    stop_all_groups()


def _handle(signum: int, frame: FrameType | None) -> None:
    global _raise, _stop_signals  # noqa: PLW0603 - see their texts
    if signum != getattr(signal, "SIGHUP", None):
        _stop_signals += 1
        if _stop_signals > 1 or _first_reaches_upstreams:
            stop_all_groups()
    if _raise:
        _raise = False
        raise Stopped(signum)
    with suppress(OSError):
        os.write(_wake_channel()[1], bytes([signum]))


async def received() -> AsyncIterator[int]:
    """The stop signals, as they come (one reader at a time)."""
    global _reader  # noqa: PLW0603 - the pipe's one reading end, kept across readers
    if _reader is None:
        _reader = Fd(_wake_channel()[0])
    while chunk := await _reader.read():
        for signum in chunk:
            yield signum
