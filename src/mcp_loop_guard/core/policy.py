"""The detector's rules as one frozen value, built from Settings outside the core.

Its defaults and ranges are those of the rule settings' declarations (:mod:`.registry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from fnmatch import fnmatchcase
from typing import Any, Final

from mcp_loop_guard.core.arguments import NO_RULES, ArgumentRules
from mcp_loop_guard.core.budget import Budget
from mcp_loop_guard.core.model import Mode
from mcp_loop_guard.core.registry import MAX_CYCLE_PERIOD, MAX_WINDOW, RULE
from mcp_loop_guard.core.scrub import ScrubRules

__all__ = ["MAX_CYCLE_PERIOD", "MAX_WINDOW", "Policy"]


def _default(name: str) -> Any:
    """The declared default of the rule setting ``name``."""
    return RULE[name].default


_MODE: Final = Mode(_default("mode"))


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds and switches; defaults are those the rule settings declare.

    A family's threshold of 0 switches that step off (``same_result_block_threshold=0``: never
    refused). ``abort_threshold``, ``use_terminate``, ``reset_after_seconds``, ``mode``,
    ``cycle_max_period`` and ``recurring_window`` (as the length of what the state remembers) are
    read from the session's policy; the others from the policy of the server and tool a call is
    routed to.

    Raises:
        ValueError: a value outside its setting's range (a threshold below 1, a window that is not positive...).
    """

    enabled: bool = _default("enabled")
    warn_threshold: int = _default("warn_threshold")
    block_threshold: int = _default("block_threshold")
    abort_threshold: int = _default("abort_threshold")
    ignore_tools: tuple[str, ...] = _default("ignore_tools")
    """Tool names or shell-style patterns (``github__*``) the detector never sees."""
    ignore_errors: bool = _default("ignore_errors")
    use_terminate: bool = _default("use_terminate")
    reset_after_seconds: float = _default("reset_after_seconds")
    cycle_max_period: int = _default("cycle_max_period")
    """Longest repeating sequence judged as a cycle; 1 turns cycle detection off."""
    recurring_warn_threshold: int | None = _default("recurring_warn_threshold")
    recurring_block_threshold: int | None = _default("recurring_block_threshold")
    """The same call with the same result this many times among the agent's last ``recurring_window``
    calls, whatever came between (no new write, no wait), is a loop too; None: as many as for
    identical calls in a row (``warn_threshold``, ``block_threshold``), 0: never."""
    recurring_window: int = _default("recurring_window")
    same_error_warn_threshold: int = _default("same_error_warn_threshold")
    same_error_block_threshold: int = _default("same_error_block_threshold")
    same_result_warn_threshold: int = _default("same_result_warn_threshold")
    same_result_block_threshold: int = _default("same_result_block_threshold")
    burst_detection: bool = _default("burst_detection")
    """Identical calls inside one batch count like a streak."""
    side_effect_warn_threshold: int = _default("side_effect_warn_threshold")
    side_effect_block_threshold: int = _default("side_effect_block_threshold")
    trust_annotations: bool = _default("trust_annotations")
    """Judge destructive, non-idempotent tools by their MCP annotations."""
    pollable: bool = _default("pollable")
    """The tool is polled on purpose (a job's status): its identical answers are never a loop by themselves."""
    arguments: ArgumentRules = NO_RULES
    """Which argument differences make a call another call (``ignoreArgs``, ``orderedArgs``,
    ``caseInsensitiveArgs``)."""
    scrub: ScrubRules = field(default_factory=ScrubRules)
    """The presets (``scrub``) and keys (``scrubKeys``) left out of result fingerprints."""
    mode: Mode = _MODE
    budgets: tuple[Budget, ...] = ()
    """The budgets that count calls judged by this policy (already matched to the call's route)."""
    _misconfiguration: str | None = field(default=None, init=False, repr=False, compare=False)
    """:attr:`misconfiguration`, worked out once: every call asks whether the policy is active."""
    recurring_warn: int = field(default=0, init=False, repr=False, compare=False)
    """The recurring family's warning threshold in force (worked out once, as those below: every call asks)."""
    recurring_block: int = field(default=0, init=False, repr=False, compare=False)
    """The recurring family's refusal threshold in force."""
    active: bool = field(default=False, init=False, repr=False, compare=False)
    """True when the detector should judge calls at all."""

    def __post_init__(self) -> None:
        """Reject values no setting could produce; warn >= block is handled softly instead."""
        for setting in _BOUNDED:
            problem = setting.problem(getattr(self, setting.name))
            if problem is not None:
                raise ValueError(problem)
        warn, block = self.recurring_warn_threshold, self.recurring_block_threshold
        object.__setattr__(self, "recurring_warn", self.warn_threshold if warn is None else warn)
        object.__setattr__(self, "recurring_block", self.block_threshold if block is None else block)
        object.__setattr__(self, "_misconfiguration", self._find_misconfiguration())
        object.__setattr__(self, "active", self.enabled and self._misconfiguration is None)

    @property
    def misconfiguration(self) -> str | None:
        """Why the guard must switch itself off, or None when the policy is usable."""
        return self._misconfiguration

    def _find_misconfiguration(self) -> str | None:
        if self.warn_threshold >= self.block_threshold:
            return (
                f"warn threshold ({self.warn_threshold}) must be below block threshold "
                f"({self.block_threshold}); loop detection is disabled"
            )
        pairs = [(warn, block, getattr(self, warn), getattr(self, block)) for warn, block in _FAMILY_PAIRS]
        pairs.append(
            ("recurring_warn_threshold", "recurring_block_threshold", self.recurring_warn, self.recurring_block)
        )
        for warn, block, low, high in pairs:
            if low and high and low >= high:
                return f"{warn} ({low}) must be below {block} ({high}); loop detection is disabled"
        return None

    def ignores(self, tool: str) -> bool:
        """True when ``tool`` matches an ignore pattern (case-sensitive, as tool names are)."""
        return bool(self.ignore_tools) and any(fnmatchcase(tool, pattern) for pattern in self.ignore_tools)


_FAMILY_PAIRS = (
    ("same_error_warn_threshold", "same_error_block_threshold"),
    ("same_result_warn_threshold", "same_result_block_threshold"),
    ("side_effect_warn_threshold", "side_effect_block_threshold"),
)
_BOUNDED = tuple(
    RULE[each.name]
    for each in fields(Policy)
    if each.name in RULE and (RULE[each.name].ge, RULE[each.name].gt, RULE[each.name].le) != (None, None, None)
)
"""The rule settings with a range that are fields of Policy, checked when one is made."""
