"""The SDK path of an HTTP relay, loaded the first time a request needs it.

A relay in front of one HTTP server passes requests on as they came; only a request the
server cannot take as it is (a 2026-07-28 request to a server of the handshake era, a
sessionless one before the server said whether it opens sessions) goes through the SDK,
which speaks each side's era. The same holds in front of one stdio server for the
2026-07-28 requests (the SDK then reaches the shared child as one more relayed session).
Most guards never see one, so the SDK (more than a second of start-up and about 30 MB) is
imported in a worker thread when the first one comes, and the event loop goes on serving
meanwhile.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
import anyio.to_thread
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules
from mcp_loop_guard.proxy.upstream.backoff import START_TIMEOUT

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.downstream.http.sessionless import Sessionless

__all__ = ["SHARED_CHILDREN", "Build", "Translating", "over_shared_children"]

logger = logging.getLogger(__name__)

SESSIONLESS = "mcp_loop_guard.proxy.downstream.http.sessionless"

Build = Callable[["anyio.abc.TaskGroup"], Awaitable["Sessionless"]]
"""Makes the SDK path (run in the task group given), once its module is imported."""


class Translating:
    """Requests the relay cannot pass on as they are, served through the SDK once it is loaded."""

    def __init__(
        self,
        plan: Plan,
        *,
        agents: Agents,
        metrics: Metrics,
        security: HostRules,
        build: Build | None = None,
        module: str = SESSIONLESS,
    ) -> None:
        """Nothing is loaded until :meth:`serve` is first called: then ``module``, and ``build`` makes the path.

        Without ``build``, each configured server gets connections of the SDK path's own.
        """
        self.build = build or self._own_connections
        self.module = module
        self.plan = plan
        self.agents = agents
        self.metrics = metrics
        self.security = security
        self.loaded: Sessionless | None = None
        self._lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Run what is loaded later in ``tg``."""
        self._tg = tg

    async def serve(self, scope: Scope, receive: Receive, send: Send, version: str | None, *, modern: bool) -> None:
        """One request, judged by its key's agent; ``modern``: a 2026-07-28 request."""
        sessionless = self.loaded or await self._load()
        await sessionless.serve(scope, receive, send, version, modern=modern)

    async def _load(self) -> Sessionless:
        async with self._lock:
            if self.loaded is not None:
                return self.loaded
            assert self._tg is not None, "start() runs before the first request"
            logger.info("a request needs the SDK to be translated; loading it")
            await anyio.to_thread.run_sync(importlib.import_module, self.module)
            sessionless = await self.build(self._tg)
            await sessionless.start(self._tg)
            self.loaded = sessionless
            return sessionless

    async def _own_connections(self, tg: anyio.abc.TaskGroup) -> Sessionless:
        """The SDK path with connections of its own to each server (HTTP servers: the same server, other sessions)."""
        from mcp_loop_guard.proxy.downstream.http.sessionless import Sessionless  # noqa: PLC0415 - loaded by _load
        from mcp_loop_guard.proxy.downstream.sessions import SessionFactory  # noqa: PLC0415
        from mcp_loop_guard.proxy.upstream.pool import Slot  # noqa: PLC0415

        plan = self.plan
        slots = [Slot(spec, shared=False, limits=plan.limits) for spec in plan.config.servers]
        factory = SessionFactory(
            plan,
            slots,
            on_dropped=self.metrics.dropped,
            on_listed=self.metrics.learn,
            make_slot=lambda spec: Slot(spec, shared=False, limits=plan.limits),
        )
        await factory.start(tg, settle=START_TIMEOUT)
        return Sessionless(plan, factory=factory, agents=self.agents, security=self.security)


SHARED_CHILDREN: Final = "mcp_loop_guard.proxy.downstream.http.muxed_sdk"
"""The SDK path over the guard's shared children (and routers), loaded only by a 2026-07-28 request."""


def over_shared_children(
    plan: Plan, build: Build, *, agents: Agents, metrics: Metrics, security: HostRules
) -> Translating:
    """The era translation of a relay whose upstreams are its own shared children: ``build`` makes it."""
    return Translating(plan, agents=agents, metrics=metrics, security=security, build=build, module=SHARED_CHILDREN)
