"""The loop state of one agent: a small value the detector folds events into, and its wire form.

Everything here is bounded whatever the number of calls: the last few calls (as many as the
longest cycle judged), a counter per judged pattern, the open batches, and a handful of
side-effect counts. Fingerprints are kept as 16 hex digits (64 bits), enough to tell the
calls of one agent apart; state stores keep :meth:`State.dumps`, a compact JSON text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["DIGEST", "Batch", "Entry", "ErrorStreak", "SameResult", "State", "StateFormatError"]

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


class StateFormatError(ValueError):
    """A stored state that cannot be read (corrupt, or written by an incompatible version)."""


@dataclass(slots=True)
class Entry:
    """One call as the sequential rules remember it."""

    tool: str
    call: str
    result: str
    error: bool = False
    acts: bool = False
    """The tool is annotated as not read-only: the same acknowledgment for each item is expected."""

    def same(self, other: Entry) -> bool:
        """Same call (tool and arguments) with the same result."""
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
    """Call fingerprint -> members begun with it (refused ones included)."""
    done: dict[str, int] = field(default_factory=dict)
    """Call + result fingerprints -> members completed with that result."""
    last: Entry | None = None
    """The last-completing visible result: what the batch adds to the sequence."""
    gap: float = 0.0
    """Seconds the agent had been idle when the batch began (0 when other calls were in flight)."""
    patient: bool = False
    """Begun after a patient wait (``poll_seconds``): its call's repetitions start over."""
    refused: dict[str, int] = field(default_factory=dict)
    """Call fingerprint -> members refused: they lengthen the call's streak once the batch ends."""


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
    gap: float = 0.0
    """Seconds the agent waited before its last sequential call (0: unknown), to tell a backoff."""
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
        if self.gap:
            wire["g"] = self.gap
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
            gap=float(wire.get("g", 0.0)),
            blocks=int(wire.get("b", 0)),
            idle_since=float(wire["i"]) if "i" in wire else None,
            batches=[_read_batch(b) for b in wire.get("B", [])],
            next_batch=int(wire.get("n", 1)),
            last_verdict=str(wire.get("l", "")),
            budget_use={str(k): (float(v[0]), int(v[1])) for k, v in wire.get("u", {}).items()},
        )


def _entry(entry: Entry) -> list[Any]:
    return [entry.tool, entry.call, entry.result, int(entry.error) | (2 if entry.acts else 0)]


def _read_entry(wire: list[Any]) -> Entry:
    flags = int(wire[3])
    return Entry(str(wire[0]), str(wire[1]), str(wire[2]), bool(flags & 1), bool(flags & 2))


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
        int(batch.patient),
        batch.refused,
    ]


def _read_batch(wire: list[Any]) -> Batch:
    ident, live, closed, touched, members, done, last, gap, patient = wire[:9]
    refused = wire[9] if len(wire) > 9 else {}  # absent from states written by earlier versions
    return Batch(
        id=int(ident),
        live=int(live),
        closed=bool(closed),
        touched=float(touched),
        members={str(k): int(v) for k, v in members.items()},
        done={str(k): int(v) for k, v in done.items()},
        last=_read_entry(last) if last else None,
        gap=float(gap),
        patient=bool(patient),
        refused={str(k): int(v) for k, v in refused.items()},
    )
