"""One agent's loop state behind a store: the detector's events, kept, and a store that fails handled.

An agent whose key no other process can touch (``store.shared`` false: a stdio guard's own
key, any key of a single HTTP guard) keeps its state in memory and writes it through; with a
shared store (Redis, several replicas) every event is an atomic update. When the store fails
or is slow, each call waits at most the store's timeout, then the guard fails open (the call
is judged on the state it last saw, and passes if nothing in that state refuses it) or, when
configured, closed (the call is refused with a message saying why; with an owned key, until
the store takes a write again); it recovers by itself.

An owned key's write that fails (a file another process holds locked) is not tried again for
``RETRY_SECONDS``, by any agent of the store: the state stays in memory meanwhile, and the next
write after that writes all of it. So a stuck store costs one wait now and then, not one per
call: answers of other agents that wait behind a judged call's write (one upstream shared by
many agents) keep flowing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

import anyio

from mcp_loop_guard.core import detector
from mcp_loop_guard.core.detector import Call, Outcome, Ticket
from mcp_loop_guard.core.model import Action, Family, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.state import State
from mcp_loop_guard.store.base import Store, StoreError

logger = logging.getLogger(__name__)

Seen = Callable[[Verdict], None]
"""Told a verdict as the state takes it, before the store's write: where what must keep the state's
order goes (the event log; replay ends calls in the order of its lines)."""
V = TypeVar("V", Verdict, tuple[Ticket | None, Verdict])

LOG_INTERVAL = 60.0
"""Seconds between two log lines about one failing store."""
RETRY_SECONDS = 2.0
"""Seconds after an owned key's failed write before writes are tried again (the state stays in memory)."""
UNAVAILABLE = (
    "The loop guard cannot reach its state store right now, so this call was not run (the guard is set to "
    "fail closed). Try again in a moment, or give your final answer with what you have."
)


class SessionRules(Protocol):
    """Where the session's policy in force is read (the guard's rules, swapped by a config reload)."""

    @property
    def session(self) -> Policy:
        """The session's policy now."""
        ...


@dataclass
class StoreHealth:
    """How a store is doing, for logs, ``/readyz`` and metrics."""

    name: str
    degraded: bool = False
    error: str = ""
    failures: int = 0
    retry_at: float = 0.0
    """Until when owned keys' writes are skipped after a failure (wall-clock seconds)."""
    _next_log: float = 0.0

    def failed(self, error: StoreError, now: float) -> None:
        """Record a failure; one log line per interval, however many calls fail."""
        self.failures += 1
        self.error = str(error)
        self.retry_at = now + RETRY_SECONDS
        if not self.degraded or now >= self._next_log:
            logger.warning(
                "the %s state store is unavailable (%s); %d call(s) judged without it so far",
                self.name,
                error,
                self.failures,
            )
            self._next_log = now + LOG_INTERVAL
        self.degraded = True

    def recovered(self) -> None:
        """The store answered again."""
        if self.degraded:
            logger.info("the %s state store is available again", self.name)
        self.degraded = False
        self.error = ""


