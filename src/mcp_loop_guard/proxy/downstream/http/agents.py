"""The agents an HTTP guard serves: their keys, kept in memory with a bound, their state in the store.

Loop state is kept per agent. A session (``Mcp-Session-Id``) is an agent; a request without
one (``--stateless``, 2026-07-28) belongs to the agent named by the key header, or to the
client's address when there is none. Keys are namespaced by the name of the bearer token the
request carried, so one token's clients can neither see nor touch another's state. With
``LOOP_GUARD_TRUST_KEY_HEADER=false`` the header is ignored: the token name (or address) alone
is the agent, and a client cannot escape its loop state by changing the header.

At most ``LOOP_GUARD_MAX_KEYS`` agents are held in memory: a new one evicts the least recently
used agent with nothing in flight (its state stays in a persistent store; an in-memory store
forgets it), and when every one is busy the request is refused (503, Retry-After).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import Scope, Send

from mcp_loop_guard.core import replies
from mcp_loop_guard.core.model import Mode
from mcp_loop_guard.core.state import State
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.agents import agent_loop, judge_for
from mcp_loop_guard.proxy.downstream.http.middleware import RETRY_AFTER_BUSY, header, reply, retry_after, token_of
from mcp_loop_guard.proxy.relay.events import EventLog
from mcp_loop_guard.proxy.relay.judge import CallObserver, Judge
from mcp_loop_guard.proxy.relay.stopping import Stopping
from mcp_loop_guard.store import Store, StoreError, StoreHealth

__all__ = ["Agents", "BusyError", "KeyedAgent", "agent_key"]


class BusyError(Exception):
    """Every agent held is in the middle of a call: no room for another now."""


@dataclass(eq=False)
class KeyedAgent:
    """One agent held in memory."""

    key: str
    judge: Judge
    last_used: float
    in_flight: int = 0


def agent_key(token: str, header: str | None, address: str, *, trust_header: bool) -> str:
    """The key of a sessionless request's agent: token namespace, then the header or the address."""
    namespace = token or "-"
    if header and trust_header:
        return f"key:{namespace}/{header}"
    if token and not trust_header:
        return f"token:{namespace}"
    return f"client:{namespace}/{address}"


class Agents:
    """Agents by key, least recently used first, at most ``limit`` of them."""

    def __init__(
        self,
        plan: Plan,
        store: Store,
        health: StoreHealth,
        events: EventLog | None,
        observe: CallObserver | None,
        *,
        limit: int,
        stopping: Stopping,
        on_evict: Callable[[str], object] | None = None,
    ) -> None:
        """``on_evict(key)``: told when an agent is dropped from memory; ``stopping``: the guard's, for its relays."""
        self.plan = plan
        self.store = store
        self.health = health
        self.events = events
        self.observe = observe
        self.limit = limit
        self.on_evict = on_evict
        self.stopping = stopping
        """This guard's stopping (not another's in the same process): every relay serving these agents reads it."""
        self.held: OrderedDict[str, KeyedAgent] = OrderedDict()

    async def admit(self, scope: Scope, send: Send) -> KeyedAgent | None:
        """The agent of a request without a session; None when the request was answered instead.

        503 when every agent held is busy; 429 (with ``Retry-After``) for an agent aborted for
        looping whose request window is still open.
        """
        settings = self.plan.settings
        client = scope.get("client")
        key_header = header(scope, settings.session_key_header.lower().encode("latin-1"))
        key = agent_key(
            token_of(scope),
            key_header.decode("latin-1") if key_header is not None else None,
            client[0] if client else "unknown",
            trust_header=settings.trust_key_header,
        )
        try:
            agent = await self.get(key)
        except BusyError:
            await reply(send, 503, replies.TOO_MANY_AGENTS, retry_after(RETRY_AFTER_BUSY))
            return None
        wait = await self.aborted(agent)
        if wait > 0:
            seconds = int(wait) + 1
            await reply(send, 429, replies.aborted_agent(seconds), retry_after(seconds))
            return None
        return agent

    def __len__(self) -> int:
        """Agents held now."""
        return len(self.held)

    async def get(self, key: str) -> KeyedAgent:
        """The agent of ``key``, loaded from the store if it is not held.

        Raises:
            BusyError: the limit is reached and every held agent has a call in flight.
        """
        now = time.time()
        agent = self.held.get(key)
        if agent is not None:
            self.held.move_to_end(key)
            agent.last_used = now
            return agent
        if len(self.held) >= self.limit:
            self._evict_one()
        agent = KeyedAgent(key, self.judge(key, await self.stored(key)), now)
        self.held[key] = agent
        return agent

    async def stored(self, key: str) -> State | None:
        """What the store kept of ``key``'s loop; None when the store is shared (read at each call) or failed."""
        if self.store.shared:
            return None
        try:
            return await self.store.load(key)
        except StoreError as error:
            self.health.failed(error, time.time())
            return None

    def judge(self, key: str, state: State | None = None) -> Judge:
        """The judge of the agent ``key`` names, going on from ``state``."""
        loop = agent_loop(self.plan, self.store, self.health, key, state)
        return judge_for(self.plan, loop, label=key, events=self.events, observe=self.observe)

    def _evict_one(self) -> None:
        for key, agent in self.held.items():
            if agent.in_flight == 0:
                del self.held[key]
                if self.on_evict is not None:
                    self.on_evict(key)
                return
        raise BusyError

    def expire(self, idle: float) -> None:
        """Drop agents unused for ``idle`` seconds with nothing in flight (their state is in the store)."""
        cutoff = time.time() - idle
        for key, agent in list(self.held.items()):
            if agent.last_used < cutoff and agent.in_flight == 0:
                del self.held[key]

    def drop(self, key: str) -> None:
        """Forget an agent now (its session ended)."""
        self.held.pop(key, None)

    async def aborted(self, agent: KeyedAgent) -> float:
        """Seconds until the agent's current request window closes, when it was aborted in it; else 0."""
        loop = agent.judge.agent
        state = loop.state
        if self.store.shared:
            try:
                fresh = await self.store.load(loop.key)
            except StoreError as error:
                self.health.failed(error, time.time())
            else:
                state = loop.state = fresh if fresh is not None else State()  # gone: expired or reset
        session = self.plan.policy
        if session.mode is not Mode.ENFORCE:
            return 0.0  # warn and shadow modes never refuse, so they never abort
        if state.blocks < session.abort_threshold or state.idle_since is None or state.in_flight:
            return 0.0
        left = session.reset_after_seconds - (time.time() - state.idle_since)
        return max(0.0, left)
