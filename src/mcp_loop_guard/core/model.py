"""Values the detector takes and returns. Pure data: no I/O, no MCP, no clock."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
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


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the proxy must do with one call or result.

    ``reason`` is model-visible text for WARN, BLOCK and ABORT; None for ALLOW.
    """

    action: Action
    tool: str
    streak: int
    """Identical (tool, arguments, result) calls in a row, counting this one."""
    reason: str | None = None
    blocks: int = 0
    """Refusals so far in the current request window."""


ALLOWED = Verdict(Action.ALLOW, "", 0)
