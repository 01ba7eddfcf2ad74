"""What every state store offers: per-agent loop states with an expiry, updated atomically.

A store keeps one :class:`~mcp_loop_guard.core.state.State` per agent key. Two ways to use it:

* owned keys (a stdio guard's own agent, an HTTP guard's keys when no other process shares
  the store): the caller keeps the state in memory and writes it through with :meth:`save`;
* shared keys (HTTP replicas behind a load balancer, one store): every event is an atomic
  read-fold-write with :meth:`update`, so concurrent updates of one key never lose a count.

Ownership of a stdio agent's key is claimed with :meth:`claim`: a guard takes over a key only
from a guard that has exited, so two guards alive at once are two agents.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from mcp_loop_guard import codec
from mcp_loop_guard.core.state import State, StateFormatError

__all__ = ["KeyInfo", "Owner", "Store", "StoreError", "StoreSetupError", "process_start_time", "read_owner"]

logger = logging.getLogger(__name__)

R = TypeVar("R")


class StoreError(Exception):
    """The store could not be reached or written in time; the message says why, for logs."""


class StoreSetupError(StoreError):
    """The store asked for cannot be had at all (a missing package, a path another user could write, a bad URL).

    A start-up error: a guard on another store than the one asked for (a fleet on memory
    shares nothing) would be worse than no guard.
    """


@dataclass(frozen=True, slots=True)
class Owner:
    """A guard process holding a key: alive while its process is (same host) or its lease runs (other hosts)."""

    host: str
    pid: int
    started: float
    """The process's start time (seconds since boot on Linux), so a reused PID is not the same owner."""
    lease: float = 0.0
    """Wall-clock time until which the owner counts as alive when it cannot be checked directly."""

    @classmethod
    def this_process(cls, lease: float) -> Owner:
        """The running guard."""
        pid = os.getpid()
        return cls(socket.gethostname(), pid, process_start_time(pid) or 0.0, lease)

    def alive(self, now: float) -> bool:
        """Whether this owner may still be using its key."""
        if self.host != socket.gethostname():
            return self.lease > now
        started = process_start_time(self.pid)
        if started is None:
            return False
        return not self.started or abs(started - self.started) < 1e-6


MAX_PID = 2**31 - 1


def read_owner(host: object, pid: object, started: object, lease: object) -> Owner | None:
    """A stored owner record; None when nobody holds the key (NULLs) or the record is unreadable (nobody alive does)."""
    since, until = real_number(started), real_number(lease)
    if not isinstance(host, str) or since is None or until is None:
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= MAX_PID:
        return None
    return Owner(host, pid, since, until)


def process_start_time(pid: int) -> float | None:
    """When ``pid`` started (clock ticks since boot, from /proc), or None when it does not run (or is a zombie).

    Where /proc is missing, existence is all that can be checked; 0.0 then stands for "alive".
    """
    stat = Path(f"/proc/{pid}/stat")
    try:
        text = stat.read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return _exists(pid)
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = text.rpartition(")")[2].split()
    if fields[:1] in (["Z"], ["X"]):  # exited, not yet reaped by its parent: gone all the same
        return None
    try:
        return float(fields[19])
    except (IndexError, ValueError):
        return _exists(pid)


def _exists(pid: int) -> float | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return 0.0
    return 0.0


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """One stored agent, for operators: names and counts, never arguments or results."""

    key: str
    state: State | None
    """None when the stored value cannot be read."""
    expires: float
    owner: Owner | None = None

    def summary(self) -> dict[str, object]:
        """What ``state list`` and the admin API show."""
        state = self.state
        info: dict[str, object] = {"key": self.key, "expires": round(self.expires, 3)}
        if state is None:
            info["unreadable"] = True
            return info
        last = state.history[-1] if state.history else None
        info.update(
            {
                "lastTool": last.tool if last else None,
                "streak": 1 + state.runs[0] if state.runs and last else 0,
                "refusals": state.blocks,
                "inFlight": state.in_flight,
                "lastVerdict": state.last_verdict or None,
            }
        )
        if state.budget_use:
            info["budgets"] = {
                key: {"since": round(start, 3), "used": count}
                for key, (start, count) in sorted(state.budget_use.items())
            }
        if self.owner is not None:
            info["owner"] = {"host": self.owner.host, "pid": self.owner.pid}
        return info


def read_state(text: object) -> State | None:
    """A stored value as a state; None for anything else (not text, not JSON, not a state of this format)."""
    if not isinstance(text, str | bytes):
        return None
    try:
        return State.from_wire(codec.loads(text))
    except (StateFormatError, ValueError, RecursionError):
        return None


def stored_state(key: str, text: object) -> State | None:
    """:func:`read_state` for a guard: an unreadable record is an absent one, logged (its key, never its contents).

    Each read of it logs once; the agent's next write replaces it.
    """
    state = read_state(text)
    if state is None and text is not None:
        logger.warning("the stored loop state of agent %r is unreadable; the agent starts afresh", key)
    return state


def real_number(value: object) -> float | None:
    """A stored time or lease as a float; None for anything else (text, NULL, not finite)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        return None
    return number if math.isfinite(number) else None


def write_state(state: State) -> str:
    """A state as stores keep it: compact JSON."""
    return codec.dumps(state.wire()).decode()


def state_bytes(state: State) -> bytes:
    """:func:`write_state` as UTF-8, for a store that writes bytes."""
    return codec.dumps(state.wire())


class Store(Protocol):
    """A place to keep agents' loop states."""

    name: str
    """``memory``, ``sqlite`` or ``redis``, for logs and ``/readyz``."""
    shared: bool
    """True when other processes may update the same keys (every event must then be atomic)."""

    async def load(self, key: str) -> State | None:
        """The key's state, or None when absent, expired or unreadable.

        Raises:
            StoreError: the store cannot be read in time.
        """
        ...

    async def save(self, key: str, state: State, ttl: float) -> None:
        """Write the key's state, to expire ``ttl`` seconds from now.

        Raises:
            StoreError: the store cannot be written in time.
        """
        ...

    async def update(self, key: str, fold: Callable[[State], R], ttl: float) -> tuple[State, R]:
        """Atomically: read the key's state (a new one when absent), apply ``fold`` to it, write it.

        ``fold`` may run more than once (optimistic retries): it must only change the state.

        Raises:
            StoreError: the store cannot be read or written in time.
        """
        ...

    async def claim(self, base: str, owner: Owner, ttl: float) -> tuple[str, bool]:
        """The first of ``base``, ``base#2``, ``base#3``... not held by a live owner, now held by ``owner``.

        Returns the key and whether it was taken over from an owner that has exited (its calls
        in flight will never end).

        Raises:
            StoreError: the store cannot be reached in time.
        """
        ...

    async def release(self, key: str, owner: Owner) -> None:
        """Give up a key claimed by ``owner`` (at exit), so the next guard takes it over at once."""
        ...

    async def renew(self, key: str, owner: Owner) -> None:
        """Extend ``owner``'s lease on ``key`` (checked only from other hosts)."""
        ...

    async def keys(self) -> list[KeyInfo]:
        """Every live agent key, for operators."""
        ...

    async def reset(self, key: str) -> bool:
        """Forget a key's loop state (unblocks the agent); False when there was none."""
        ...

    async def aclose(self) -> None:
        """Release connections and files."""
        ...


def wall_clock() -> float:
    """Seconds since the epoch: states are compared across processes and hosts."""
    return time.time()
