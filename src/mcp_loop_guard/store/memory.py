"""A store in this process's memory: for tests, and for ``LOOP_GUARD_STATE=memory`` (state ends with the process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store.base import KeyInfo, Owner, read_state, stored_state, wall_clock, write_state

R = TypeVar("R")


class MemoryStore:
    """Keys in a dict, values in their serialized form (so nothing aliases a caller's state)."""

    name = "memory"
    shared = False

    def __init__(self, clock: Callable[[], float] = wall_clock) -> None:
        """``clock`` gives wall-clock seconds (tests pass their own)."""
        self._values: dict[str, tuple[str, float]] = {}
        self._owners: dict[str, Owner] = {}
        self._clock = clock

    async def load(self, key: str) -> State | None:
        """The key's state, or None when absent or expired."""
        stored = self._values.get(key)
        if stored is None:
            return None
        text, expires = stored
        if expires <= self._clock():
            del self._values[key]
            return None
        return stored_state(key, text)

    async def save(self, key: str, state: State, ttl: float) -> None:
        """Keep the state until ``ttl`` seconds from now."""
        self._values[key] = (write_state(state), self._clock() + ttl)

    async def update(self, key: str, fold: Callable[[State], R], ttl: float) -> tuple[State, R]:
        """Read, fold and write in one step (nothing else runs in between in one event loop)."""
        state = await self.load(key) or State()
        result = fold(state)
        await self.save(key, state, ttl)
        return state, result

    async def claim(self, base: str, owner: Owner, ttl: float) -> tuple[str, bool]:
        """The first key of ``base`` not held by a live owner."""
        now = self._clock()
        slot = 1
        while True:
            key = base if slot == 1 else f"{base}#{slot}"
            held = self._owners.get(key)
            if held is None or not held.alive(now):
                self._owners[key] = owner
                return key, held is not None
            slot += 1

    async def release(self, key: str, owner: Owner) -> None:
        """Give the key up if ``owner`` holds it."""
        if self._owners.get(key) == owner:
            del self._owners[key]

    async def renew(self, key: str, owner: Owner) -> None:
        """Record the owner's new lease."""
        held = self._owners.get(key)
        if held is not None and (held.host, held.pid) == (owner.host, owner.pid):
            self._owners[key] = owner

    async def keys(self) -> list[KeyInfo]:
        """Every unexpired key."""
        now = self._clock()
        return [
            KeyInfo(key, read_state(text), expires, self._owners.get(key))
            for key, (text, expires) in sorted(self._values.items())
            if expires > now
        ]

    async def reset(self, key: str) -> bool:
        """Forget the key's state."""
        return self.forget(key)

    def forget(self, key: str) -> bool:
        """Forget the key's state now (an agent dropped from a bounded memory)."""
        return self._values.pop(key, None) is not None

    async def aclose(self) -> None:
        """Nothing to release."""
