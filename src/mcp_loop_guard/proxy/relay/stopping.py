"""One HTTP guard's stopping, seen by each of its relays: calls in flight end with an error, not a cut connection.

Each guard has its own (made where its app is built, handed to its relays with its agents):
stopping one guard answers its own calls in flight and leaves any other guard in the same
process serving.
"""

from __future__ import annotations

import anyio

__all__ = ["Stopping"]


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

    def add(self, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` when the guard stops (at once, if it has)."""
        self.scopes.add(scope)
        if self.flag:
            scope.cancel()

    def discard(self, scope: anyio.CancelScope) -> None:
        """``scope`` is done."""
        self.scopes.discard(scope)

    async def wait(self) -> None:
        """Return once the guard stops."""
        waiting = anyio.CancelScope()
        self.add(waiting)
        with waiting:
            await anyio.sleep_forever()
        self.discard(waiting)
