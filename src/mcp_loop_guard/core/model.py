"""Values the detector takes and returns. Pure data: no I/O, no MCP, no clock."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import NewType

CallKey = NewType("CallKey", str)
"""Fingerprint of (tool name, canonical arguments)."""

ResultKey = NewType("ResultKey", str)
"""Fingerprint of everything the model sees in a tool result."""


class Action(IntEnum):
    """Graded intervention; ordered so that escalation is ``max()``."""

    ALLOW = 0
    WARN = 1
    BLOCK = 2
    ABORT = 3


class Family(StrEnum):
    """The shape of loop a verdict is about; its value is the name used in logs, metrics and traces."""

    IDENTICAL = "identical"
    """The same call with the same result, again and again."""
    CYCLE = "cycle"
    """A sequence of 2 to N calls repeating with the same results (A-B-A-B)."""
    RECURRING = "recurring"
    """The same call with the same result coming back among the agent's recent calls, whatever came between."""
    SAME_ERROR = "same_error"
    """One tool failing with the same error whatever arguments it is given."""
    SAME_RESULT = "same_result"
    """One tool returning the same result for different arguments."""
    BURST = "burst"
    """One model response asking for the same call many times at once."""
    SIDE_EFFECT = "side_effect"
    """A destructive, non-idempotent tool called again with identical arguments."""
    BUDGET = "budget"
    """A configured call budget ran out."""
    STORE = "store"
    """Not a loop: the state store could not be reached and the guard is set to fail closed."""


class Mode(StrEnum):
    """What the guard does with its verdicts."""

    ENFORCE = "enforce"
    """Warnings, refusals and aborts as judged."""
    WARN = "warn"
    """Never refuse or abort: a call that would be refused is forwarded with a warning."""
    SHADOW = "shadow"
    """Change nothing the model sees; verdicts go to logs, metrics and the event log only."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the proxy must do with one call or result.

    ``reason`` is model-visible text for WARN, BLOCK and ABORT; None for ALLOW. In shadow mode
    ``action`` is ALLOW and ``shadow`` holds what enforce mode would have done.
    """

    action: Action
    tool: str
    streak: int
    """How many times the family's pattern has now repeated, counting this call (0: not compared)."""
    reason: str | None = None
    blocks: int = 0
    """Refusals so far in the current request window."""
    family: Family | None = None
    shadow: Action = Action.ALLOW
    """Shadow mode: the action enforce mode would have taken."""

    @property
    def judged(self) -> Action:
        """The action the rules chose, whatever the mode did with it (for logs, metrics and replay)."""
        return max(self.action, self.shadow)


ALLOWED = Verdict(Action.ALLOW, "", 0)


@dataclass(slots=True)
class Call:
    """What the detector sees of a call before it is forwarded.

    Not frozen, though nothing changes one (nor an :class:`Outcome`): one is made for every call, and a
    frozen dataclass sets each field through ``object.__setattr__``, four times the cost.
    """

    tool: str
    key: str
    """16-hex fingerprint of tool and arguments in key form: bursts and side effects compare it."""
    side_effect: bool = False
    """The tool is annotated destructive and not idempotent."""
    read_only: bool = False
    """The tool is annotated read-only: calling it changes nothing."""
    acts: bool = False
    """The call may change things: annotated not read-only, or a write by its name or arguments."""
    loose: str = ""
    """16-hex fingerprint in loose form, compared where the result must match too ("": :attr:`key`)."""
    waits: bool = False
    """The call waits on purpose (a ``wait`` tool, a ``sleep`` command)."""

    def __post_init__(self) -> None:
        """A call given one fingerprint compares it everywhere."""
        if not self.loose:
            self.loose = self.key


@dataclass(slots=True)
class Outcome:
    """What the detector sees of an answer: a result's fingerprint, or an error's."""

    key: str
    error: bool = False
    says_nothing: bool = False
    """The answer holds nothing to learn: empty, or a plain "no results" / "not found"."""
