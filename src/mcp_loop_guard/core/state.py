"""The loop state of one agent: a small value the detector folds events into, and its wire form.

Everything here is bounded whatever the number of calls: the last few calls (as many as the
longest cycle judged), a counter per judged pattern, the open batches, and a handful of
side-effect counts. Fingerprints are kept as 16 hex digits (64 bits), enough to tell the
calls of one agent apart; state stores keep :meth:`State.dumps`, a compact JSON text.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "DIGEST",
    "MAX_PACE",
    "MAX_REFUSED",
    "MAX_WINDOW",
    "TOKEN",
    "Batch",
    "Entry",
    "ErrorStreak",
    "SameResult",
    "State",
    "StateFormatError",
]

DIGEST: Final = 16
"""Hex digits of a fingerprint kept in the state."""
FORMAT: Final = 1
"""Version of the serialized form; a state of another version is started afresh."""
MAX_EFFECTS: Final = 8
"""Side-effect calls remembered (least recently used forgotten first)."""
MAX_MEMBERS: Final = 32
"""Distinct calls counted per open batch; a burst of more distinct calls is not a burst of one."""
MAX_BATCHES: Final = 8
"""Open batches kept; the oldest is settled when a new one would exceed this."""
MAX_PACE: Final = 8
"""Idle gaps remembered to know the agent's rhythm."""
MAX_WINDOW: Final = 64
"""Longest window of recent calls a policy may ask for (``recurring_window``)."""
TOKEN: Final = DIGEST + 8 + 1
"""Characters of one call in the window: its loose fingerprint, 8 digits of its result's, one of flags."""
_HEX: Final = re.compile(r"[0-9a-f]*")
MAX_REFUSED: Final = 8
"""Refused calls remembered per request window, to let each through once in the next."""


class StateFormatError(ValueError):
    """A stored state that cannot be read (corrupt, or written by an incompatible version)."""


@dataclass(slots=True)
class Entry:
    """One call as the sequential rules remember it."""

    tool: str
    call: str
    """The call's loose fingerprint (:mod:`mcp_loop_guard.core.arguments`): variants of one call share it."""
    result: str
    error: bool = False
    acts: bool = False
    """The call may change things (annotated so, or a write by its name or arguments)."""
    waits: bool = False
    """The call waits on purpose (a ``wait`` tool, a ``sleep`` command)."""
    held: bool = False
    """A patient repeat (see :mod:`mcp_loop_guard.core.patience`): it does not lengthen a streak."""
    gap: float = 0.0
    """Seconds the agent had been idle when the call began (0 when other calls were in flight)."""

    def same(self, other: Entry) -> bool:
        """Same call (tool and arguments, up to trivial variants) with the same result."""
        return self.call == other.call and self.result == other.result


@dataclass(slots=True)
class ErrorStreak:
    """Consecutive error results of one tool with the same error."""

    tool: str
    result: str
    count: int


@dataclass(slots=True)
class SameResult:
    """Consecutive results of one tool that are all the same."""

    tool: str
    result: str
    count: int
    last_call: str
    distinct: int
    """Argument sets in the run, counted as changes of arguments from one call to the next, plus one."""


@dataclass(slots=True)
class Batch:
    """Calls from one model response: started before any of them completed."""

    id: int
    live: int = 0
    """Members in flight."""
    closed: bool = False
    """A member has completed: later calls start a new batch."""
    touched: float = 0.0
    """Last begin or end of a member; a batch untouched for too long was left by a dead process."""
    members: dict[str, int] = field(default_factory=dict)
    """Call key -> members begun with it (refused ones included); bursts compare keys, not loose forms."""
    done: dict[str, int] = field(default_factory=dict)
    """Call key + result fingerprints -> members completed with that result."""
    last: Entry | None = None
    """The last-completing visible result: what the batch adds to the sequence."""
    gap: float = 0.0
    """Seconds the agent had been idle when the batch began (0 when other calls were in flight)."""
    held: bool = False
    """Begun as a patient repeat: its call's repetitions do not lengthen the streak."""
    refused: dict[str, int] = field(default_factory=dict)
    """Call fingerprint -> members refused: they lengthen the call's streak once the batch ends."""
    last_done: str = ""
    """The ``done`` key of :attr:`last`: how many members completed as it did."""
    failed: dict[str, int] = field(default_factory=dict)
    """Tool + error fingerprint -> members that failed so: each counts toward the same-error streak."""


