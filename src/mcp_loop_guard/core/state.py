"""The loop state of one agent: a small value the detector folds events into, and its wire form.

Everything here is bounded whatever the number of calls: the last few calls (as many as the
longest cycle judged), a counter per judged pattern, the open batches, and a handful of
side-effect counts. Fingerprints are kept as 16 hex digits (64 bits), enough to tell the
calls of one agent apart; state stores keep :meth:`State.dumps`, a compact JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from mcp_loop_guard.core.budget import MAX_BUDGETS
from mcp_loop_guard.core.policy import MAX_CYCLE_PERIOD, MAX_WINDOW

__all__ = [
    "DIGEST",
    "MAX_ERRORS",
    "MAX_PACE",
    "MAX_REFUSED",
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
MAX_FIELDS: Final = 16
"""Items of one record in the wire form (an entry, a batch...): later versions may append some."""
MAX_ERRORS: Final = 4
"""Failures counted for the same-error rule at once (tools, or errors of one tool)."""
MAX_PACE: Final = 8
"""Idle gaps remembered to know the agent's rhythm."""
MAX_REFUSED: Final = 8
"""Refused calls remembered per request window, to let each through once in the next."""
TOKEN: Final = DIGEST + 8 + 1
"""Characters of one call in the window: its loose fingerprint, 8 digits of its result's, one of flags."""
_HEX: Final = re.compile(r"(?:[0-9a-f]{24}[0-9a-v])*")
"""Window tokens: 24 hex digits of fingerprints, then one character of flags."""

_T = TypeVar("_T")


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
    says_nothing: bool = False
    """The answer holds nothing to learn (empty, "no results"): no news for the recurring rule."""
    wired: tuple[Any, ...] | None = field(default=None, init=False, repr=False, compare=False)
    """The wire form of an entry of the history, made at the first write: the state is written after every
    call, and each entry of the history is in as many writes as the history is long. Nothing changes an
    entry once in the history (a batch's last entry, which may still change, is not kept so)."""

    def same(self, other: Entry) -> bool:
        """Same call (tool and arguments, up to trivial variants) with the same result."""
        return self.call == other.call and self.result == other.result


@dataclass(slots=True)
class ErrorStreak:
    """Error results of one tool with the same error, whatever came between (until the tool succeeds)."""

    tool: str
    result: str
    count: int
    run: int
    """Of them, those since the tool last failed another way."""


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
    seen: str = ""
    """Window tokens of the members that completed before :attr:`last`: each joins the window too."""
    tools: dict[str, int] = field(default_factory=dict)
    """Tool -> members in flight: copies a failing tool is about to fail again, for the same-error rule."""


@dataclass(slots=True)
class State:
    """Everything the detector remembers of one agent."""

    history: list[Entry] = field(default_factory=list)
    runs: list[int] = field(default_factory=list)
    """runs[p - 1]: consecutive calls equal (call and result) to the call p places earlier."""
    errors: list[ErrorStreak] = field(default_factory=list)
    """The failures counted toward the same-error rule, one per tool and error, the latest last."""
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
        except (ValueError, RecursionError) as exc:
            msg = f"unreadable loop state: {exc}"
            raise StateFormatError(msg) from None
        return cls.from_wire(wire)

    @classmethod
    def from_wire(cls, wire: object) -> State:
        """Read the parsed form of :meth:`dumps` (stores parse it with a faster JSON library).

        Total over JSON values: anything that is not a state :meth:`wire` could have written (a
        container of the wrong type, a count that is negative, not finite or absurdly large, more
        entries than the state ever keeps) raises StateFormatError, so a record planted in a store
        can neither crash a guard nor hand the detector a state it could not have built. The error
        names the field, never the value.

        Raises:
            StateFormatError: the value is not a state of this format.
        """
        if not isinstance(wire, dict) or wire.get("v") != FORMAT:
            msg = "not a loop state of this version"
            raise StateFormatError(msg)
        return _read_state(cls, wire)

    def wire(self) -> dict[str, Any]:
        """The state as plain JSON values (what :meth:`dumps` encodes; the history's entries as tuples)."""
        history = [e.wired or _wired(e) for e in self.history]  # tuples, kept from one write to the next
        wire: dict[str, Any] = {"v": FORMAT, "h": history, "r": self.runs}
        if self.errors:
            wire["e"] = [[e.tool, e.result, e.count, e.run] for e in self.errors]
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


