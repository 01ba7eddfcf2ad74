"""The SDK path of an HTTP guard, loaded the first time a request needs it.

A relay passes requests on as they came; only a request the server behind it cannot take as
it is (a 2026-07-28 request to a server of the handshake era) goes through the SDK, which
speaks each side's era over the same kind of channel the relay's sessions use (``Behind``). Most guards
never see one, so the SDK (more than a second of start-up and about 30 MB) is
imported in a worker thread when the first one comes, and the event loop goes on serving
meanwhile.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.to_thread
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Limits, Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules
from mcp_loop_guard.proxy.upstream.channel import Channel
from mcp_loop_guard.proxy.upstream.channels import Behind, channel

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.downstream.http.sessionless import Sessionless

__all__ = ["Translating"]

logger = logging.getLogger(__name__)

SESSIONLESS = "mcp_loop_guard.proxy.downstream.http.sessionless"


class Translating:
    """Requests the relay cannot pass on as they are, served through the SDK once it is loaded."""

    def __init__(
        self,
        plan: Plan,
        *,
        agents: Agents,
        metrics: Metrics,
        security: HostRules,
        behind: Callable[[], Behind] | None = None,
    ) -> None:
        """Nothing is loaded until :meth:`serve` is first called; ``behind()`` says what it reaches then.

        By default, the one configured server over a channel of the SDK path's own.
        """
        self.behind = behind or partial(_own_channel, plan)
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

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One 2026-07-28 request, judged by its key's agent."""
        sessionless = self.loaded or await self._load()
        await sessionless.serve(scope, receive, send)

    def channel(self) -> Channel | None:
        """The SDK path's channel, once it is loaded."""
        return None if self.loaded is None else self.loaded.link.channel

    async def restarted(self) -> None:
        """The server behind was replaced: the SDK path's clients hear of it if its tools changed."""
        if self.loaded is not None:
            await self.loaded.link.restarted()

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload, for the SDK path's channel once it is loaded."""
        return None if self.loaded is None else await self.loaded.reconfigure(servers)

    async def _load(self) -> Sessionless:
        async with self._lock:
            if self.loaded is not None:
                return self.loaded
            assert self._tg is not None, "start() runs before the first request"
            logger.info("a request needs the SDK to be translated; loading it")
            module = await anyio.to_thread.run_sync(importlib.import_module, SESSIONLESS)
            sessionless: Sessionless = module.Sessionless(
                self.plan, self.behind(), agents=self.agents, security=self.security, metrics=self.metrics
            )
            await sessionless.start(self._tg)
            self.loaded = sessionless
            return sessionless


def _own_channel(plan: Plan) -> Behind:
    """The one configured server, over a channel of the SDK path's own (a session of its own at an HTTP server)."""
    spec = plan.config.servers[0]
    limits = Limits.of(plan.settings, spec.call_timeout)
    return Behind(spec.name, partial(channel, spec, limits=limits), limits)
