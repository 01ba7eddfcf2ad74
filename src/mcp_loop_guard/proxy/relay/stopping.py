"""The HTTP guard's stopping, seen by every relay: calls in flight end with an error, not a cut connection."""

from __future__ import annotations

import anyio

__all__ = ["STOPPING", "Stopping"]


class Stopping:
    """The guard is shutting down: calls in flight are answered with an error instead of cut off."""

    def __init__(self) -> None:
        """Not stopping yet."""
        self.flag = False
        self.scopes: set[anyio.CancelScope] = set()

    def set(self) -> None:
        """Stop: every relayed request in flight ends now."""
        self.flag = True
        for scope in list(self.scopes):
            scope.cancel()


STOPPING = Stopping()
"""Process-wide: set at the first SIGTERM or SIGINT of an HTTP guard."""
