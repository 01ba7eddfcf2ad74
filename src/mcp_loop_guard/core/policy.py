"""The detector's rules as one frozen value, built from Settings outside the core."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from mcp_loop_guard.core.arguments import NO_RULES, ArgumentRules
from mcp_loop_guard.core.budget import Budget
from mcp_loop_guard.core.model import Mode
from mcp_loop_guard.core.scrub import ScrubRules

MAX_CYCLE_PERIOD = 8
"""The longest cycle the state can remember; each period costs one remembered call."""
MAX_WINDOW = 64
"""The longest window of recent calls a policy may ask for (``recurring_window``)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds and switches; defaults are those of the reference design plus the loop families.

    A family's threshold of 0 switches that step off (``same_result_block_threshold=0``: never
    refused). ``abort_threshold``, ``use_terminate``, ``reset_after_seconds``, ``mode``,
    ``cycle_max_period`` and ``recurring_window`` (as the length of what the state remembers) are
    read from the session's policy; the others from the policy of the server and tool a call is
    routed to.

    Raises:
        ValueError: a threshold is out of range or ``reset_after_seconds`` is not positive.
    """

    enabled: bool = True
    warn_threshold: int = 3
    block_threshold: int = 5
    abort_threshold: int = 3
    ignore_tools: tuple[str, ...] = field(default=())
    """Tool names or shell-style patterns (``github__*``) the detector never sees."""
    ignore_errors: bool = False
    use_terminate: bool = False
    reset_after_seconds: float = 120.0
    cycle_max_period: int = 8
    """Longest repeating sequence judged as a cycle; 1 turns cycle detection off."""
    recurring_warn_threshold: int | None = None
    recurring_block_threshold: int | None = None
    """The same call with the same result this many times among the agent's last ``recurring_window``
    calls, whatever came between (no new write, no wait), is a loop too; None: as many as for
    identical calls in a row (``warn_threshold``, ``block_threshold``), 0: never."""
    recurring_window: int = 20
    same_error_warn_threshold: int = 3
    same_error_block_threshold: int = 8
    same_result_warn_threshold: int = 4
    same_result_block_threshold: int = 0
    burst_detection: bool = True
    """Identical calls inside one batch count like a streak."""
    side_effect_warn_threshold: int = 2
    side_effect_block_threshold: int = 3
    trust_annotations: bool = True
    """Judge destructive, non-idempotent tools by their MCP annotations."""
    pollable: bool = False
    """The tool is polled on purpose (a job's status): its identical answers are never a loop by themselves."""
    arguments: ArgumentRules = NO_RULES
    """Which argument differences make a call another call (``ignoreArgs``, ``orderedArgs``,
    ``caseInsensitiveArgs``)."""
    scrub: ScrubRules = field(default_factory=ScrubRules)
    mode: Mode = Mode.ENFORCE
    budgets: tuple[Budget, ...] = ()
    """The budgets that count calls judged by this policy (already matched to the call's route)."""
    _misconfiguration: str | None = field(default=None, init=False, repr=False, compare=False)
    """:attr:`misconfiguration`, worked out once: every call asks whether the policy is active."""

    def __post_init__(self) -> None:
        """Reject values no setting could produce; warn >= block is handled softly instead."""
        for name in ("warn_threshold", "block_threshold", "abort_threshold"):
            if getattr(self, name) < 1:
                msg = f"{name} must be at least 1, got {getattr(self, name)!r}"
                raise ValueError(msg)
        for name in _FAMILY_THRESHOLDS:
            if (getattr(self, name) or 0) < 0:
                msg = f"{name} must be 0 (off) or more, got {getattr(self, name)!r}"
                raise ValueError(msg)
        if not 1 <= self.cycle_max_period <= MAX_CYCLE_PERIOD:
            msg = f"cycle_max_period must be from 1 to {MAX_CYCLE_PERIOD}, got {self.cycle_max_period!r}"
            raise ValueError(msg)
        if not 2 <= self.recurring_window <= MAX_WINDOW:
            msg = f"recurring_window must be from 2 to {MAX_WINDOW}, got {self.recurring_window!r}"
            raise ValueError(msg)
        if not self.reset_after_seconds > 0:
            msg = f"reset_after_seconds must be positive, got {self.reset_after_seconds!r}"
            raise ValueError(msg)
        object.__setattr__(self, "_misconfiguration", self._find_misconfiguration())

    @property
    def recurring_warn(self) -> int:
        """The recurring family's warning threshold in force."""
        return self.warn_threshold if self.recurring_warn_threshold is None else self.recurring_warn_threshold

    @property
    def recurring_block(self) -> int:
        """The recurring family's refusal threshold in force."""
        return self.block_threshold if self.recurring_block_threshold is None else self.recurring_block_threshold

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

    @property
    def active(self) -> bool:
        """True when the detector should judge calls at all."""
        return self.enabled and self.misconfiguration is None

    def ignores(self, tool: str) -> bool:
        """True when ``tool`` matches an ignore pattern (case-sensitive, as tool names are)."""
        return any(fnmatchcase(tool, pattern) for pattern in self.ignore_tools)


_FAMILY_PAIRS = (
    ("same_error_warn_threshold", "same_error_block_threshold"),
    ("same_result_warn_threshold", "same_result_block_threshold"),
    ("side_effect_warn_threshold", "side_effect_block_threshold"),
)
_FAMILY_THRESHOLDS = (
    *(name for pair in _FAMILY_PAIRS for name in pair),
    "recurring_warn_threshold",
    "recurring_block_threshold",
)
