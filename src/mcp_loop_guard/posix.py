"""What the guard needs of a POSIX system, in one place: a port to another system starts here.

A stdio guard runs each upstream as a process group of its own, signals that whole group,
takes it down when the guard itself dies (even by SIGKILL), and reads its pipes without
blocking. Linux and macOS have all of it. This module imports nothing POSIX-only at load,
so :func:`unsupported` can say so on any system before anything else is loaded.

When the guard dies, its upstream goes with it in two ways:

- On Linux, the upstream is started with a parent-death signal (``PR_SET_PDEATHSIG``):
  the kernel SIGKILLs it when the guard dies. macOS has no such call.
- On both, a *group watch* runs in the upstream's process group: a tiny ``/bin/sh`` that
  blocks reading a socket whose peer only the guard holds. When the guard dies by any means the
  kernel closes that peer, and the watch sends SIGTERM to its whole group, then SIGKILL after
  a grace. That is what reaches the grandchildren (an ``npx`` launcher's server): the
  parent-death signal is per process and not inherited, and a subreaper would only collect
  orphans, not end them. The watch is started from the upstream's process before it execs
  the command, forked twice so that it is no child of the server (a server that waits for all
  its children never waits for it), and its environment is empty. On macOS the watch alone
  ends the group, so the upstream gets SIGTERM first where Linux SIGKILLs it; where the
  watch cannot start, Linux still has the parent-death signal and macOS falls back to the
  upstream seeing its stdin close.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import threading
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from types import FrameType
from typing import Any

__all__ = [
    "STOP_SIGNALS",
    "enlarge_pipe",
    "exit_watch",
    "group_runs",
    "group_spawn_options",
    "install_handler",
    "set_nonblocking",
    "signal_group",
    "unsupported",
]

SUPPORTED = {"linux": "Linux", "darwin": "macOS"}
"""``sys.platform`` values the guard runs on, with their names."""
WATCH_GRACE = 2
"""Seconds the group watch waits between SIGTERM and SIGKILL once the guard is gone."""
WATCH_NAME = "mcp-loop-guard-group-watch"
"""The group watch's name in process listings."""
WATCH_SCRIPT = f"read -r line; trap '' TERM; kill -TERM 0; sleep {WATCH_GRACE}; kill -KILL 0"
"""Wait for the guard's end (end of file on stdin), then end the whole group, the watch last."""
_PR_SET_PDEATHSIG = 1


def unsupported(platform: str) -> str | None:
    """None on a system the guard runs on; otherwise the line that says it does not (``platform``: ``sys.platform``)."""
    if platform in SUPPORTED or platform.startswith("linux"):
        return None
    return (
        f"mcp-loop-guard: error: this system ({platform}) is not supported: the guard runs on Linux and macOS "
        "(on Windows, inside WSL)"
    )


# --- the guard's own signals ------------------------------------------------------------------

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", signal.SIGTERM))
"""What a client or an operator stops the guard with (SIGHUP may reload a config file instead)."""


def install_handler(handler: Callable[[int, FrameType | None], Any]) -> None:
    """Handle every stop signal with ``handler``, from now until the process exits."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)


# --- process groups ---------------------------------------------------------------------------


def signal_group(pgid: int, signum: int) -> bool:
    """Signal a whole process group; False when nobody is left in it."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member changed owner
        return True
    return True