def _wired(entry: Entry) -> tuple[Any, ...]:
    """An entry of the history in wire form, kept (see :attr:`Entry.wired`)."""
    entry.wired = tuple(_entry(entry))
    return entry.wired


def _entry(entry: Entry) -> list[Any]:
    flags = entry.error | entry.acts << 1 | entry.waits << 2 | entry.held << 3 | entry.says_nothing << 4  # an int
    wire: list[Any] = [entry.tool, entry.call, entry.result, flags]
    if entry.gap:
        wire.append(entry.gap)
    return wire


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
        batch.seen,
        batch.tools,
    ]


# --- reading, checked ---------------------------------------------------------------------------

MAX_COUNT: Final = 2**53
"""The largest count a state holds (an exact float too): far beyond any real one."""
MAX_SECONDS: Final = 1e11
"""The largest time or gap, in seconds, a state holds (the year 5138, as seconds since the epoch)."""


def _read_state(cls: type[State], wire: dict[str, Any]) -> State:
    history = _list(wire.get("h"), "h", MAX_CYCLE_PERIOD)
    refused, probes = _list(wire.get("f", []), "f", MAX_REFUSED), _list(wire.get("o", []), "o", MAX_REFUSED)
    error = wire.get("e")
    same = wire.get("s")
    return cls(
        history=[_read_entry(entry, "h") for entry in history],
        runs=[_count(n, "r") for n in _list(wire.get("r"), "r", MAX_CYCLE_PERIOD)],
        errors=_read_errors(error) if error is not None else [],
        same=_read_same(same) if same is not None else None,
        effects={key: _pair(value, "x", _text) for key, value in _object(wire.get("x", {}), "x", MAX_EFFECTS).items()},
        pace=[_seconds(gap, "p") for gap in _list(wire.get("p", []), "p", MAX_PACE)],
        window=_window(wire.get("w", "")),
        refused=[_text(key, "f") for key in refused],
        probes=[_text(key, "o") for key in probes],
        blocks=_count(wire.get("b", 0), "b"),
        idle_since=_seconds(wire["i"], "i") if wire.get("i") is not None else None,
        batches=[_read_batch(batch) for batch in _list(wire.get("B", []), "B", MAX_BATCHES)],
        next_batch=_count(wire.get("n", 1), "n"),
        last_verdict=_text(wire.get("l", ""), "l"),
        budget_use={
            key: _pair(value, "u", _seconds) for key, value in _object(wire.get("u", {}), "u", MAX_BUDGETS).items()
        },
    )


def _bad(field: str, what: str) -> StateFormatError:
    return StateFormatError(f"unreadable loop state: {field!r} {what}")


def _list(value: object, field: str, most: int, least: int = 0) -> list[Any]:
    if not isinstance(value, list):
        raise _bad(field, "is not a list")
    if not least <= len(value) <= most:
        raise _bad(field, f"holds {len(value)} items (from {least} to {most} expected)")
    return value


def _object(value: object, field: str, most: int) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(field, "is not an object")
    if len(value) > most:
        raise _bad(field, f"holds {len(value)} members (at most {most} expected)")
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise _bad(field, "holds a value that is not a string")
    return value