@dataclass(slots=True)
class State:
    """Everything the detector remembers of one agent."""

    history: list[Entry] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    """runs[p - 1]: consecutive calls equal (call and result) to the call p places earlier."""
    error: ErrorStreak | None = None
    same: SameResult | None = None
    effects: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Side-effect call fingerprint -> (tool, times called) since the world last changed by other means."""
    pace: list[float] = field(default_factory=list)
    """The agent's last idle gaps before a call, oldest first: its own rhythm, to tell a deliberate wait."""
    window: str = ""
    """The last calls as fixed-width tokens, oldest first (call, result, flags: see
    :mod:`mcp_loop_guard.core.sequence`), for repeats with other calls between."""
    refused: list[str] = field(default_factory=list)
    """Loose fingerprints of calls refused in the current request window."""
    probes: list[str] = field(default_factory=list)
    """Calls refused in an earlier window, each let through once in this one to see whether the world changed."""
    blocks: int = 0
    """Refusals in the current request window."""
    idle_since: float | None = None
    """When the agent last had nothing in flight; None before its first call."""
    batches: list[Batch] = field(default_factory=list)
    next_batch: int = 1
    last_verdict: str = ""
    """The last non-allow verdict as ``action:family:tool`` (names only), for operators."""
    budget_use: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Budget key -> (window start, calls counted), see :mod:`mcp_loop_guard.core.budget`."""

    @property
    def in_flight(self) -> int:
        """Calls begun and not yet ended."""
        return sum(batch.live for batch in self.batches)

    def dumps(self) -> str:
        """The compact JSON form stores keep."""
        return json.dumps(self.wire(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def loads(cls, text: str | bytes) -> State:
        """Read what :meth:`dumps` wrote.

        Raises:
            StateFormatError: the text is not a state of this format.
        """
        try:
            wire = json.loads(text)
        except ValueError as exc:
            msg = f"unreadable loop state: {exc}"
            raise StateFormatError(msg) from None
        return cls.from_wire(wire)

    @classmethod
    def from_wire(cls, wire: object) -> State:
        """Read the parsed form of :meth:`dumps` (stores parse it with a faster JSON library).

        Raises:
            StateFormatError: the value is not a state of this format.
        """
        if not isinstance(wire, dict) or wire.get("v") != FORMAT:
            msg = "not a loop state of this version"
            raise StateFormatError(msg)
        try:
            return cls._from_wire(wire)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            msg = f"unreadable loop state: {exc}"
            raise StateFormatError(msg) from None

    def wire(self) -> dict[str, Any]:
        """The state as plain JSON values (what :meth:`dumps` encodes)."""
        wire: dict[str, Any] = {"v": FORMAT, "h": [_entry(e) for e in self.history], "r": self.runs}
        if self.error is not None:
            wire["e"] = [self.error.tool, self.error.result, self.error.count]
        if self.same is not None:
            s = self.same
            wire["s"] = [s.tool, s.result, s.count, s.last_call, s.distinct]
        if self.effects:
            wire["x"] = {key: [tool, count] for key, (tool, count) in self.effects.items()}
        if self.pace:
            wire["p"] = self.pace
        if self.window:
            wire["w"] = self.window
        if self.refused:
            wire["f"] = self.refused
        if self.probes:
            wire["o"] = self.probes
        if self.blocks:
            wire["b"] = self.blocks
        if self.idle_since is not None:
            wire["i"] = self.idle_since
        if self.batches:
            wire["B"] = [_batch(b) for b in self.batches]
        wire["n"] = self.next_batch
        if self.last_verdict:
            wire["l"] = self.last_verdict
        if self.budget_use:
            wire["u"] = {key: [start, count] for key, (start, count) in self.budget_use.items()}
        return wire

    @classmethod
    def _from_wire(cls, wire: dict[str, Any]) -> State:
        error = wire.get("e")
        same = wire.get("s")
        return cls(
            history=[_read_entry(entry) for entry in wire["h"]],
            runs=[int(n) for n in wire["r"]],
            error=ErrorStreak(str(error[0]), str(error[1]), int(error[2])) if error else None,
            same=SameResult(str(same[0]), str(same[1]), int(same[2]), str(same[3]), int(same[4])) if same else None,
            effects={str(k): (str(v[0]), int(v[1])) for k, v in wire.get("x", {}).items()},
            pace=[_seconds(gap) for gap in _list(wire.get("p", []))[-MAX_PACE:]],
            window=_window(wire.get("w", "")),
            refused=[str(key) for key in _list(wire.get("f", []))[-MAX_REFUSED:]],
            probes=[str(key) for key in _list(wire.get("o", []))[-MAX_REFUSED:]],
            blocks=int(wire.get("b", 0)),
            idle_since=float(wire["i"]) if "i" in wire else None,
            batches=[_read_batch(b) for b in wire.get("B", [])],
            next_batch=int(wire.get("n", 1)),
            last_verdict=str(wire.get("l", "")),
            budget_use={str(k): (float(v[0]), int(v[1])) for k, v in wire.get("u", {}).items()},
        )


def _entry(entry: Entry) -> list[Any]:
    flags = int(entry.error) | (2 if entry.acts else 0) | (4 if entry.waits else 0) | (8 if entry.held else 0)
    wire: list[Any] = [entry.tool, entry.call, entry.result, flags]
    if entry.gap:
        wire.append(entry.gap)
    return wire


def _read_entry(wire: list[Any]) -> Entry:
    flags = int(wire[3])
    gap = _seconds(wire[4]) if len(wire) > 4 else 0.0  # absent from states written by earlier versions
    error, acts, waits, held = (bool(flags & bit) for bit in (1, 2, 4, 8))
    return Entry(str(wire[0]), str(wire[1]), str(wire[2]), error, acts, waits, held, gap)


def _seconds(value: object) -> float:
    seconds = float(value)  # type: ignore[arg-type]
    if not math.isfinite(seconds):
        msg = f"not a number of seconds: {value!r}"
        raise ValueError(msg)
    return seconds


def _window(value: object) -> str:
    """A stored window: whole tokens of hex digits, at most :data:`MAX_WINDOW` of them."""
    if not isinstance(value, str) or len(value) % TOKEN or not _HEX.fullmatch(value):
        msg = "not a window of calls"
        raise ValueError(msg)
    return value[-MAX_WINDOW * TOKEN :]


def _list(value: object) -> list[Any]:
    if not isinstance(value, list):
        msg = f"expected a list, got {type(value).__name__}"
        raise TypeError(msg)
    return value


def _batch(batch: Batch) -> list[Any]:
    return [
        batch.id,
        batch.live,
        int(batch.closed),
        batch.touched,
        batch.members,
        batch.done,
        _entry(batch.last) if batch.last is not None else None,
        batch.gap,
        int(batch.held),
        batch.refused,
        batch.last_done,
        batch.failed,
    ]


def _read_batch(wire: list[Any]) -> Batch:
    ident, live, closed, touched, members, done, last, gap, held = wire[:9]
    refused = wire[9] if len(wire) > 9 else {}  # absent from states written by earlier versions
    last_done = str(wire[10]) if len(wire) > 10 else (last[1] + last[2] if last else "")
    failed = wire[11] if len(wire) > 11 else {}
    return Batch(
        id=int(ident),
        live=int(live),
        closed=bool(closed),
        touched=float(touched),
        members={str(k): int(v) for k, v in members.items()},
        done={str(k): int(v) for k, v in done.items()},
        last=_read_entry(last) if last else None,
        gap=float(gap),
        held=bool(held),
        refused={str(k): int(v) for k, v in refused.items()},
        last_done=last_done,
        failed={str(k): int(v) for k, v in failed.items()},
    )
