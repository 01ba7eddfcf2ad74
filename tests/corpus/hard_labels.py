"""Labels of the hard cases (tests/corpus/hard/): which lines repeat, when a warning and a refusal are due.

A hard trace's label names the lines of each occurrence of the repeated action
(``repeats``); ``warn`` and ``due`` are read off them by the rule that fits the loop:

- ``repeat``: the same action answered the same way (in any trivially different form, back to
  back, in a cycle or with other calls between): warned at the 3rd occurrence, due at the 5th;
- ``side_effect``: a tool annotated destructive and not idempotent, called again: warned at the
  2nd, due at the 3rd;
- ``same_error``: one tool failing with the same error for varied arguments: warned at the 3rd,
  due at the 8th;
- ``same_result``: one tool answering the same for varied arguments: warned at the 4th, never due.

The script that records a trace marks the occurrences as it makes them (``Take.mark``); the
recorder stops when the marks are not the label's ``repeats``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tests.corpus.recording import Script, trace

LOOP_KINDS = frozenset({"variant", "cycle", "interleaved", "batch_errors", "same_result", "side_effect"})
PRODUCTIVE_KINDS = frozenset({"wait_poll", "clock_wait", "backoff", "writes", "polling", "work"})
RULES: dict[str, tuple[int, int | None]] = {
    "repeat": (3, 5),
    "side_effect": (2, 3),
    "same_error": (3, 8),
    "same_result": (4, None),
}
"""Per rule: the occurrence that is warned, and the one by which a refusal is due (None: never)."""


@dataclass(frozen=True)
class HardLabel:
    """A hard trace's label, in the schema of the real-run and hard-case corpora."""

    label: Literal["loop", "productive"]
    kind: str
    note: str
    repeats: tuple[int, ...] = ()
    warn: int | None = None
    due: int | None = None
    fair: tuple[int, ...] = ()
    config: dict[str, Any] | None = None

    def describe(self) -> str:
        """The label in a few words, for listings."""
        return f"{self.label} {self.kind}"

    def to_json(self) -> dict[str, Any]:
        """The label's entry in labels.json."""
        entry: dict[str, Any] = {
            "label": self.label,
            "kind": self.kind,
            "repeats": list(self.repeats),
            "warn": self.warn,
            "due": self.due,
            "fair": list(self.fair),
        }
        if self.config is not None:
            entry["config"] = self.config
        entry["note"] = self.note
        return entry


def hard_loop(
    kind: str, repeats: list[int], note: str, *, rule: str | None = None, config: dict[str, Any] | None = None
) -> HardLabel:
    """A loop whose action occurs at the lines repeats; warn and due follow from the rule (by default the kind's)."""
    if kind not in LOOP_KINDS:
        raise ValueError(f"unknown loop kind {kind}")
    chosen = rule or {"side_effect": "side_effect", "same_result": "same_result"}.get(kind, "repeat")
    warn_at, due_at = RULES[chosen]
    if len(repeats) < warn_at:
        raise ValueError(f"a {kind} loop needs at least {warn_at} occurrences")
    due = repeats[due_at - 1] if due_at is not None and len(repeats) >= due_at else None
    return HardLabel("loop", kind, note, tuple(repeats), repeats[warn_at - 1], due, (), config)


def hard_productive(
    kind: str,
    note: str,
    *,
    repeats: list[int] | None = None,
    fair: list[int] | None = None,
    config: dict[str, Any] | None = None,
) -> HardLabel:
    """Productive work; repeats are the lines of the action that makes it look like a loop."""
    if kind not in PRODUCTIVE_KINDS:
        raise ValueError(f"unknown productive kind {kind}")
    return HardLabel("productive", kind, note, tuple(repeats or ()), None, None, tuple(fair or ()), config)


def hard_trace(name: str, label: HardLabel) -> Callable[[Script], Script]:
    """Registers a script as the recipe of the hard trace ``hard/<name>.jsonl``."""
    return trace(name, label, corpus="hard")
