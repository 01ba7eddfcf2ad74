"""Redis or Valkey, for fleets: guard replicas behind a load balancer share every agent's state.

Each event is an optimistic read-fold-write: the state is folded from the value last seen and
written only if the stored value is still that one (a compare-and-set script); otherwise the
fold is redone on the newer value. One round trip per event when one replica keeps serving an
agent, two or three when replicas alternate; a count is never lost either way.

Values are read as bytes and parsed here: a value that is not a state (planted, or not even
UTF-8) is an absent one, while a key holding another type than a string (a hash, a list) makes
every command on it fail, which is a store failure like Redis being down.

Needs the ``redis`` package (``pip install 'mcp-loop-guard[redis]'``).
"""

from __future__ import annotations

import json
import logging
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store.base import (
    KeyInfo,
    Owner,
    StoreError,
    StoreSetupError,
    read_owner,
    read_state,
    state_bytes,
    stored_state,
    wall_clock,
)

logger = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")

PREFIX = "mcp-loop-guard:"
MAX_TRIES = 64
"""Compare-and-set attempts before an update gives up (only under extreme contention on one key)."""
CACHE_SIZE = 10_000
"""Last-seen values kept per key, so an uncontended update is one round trip."""

_CAS = """
local current = redis.call('GET', KEYS[1])
if current == false then current = '' end
if current == ARGV[1] then
  if ARGV[2] == '' then redis.call('DEL', KEYS[1]) else redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end
  return {1, ''}
end
return {0, current}
"""


