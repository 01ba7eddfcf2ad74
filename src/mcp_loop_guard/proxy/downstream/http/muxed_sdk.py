"""The SDK path of the HTTP guard in front of one stdio server, loaded when the first 2026-07-28 request comes.

The guard opened the shared child itself (:class:`~mcp_loop_guard.proxy.upstream.shared_child.SharedChild`);
the SDK reaches it as one more relayed session of its mux, so the child keeps its one
handshake and its state is the same for clients of both eras.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import anyio
import anyio.abc

from mcp_loop_guard.config import ServerSpec, StdioServer
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Limits, Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules
from mcp_loop_guard.proxy.downstream.http.sessionless import Sessionless
from mcp_loop_guard.proxy.downstream.sessions import SessionFactory
from mcp_loop_guard.proxy.upstream.backoff import START_TIMEOUT, Backoff
from mcp_loop_guard.proxy.upstream.mux import Mux
from mcp_loop_guard.proxy.upstream.pool import PROXY_INFO, SHARED_CAPABILITIES, Slot
from mcp_loop_guard.proxy.upstream.shared_child import SharedChild
from mcp_loop_guard.proxy.upstream.transports import open_view_upstream

__all__ = ["ViewSlot", "routed_translation", "shared_translation"]

WAIT_STEP = 0.05
"""Seconds between looks at the shared child while it is (re)starting."""


class ViewSlot(Slot):
    """The SDK's session on the shared child, opened again on each new child (a restart, a config reload)."""

    def __init__(self, current: Callable[[], SharedChild], limits: Limits) -> None:
        """``current()``: the shared child now."""
        super().__init__(current().spec, shared=True, limits=limits, backoff=Backoff(initial=WAIT_STEP, cap=1.0))
        self.current = current
        self._digest: str | None = None

    async def _ready_mux(self) -> tuple[SharedChild, Mux]:
        while True:
            shared = self.current()
            mux = shared.mux
            if mux is not None and mux.closed is None and shared.status == "ready":
                return shared, mux
            await anyio.sleep(WAIT_STEP)  # a child's restart has no event of its own here

    async def _serve_once(self) -> str:
        shared, mux = await self._ready_mux()
        self.spec, self.name = shared.spec, shared.name
        async with open_view_upstream(shared.spec, mux, max_bytes=self.limits.max_message_bytes) as upstream:
            upstream.downstream = self.router
            await upstream.connect(PROXY_INFO, SHARED_CAPABILITIES)
            self.identity = upstream.initialize_result
            self.connection = upstream
            changed = self._digest is not None and shared.tools_digest != self._digest
            self._digest = shared.tools_digest
            self._set("ready", "connected", "connected", tools_changed=changed)
            return await upstream.wait_gone()


async def shared_translation(  # noqa: PLR0917 - what the SDK path is made of
    plan: Plan,
    current: Callable[[], SharedChild],
    agents: Agents,
    metrics: Metrics,
    security: HostRules,
    tg: anyio.abc.TaskGroup,
) -> Sessionless:
    """The SDK path on the shared child ``current()``, its session supervised in ``tg``."""
    slot = ViewSlot(current, plan.limits)
    factory = SessionFactory(plan, [slot], on_dropped=metrics.dropped, on_listed=metrics.learn)
    await factory.start(tg, settle=START_TIMEOUT)
    return Sessionless(plan, factory=factory, agents=agents, security=security)


async def routed_translation(  # noqa: PLR0917 - what the SDK path is made of
    plan: Plan,
    child: Callable[[str], SharedChild | None],
    agents: Agents,
    metrics: Metrics,
    security: HostRules,
    tg: anyio.abc.TaskGroup,
) -> Sessionless:
    """The SDK path in front of several servers: the stdio ones' shared children (``child(name)``), the rest its own."""

    def slot(spec: ServerSpec) -> Slot:
        if isinstance(spec, StdioServer):
            return ViewSlot(partial(_found, child, spec.name), plan.limits)
        return Slot(spec, shared=False, limits=plan.limits)

    slots = [slot(spec) for spec in plan.config.servers]
    factory = SessionFactory(plan, slots, on_dropped=metrics.dropped, on_listed=metrics.learn, make_slot=slot)
    await factory.start(tg, settle=START_TIMEOUT)
    return Sessionless(plan, factory=factory, agents=agents, security=security)


def _found(child: Callable[[str], SharedChild | None], name: str) -> SharedChild:
    found = child(name)
    assert found is not None, f"no shared child for {name!r}"
    return found