class AgentLoop:
    """Judges one agent's calls, with its state in a store."""

    def __init__(
        self,
        store: Store,
        key: str,
        session: Policy | SessionRules,
        *,
        ttl: float,
        health: StoreHealth,
        fail_closed: bool = False,
        state: State | None = None,
    ) -> None:
        """``state``: the state loaded at start (owned keys); ``ttl``: seconds an idle state is kept."""
        self.store = store
        self.key = key
        self._session = session
        self.ttl = ttl
        self.health = health
        self.fail_closed = fail_closed
        self.state = state if state is not None else State()
        """The state as last seen: authoritative for an owned key, a fallback for a shared one."""
        self.begun = 0
        """Calls begun in this process, counted as the state takes them: the event log's order of begins."""

    @property
    def session(self) -> Policy:
        """The session's rules in force now (a config reload may change them between two calls)."""
        session = self._session
        return session if isinstance(session, Policy) else session.session

    async def begin(
        self, call: Call, policy: Policy, now: float, seen: Seen | None = None
    ) -> tuple[Ticket | None, Verdict]:
        """See :func:`mcp_loop_guard.core.detector.begin`; the call counts in :attr:`begun` as its verdict is told."""
        if self.store.shared:
            try:
                self.state, outcome = await self.store.update(
                    self.key, lambda state: detector.begin(state, call, policy, self.session, now), self.ttl
                )
            except StoreError as error:
                refused = self._failed(error, call.tool, now)
                if refused is not None:
                    return self._began((None, refused), seen)
            else:
                self.health.recovered()
                return self._began(outcome, seen)
        elif self.fail_closed and self.health.degraded:
            await self._save(now, retry=True)  # the store must take a write again before a call goes on
            if self.health.degraded:
                refused = Verdict(Action.BLOCK, call.tool, 0, UNAVAILABLE, self.state.blocks, Family.STORE)
                return self._began((None, refused), seen)
        ticket, verdict = self._began(detector.begin(self.state, call, policy, self.session, now), seen)
        if not self.store.shared and (call.side_effect or verdict.judged >= Action.BLOCK):
            await self._save(now)
        return ticket, verdict

    def _began(self, judged: tuple[Ticket | None, Verdict], seen: Seen | None) -> tuple[Ticket | None, Verdict]:
        self.begun += 1
        return _told(judged, seen)

    async def finish(self, ticket: Ticket, outcome: Outcome, now: float, seen: Seen | None = None) -> Verdict:
        """See :func:`mcp_loop_guard.core.detector.finish`.

        Shielded: the end of a call is recorded even when the call's scope is being cancelled (the
        upstream went away), and the store's own timeout bounds the wait.
        """
        if self.store.shared:
            try:
                with anyio.CancelScope(shield=True):
                    self.state, verdict = await self.store.update(
                        self.key, lambda state: detector.finish(state, ticket, outcome, self.session, now), self.ttl
                    )
            except StoreError as error:
                self._failed(error, ticket.tool, now, refusing=False)
            else:
                self.health.recovered()
                return _told(verdict, seen)
        verdict = _told(detector.finish(self.state, ticket, outcome, self.session, now), seen)
        if not self.store.shared:
            await self._save(now)
        return verdict

    async def abandon(self, ticket: Ticket, now: float, seen: Callable[[], None] | None = None) -> None:
        """See :func:`mcp_loop_guard.core.detector.abandon` (shielded, as :meth:`finish` is)."""
        if self.store.shared:
            try:
                with anyio.CancelScope(shield=True):
                    self.state, _ = await self.store.update(
                        self.key, lambda state: detector.abandon(state, ticket, self.session, now), self.ttl
                    )
            except StoreError as error:
                self._failed(error, ticket.tool, now, refusing=False)
            else:
                self.health.recovered()
                if seen is not None:
                    seen()
                return
        detector.abandon(self.state, ticket, self.session, now)
        if seen is not None:
            seen()
        if not self.store.shared:
            await self._save(now)

    async def flush(self, now: float) -> None:
        """Write the state now (at exit)."""
        if not self.store.shared:
            await self._save(now, retry=True)

    async def _save(self, now: float, *, retry: bool = False) -> None:
        """Write an owned key's state through; skipped for a moment after the store failed, unless ``retry``."""
        if not retry and self.health.degraded and now < self.health.retry_at:
            return  # the state stays in memory: the next write after the pause writes all of it
        try:
            await self.store.save(self.key, self.state, self.ttl)
        except StoreError as error:
            self._failed(error, "", now, refusing=False)
        else:
            self.health.recovered()

    def _failed(self, error: StoreError, tool: str, now: float, *, refusing: bool = True) -> Verdict | None:
        """Record a store failure; the refusal to return when failing closed, else None (judge locally)."""
        self.health.failed(error, now)
        if refusing and self.fail_closed:
            return Verdict(Action.BLOCK, tool, 0, UNAVAILABLE, self.state.blocks, Family.STORE)
        return None


def _told(judged: V, seen: Seen | None) -> V:
    if seen is not None:
        seen(judged if isinstance(judged, Verdict) else judged[1])
    return judged