class RedisStore:
    """Agent states in Redis or Valkey (``redis://``, ``rediss://`` URLs)."""

    name = "redis"
    shared = True

    def __init__(self, url: str, *, timeout: float = 0.25, clock: Callable[[], float] = wall_clock) -> None:
        """Prepare a connection pool (connections open on first use and reopen after failures).

        Raises:
            StoreSetupError: the ``redis`` package is missing or the URL is not a Redis URL.
        """
        try:
            import redis.asyncio  # noqa: PLC0415 - optional dependency, loaded only when configured
        except ImportError as exc:
            msg = "the redis package is not installed: pip install 'mcp-loop-guard[redis]'"
            raise StoreSetupError(msg) from exc
        try:
            self._redis: Any = redis.asyncio.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        except ValueError as exc:
            msg = f"not a Redis URL: {exc}"
            raise StoreSetupError(msg) from exc
        self._cas: Any = self._redis.register_script(_CAS)
        self._timeout = timeout
        self._clock = clock
        self._seen: OrderedDict[str, bytes] = OrderedDict()

    async def _call(self, operation: Awaitable[T]) -> T:
        """One round trip, bounded by the client's socket timeouts; any failure is a StoreError.

        The pool reconnects on the next call. (A cancel scope per command would cost more than
        the command itself: the sockets' own timeouts bound it instead.)
        """
        try:
            return await operation
        except TimeoutError as exc:
            msg = f"Redis did not answer within {self._timeout:g}s"
            raise StoreError(msg) from exc
        except Exception as exc:  # redis raises its own ConnectionError, TimeoutError, ResponseError, ...
            if type(exc).__module__.startswith("redis"):
                raise StoreError(f"Redis: {exc}") from exc
            raise

    def _remember(self, key: str, value: bytes) -> None:
        self._seen[key] = value
        self._seen.move_to_end(key)
        while len(self._seen) > CACHE_SIZE:
            self._seen.popitem(last=False)

    async def load(self, key: str) -> State | None:
        """The key's state, or None when absent (expired keys are gone in Redis)."""
        value = await self._call(self._redis.get(PREFIX + "s:" + key))
        if value is None:
            return None
        self._remember(key, value)
        return stored_state(key, value)

    async def save(self, key: str, state: State, ttl: float) -> None:
        """Write the key's state with its expiry."""
        value = state_bytes(state)
        await self._call(self._redis.set(PREFIX + "s:" + key, value, px=max(1, int(ttl * 1000))))
        self._remember(key, value)

    async def update(self, key: str, fold: Callable[[State], R], ttl: float) -> tuple[State, R]:
        """Fold from the last value seen and compare-and-set; on a conflict, refold the newer value."""
        expected = self._seen.get(key)
        unseen = expected is None  # a value seen before was read (and reported, if unreadable) then
        if expected is None:
            expected = await self._call(self._redis.get(PREFIX + "s:" + key)) or b""
        for attempt in range(MAX_TRIES):
            state = (stored_state(key, expected or None) if unseen else read_state(expected or None)) or State()
            result = fold(state)
            value = state_bytes(state)
            stored, current = await self._call(
                self._cas(keys=[PREFIX + "s:" + key], args=[expected, value, max(1, int(ttl * 1000))])
            )
            if int(stored):
                self._remember(key, value)
                return state, result
            expected, unseen = current, True
            # Jitter growing with each lost race (at most 50 ms), so contenders fall out of step even
            # on a loaded machine where a fixed window keeps them colliding.
            await anyio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))  # noqa: S311 - jitter, not crypto
        msg = f"could not update one agent's state after {MAX_TRIES} concurrent changes"
        raise StoreError(msg)

    async def claim(self, base: str, owner: Owner, ttl: float) -> tuple[str, bool]:
        """Compare-and-set the owner record of the first slot whose owner is gone."""
        now = self._clock()
        slot = 1
        mine = json.dumps([owner.host, owner.pid, owner.started, owner.lease]).encode()
        while True:
            key = base if slot == 1 else f"{base}#{slot}"
            record = PREFIX + "o:" + key
            current = await self._call(self._redis.get(record)) or b""
            held = _owner(current)
            if held is None or not held.alive(now):
                stored, _ = await self._call(self._cas(keys=[record], args=[current, mine, max(1, int(ttl * 1000))]))
                if int(stored):
                    return key, held is not None
                continue  # another guard claimed it first: look again
            slot += 1

    async def release(self, key: str, owner: Owner) -> None:
        """Delete the owner record if it is still ours."""
        record = PREFIX + "o:" + key
        current = await self._call(self._redis.get(record)) or b""
        held = _owner(current)
        if held is not None and (held.host, held.pid) == (owner.host, owner.pid):
            await self._call(self._cas(keys=[record], args=[current, b"", 1]))

    async def renew(self, key: str, owner: Owner) -> None:
        """Rewrite our owner record with the new lease."""
        record = PREFIX + "o:" + key
        value = json.dumps([owner.host, owner.pid, owner.started, owner.lease])
        await self._call(self._redis.set(record, value, px=max(1, int((owner.lease - self._clock()) * 2000))))

    async def keys(self) -> list[KeyInfo]:
        """Every agent key (SCAN), with its remaining time and owner; a key holding no state is shown unreadable."""
        found: list[KeyInfo] = []
        now = self._clock()
        names = await self._call(self._scan())
        for name in sorted(names):
            key = name[len(PREFIX) + 2 :].decode(errors="replace")
            owner_name = PREFIX.encode() + b"o:" + name[len(PREFIX) + 2 :]
            pipeline = self._redis.pipeline(transaction=False).get(name).pttl(name).get(owner_name)
            value, left, owner = await self._call(pipeline.execute(raise_on_error=False))
            if value is None:
                continue  # expired since the scan
            left = left if isinstance(left, int) else 0
            held = _owner(owner) if isinstance(owner, bytes) else None
            found.append(KeyInfo(key, read_state(value), now + max(0, left) / 1000, held))
        return found

    async def _scan(self) -> list[bytes]:
        return [name async for name in self._redis.scan_iter(match=PREFIX + "s:*", count=500)]

    async def reset(self, key: str) -> bool:
        """Delete the key's state."""
        self._seen.pop(key, None)
        return bool(await self._call(self._redis.delete(PREFIX + "s:" + key)))

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()


def _owner(text: bytes) -> Owner | None:
    """An owner record; None for none, or one that does not read (nobody alive holds the key then)."""
    if not text:
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, list) or len(record) != 4:
        return None
    return read_owner(*record)