def group_runs(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs; ended ones not yet reaped (zombies) do not count.

    The group watch is nobody's child but init's (or a subreaper's), and some reap seconds late,
    or never (a guard that is itself a container's first process): its zombie would hold a stop
    up for the whole grace. Linux shows each process's state in /proc; elsewhere a group with
    any member left runs.
    """
    if not signal_group(pgid, 0):
        return False
    if not sys.platform.startswith("linux"):
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as status:
                fields = status.read().rpartition(b")")[2].split()  # after the command's name: state, ppid, pgrp
        except OSError:
            continue  # ended meanwhile
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


_lifeline: tuple[socket.socket, socket.socket] | None = None
"""A connected pair; the guard holds the only reference to its first end, never written: it closes when the
guard dies, and the group watches reading the other end see their end of file. (A socket pair, not a pipe:
pipe buffers count against the user's allowance on Linux.)"""
_prctl: Callable[[int, int], int] | None = None


def _prepare() -> tuple[int, Callable[[int, int], int] | None]:
    """The lifeline's watched end, and prctl on Linux (looked up before any fork: nothing is loaded in the child)."""
    global _lifeline, _prctl  # noqa: PLW0603 - one lifeline and one libc per process, made on first use
    if _lifeline is None:
        _lifeline = socket.socketpair()  # both ends close on exec: only a group watch gets one, as its stdin
    if _prctl is None and sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415 - only where there is a prctl to call

        with suppress(OSError, AttributeError):
            function = ctypes.CDLL(None, use_errno=True).prctl
            function.argtypes = [ctypes.c_int, ctypes.c_ulong]
            _prctl = function
    return _lifeline[1].fileno(), _prctl


def group_spawn_options() -> dict[str, Any]:
    """What ``subprocess.Popen`` needs to start an upstream in a session and group of its own, tied to the guard.

    The parent-death signal is set only when the main thread starts the child: Linux sends it
    when the *thread* that forked the child ends, and only the main thread lasts as long as
    the guard.
    """
    lifeline, prctl = _prepare()
    main = threading.current_thread() is threading.main_thread()
    setup = partial(_in_child, os.getpid(), lifeline, prctl if main else None)
    return {"start_new_session": True, "preexec_fn": setup}


def _in_child(guard: int, lifeline: int, prctl: Callable[[int, int], int] | None) -> None:
    """Runs in the new child before it execs the command (after setsid): never raises, whatever fails."""
    with suppress(ValueError):  # (raised only off the main thread, where no handler of the guard's runs)
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)  # the guard's own handlers are not the child's
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != guard:  # the guard died before the signal was set: nobody would send it
            os._exit(1)
    with suppress(OSError):
        _start_watch(lifeline)


def _start_watch(lifeline: int) -> None:
    """Fork the group watch, twice so that it is no child of the server; reap the middle process."""
    middle = os.fork()
    if middle:
        os.waitpid(middle, 0)
        return
    try:
        if os.fork() == 0:
            os.chdir("/")
            os.dup2(lifeline, 0)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1)
            os.dup2(null, 2)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            os.execve("/bin/sh", [WATCH_NAME, "-c", WATCH_SCRIPT], {"PATH": "/usr/bin:/bin"})  # noqa: S606
    finally:
        os._exit(0)


def exit_watch(pid: int) -> int | None:
    """A descriptor that becomes readable when the process ends (a Linux pidfd), or None: then poll."""
    with suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None


# --- descriptors ------------------------------------------------------------------------------

PIPE_BYTES = 1 << 20
"""The buffer the guard asks for on its pipes: a megabyte result then crosses in one write and one wake-up."""


def set_nonblocking(fd: int) -> bool:
    """Make a pipe or socket non-blocking, for the event loop to watch; False for anything else (a file, a tty)."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False
    os.set_blocking(fd, False)
    return True


def enlarge_pipe(fd: int) -> None:
    """Ask for a :data:`PIPE_BYTES` buffer on a pipe (Linux); elsewhere, or past the system's limits, it stays.

    Linux counts pipe buffers per user, and past ``fs.pipe-user-pages-soft`` every new pipe of
    that user gets a single page: a pipe that may never carry a large message is better left
    as it is.
    """
    import fcntl  # noqa: PLC0415 - POSIX-only; loaded on first use, so unsupported() works everywhere

    command = getattr(fcntl, "F_SETPIPE_SZ", None)
    if command is not None and stat.S_ISFIFO(os.fstat(fd).st_mode):
        with suppress(OSError):
            fcntl.fcntl(fd, command, PIPE_BYTES)
