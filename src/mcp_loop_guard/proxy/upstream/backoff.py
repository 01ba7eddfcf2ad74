"""How long to wait for an upstream: before starting a crashed one again, and for its first connection."""

from __future__ import annotations

import random
from dataclasses import dataclass

START_TIMEOUT = 30.0
"""How long start-up (or the first translated request) waits for an upstream's first connection attempt."""
HANDSHAKE_TIMEOUT = 120.0
"""Seconds an upstream may take to answer ``initialize`` when no call timeout is set (``npx`` may download first)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Restart delays: exponential, capped, with "equal jitter" (half fixed, half random).

    The fixed half guarantees a crashed server is never restarted at once, so the calls right
    after a crash see why it crashed; the random half keeps many guards from restarting a
    shared server in step.
    """

    initial: float = 1.0
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt`` (1 for the first restart)."""
        ceiling = min(self.cap, self.initial * 2**attempt)
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))  # noqa: S311 - jitter, not crypto
