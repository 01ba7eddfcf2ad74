"""The detector's rules as one frozen value, built from Settings outside the core."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Policy:
    """Thresholds and switches; defaults are those of the reference design."""

    enabled: bool = True
    warn_threshold: int = 3
    block_threshold: int = 5
    abort_threshold: int = 3
    ignore_tools: tuple[str, ...] = field(default=())
    ignore_errors: bool = False
    use_terminate: bool = False
    reset_after_seconds: float = 120.0

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
