"""The detector's rules as one frozen value, built from Settings outside the core."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds and switches; defaults are those of the reference design.

    Raises:
        ValueError: a threshold is below 1 or ``reset_after_seconds`` is not positive.
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

    def __post_init__(self) -> None:
        """Reject values no setting could produce; warn >= block is handled softly instead."""
        for name in ("warn_threshold", "block_threshold", "abort_threshold"):
            if getattr(self, name) < 1:
                msg = f"{name} must be at least 1, got {getattr(self, name)!r}"
                raise ValueError(msg)
        if not self.reset_after_seconds > 0:
            msg = f"reset_after_seconds must be positive, got {self.reset_after_seconds!r}"
            raise ValueError(msg)

    @property
    def misconfiguration(self) -> str | None:
        """Why the guard must switch itself off, or None when the policy is usable."""
        if self.warn_threshold >= self.block_threshold:
            return (
                f"warn threshold ({self.warn_threshold}) must be below block threshold "
                f"({self.block_threshold}); loop detection is disabled"
            )
        return None

    @property
    def active(self) -> bool:
        """True when the detector should judge calls at all."""
        return self.enabled and self.misconfiguration is None

    def ignores(self, tool: str) -> bool:
        """True when ``tool`` matches an ignore pattern (case-sensitive, as tool names are)."""
        return any(fnmatchcase(tool, pattern) for pattern in self.ignore_tools)