def _count(value: object, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    raise _bad(field, f"holds a value that is not a count from 0 to {MAX_COUNT}")


def _seconds(value: object, field: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and -MAX_SECONDS <= value <= MAX_SECONDS:
        return float(value)  # NaN fails the comparisons, as infinities do
    raise _bad(field, f"holds a value that is not a number of seconds within {MAX_SECONDS:g}")


def _flag(value: object, field: str) -> bool:
    if value in (0, 1) and isinstance(value, int) and not isinstance(value, bool):
        return bool(value)
    raise _bad(field, "holds a flag that is not 0 or 1")


def _pair(value: object, field: str, first: Callable[[object, str], _T]) -> tuple[_T, int]:
    item = _list(value, field, MAX_FIELDS, 2)
    return first(item[0], field), _count(item[1], field)


def _counts(value: object, field: str) -> dict[str, int]:
    return {key: _count(n, field) for key, n in _object(value, field, MAX_MEMBERS).items()}


def _read_entry(value: object, field: str) -> Entry:
    item = _list(list(value) if isinstance(value, tuple) else value, field, MAX_FIELDS, 4)  # tuple: as wire() keeps
    flags = _count(item[3], field)
    if flags > 31:
        raise _bad(field, "holds flags other than error (1), acts (2), waits (4), held (8) and says nothing (16)")
    gap = _seconds(item[4], field) if len(item) > 4 else 0.0  # absent from states written by earlier versions
    error, acts, waits, held, empty = (bool(flags & bit) for bit in (1, 2, 4, 8, 16))
    tool, call, result = _text(item[0], field), _text(item[1], field), _text(item[2], field)
    return Entry(tool, call, result, error, acts, waits, held, gap, empty)


def _window(value: object) -> str:
    """A stored window: whole tokens of lower-case hex digits, at most :data:`MAX_WINDOW` of them."""
    return _tokens(value, "w", MAX_WINDOW)


def _tokens(value: object, field: str, most: int) -> str:
    if not isinstance(value, str) or len(value) % TOKEN or len(value) > most * TOKEN or not _HEX.fullmatch(value):
        raise _bad(field, f"holds no tokens of at most {most} calls")
    return value


def _read_errors(value: object) -> list[ErrorStreak]:
    """The same-error counts: a list of them, or the one a state of an earlier version kept."""
    if isinstance(value, list) and value and isinstance(value[0], str):
        return [_read_error(value)]
    return [_read_error(item) for item in _list(value, "e", MAX_ERRORS, 1)]


def _read_error(value: object) -> ErrorStreak:
    item = _list(value, "e", MAX_FIELDS, 3)
    count = _count(item[2], "e")
    run = min(_count(item[3], "e"), count) if len(item) > 3 else count  # an earlier version kept runs only
    return ErrorStreak(_text(item[0], "e"), _text(item[1], "e"), count, run)


def _read_same(value: object) -> SameResult:
    item = _list(value, "s", MAX_FIELDS, 5)
    return SameResult(
        _text(item[0], "s"), _text(item[1], "s"), _count(item[2], "s"), _text(item[3], "s"), _count(item[4], "s")
    )


def _read_batch(value: object) -> Batch:
    item = _list(value, "B", MAX_FIELDS, 9)
    last = item[6]
    return Batch(
        id=_count(item[0], "B"),
        live=_count(item[1], "B"),
        closed=_flag(item[2], "B"),
        touched=_seconds(item[3], "B"),
        members=_counts(item[4], "B"),
        done=_counts(item[5], "B"),
        last=_read_entry(last, "B") if last is not None else None,
        gap=_seconds(item[7], "B"),
        held=_flag(item[8], "B"),
        refused=_counts(item[9], "B") if len(item) > 9 else {},  # absent from states written by earlier versions
        last_done=_text(item[10], "B") if len(item) > 10 else (last[1] + last[2] if isinstance(last, list) else ""),
        failed=_counts(item[11], "B") if len(item) > 11 else {},
        seen=_tokens(item[12], "B", MAX_MEMBERS) if len(item) > 12 else "",
        tools=_counts(item[13], "B") if len(item) > 13 else {},
    )
