"""The HTTP guard in front of several servers: each session's messages relayed through a router of its own.

Each of the guard's sessions has the same message relay as in front of one server; its
upstream is a router (:mod:`~mcp_loop_guard.proxy.upstream.router`) whose members are the
configured servers: a stdio server is one child shared by every session (a share of it per
session, ids rewritten, as in front of one: :mod:`.muxed`), an HTTP or legacy SSE server gets
an upstream session per guard session, opened with the client's own ``initialize`` and ended
with it (as :mod:`.channeled`). The lists are merged under ``server__name`` and each request
goes to its server; every other method crosses as it came (``tasks/*`` included). Names keep
the owner they had first in every session. 2026-07-28 requests (sessionless) are relayed each
through a router of its own when every server speaks that era (:mod:`.routed_modern`); else
they go through the SDK path, loaded when the first one comes, over a router of its own with
the same members.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import anyio.abc
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.config import HttpServer, ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Limits, Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules, reply
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession
from mcp_loop_guard.proxy.downstream.http.muxed_stateless import StatelessRequests
from mcp_loop_guard.proxy.downstream.http.probe import HttpProbe, Supervisor
from mcp_loop_guard.proxy.downstream.http.routed_modern import ModernRequests
from mcp_loop_guard.proxy.downstream.http.session_relay import SessionRelay
from mcp_loop_guard.proxy.downstream.http.translating import Translating
from mcp_loop_guard.proxy.upstream.channel import Channel, Receiver
from mcp_loop_guard.proxy.upstream.channels import Behind, Opener, channel, opener
from mcp_loop_guard.proxy.upstream.health import Supervised
from mcp_loop_guard.proxy.upstream.mux import Mux
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.upstream.router import Router
from mcp_loop_guard.proxy.upstream.router_lists import Catalog
from mcp_loop_guard.proxy.upstream.shared_channel import SharedChannel
from mcp_loop_guard.proxy.upstream.shared_child import SharedChild

__all__ = ["RoutedRelay"]


class RoutedRelay(SessionRelay):
    """Every client of one HTTP guard in front of several servers, each session over a router."""

    def __init__(
        self,
        plan: Plan,
        *,
        agents: Agents,
        metrics: Metrics,
        security: HostRules,
    ) -> None:
        """Every configured server is started by :meth:`supervise`."""
        translating = Translating(plan, agents=agents, metrics=metrics, security=security, behind=self._behind)
        super().__init__(plan, agents=agents, metrics=metrics, translating=translating, security=security)
        self.security = security
        self.specs: list[ServerSpec] = list(plan.config.servers)
        self.supervisor = Supervisor(
            plan.limits, child_per_session=plan.settings.child_per_session, on_child=self._attach, on_probe=self._serves
        )
        """Each stdio server's child (unless each session has its own) and each HTTP server's probe."""
        self.owners: dict[str, tuple[str, str]] = {}
        """Exported name -> the (server, name) first given it, in every session."""
        self._tg_supervising: anyio.abc.TaskGroup | None = None
        if plan.settings.stateless and plan.settings.transport == "http":
            self.stateless = StatelessRequests(self)
            self.shared = SharedChannel(self._behind().reach, self.limits)
        self.modern = ModernRequests(self)

    @property
    def server(self) -> ServerSpec:
        """The first server (the relay's limits take the guard's call timeout; each server's own applies per call)."""
        return self.specs[0]

    @property
    def limits(self) -> Limits:
        """The guard's limits: a server's own call timeout applies to its calls (the router knows it)."""
        return Limits.of(self.settings)

    async def modern_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A 2026-07-28 request: relayed as messages when every server speaks that era, else translated."""
        kept = self.supervisor.slots
        exchanges = {slot.name: slot.exchange for slot in kept if isinstance(slot, HttpProbe)}
        if not await self.modern.relayed(self.specs, exchanges):
            await self.translating.serve(scope, receive, send)
        elif scope["method"] == "POST":
            await self.modern.requests.post(scope, receive, send)
        else:
            await reply(send, 405, replies.METHOD_NOT_ALLOWED, [(b"allow", b"POST")])

    def requests_open(self) -> list[MuxedSession]:
        """The requests without a session being relayed now: ``--stateless`` ones and 2026-07-28 ones."""
        return [*super().requests_open(), *self.modern.requests.open]

    # --- the servers -------------------------------------------------------------------------

    async def supervise(self, tg: anyio.abc.TaskGroup) -> None:
        """Keep every stdio server's child up and probe every HTTP server, in ``tg``."""
        self._tg_supervising = tg
        await self.supervisor.keep(tg, self.specs)

    def _child(self, name: str) -> SharedChild | None:
        slot = self.supervisor.get(name)
        return slot if isinstance(slot, SharedChild) else None

    def _attach(self, slot: SharedChild, tools_changed: bool) -> None:
        """A stdio server's new child serves: every session's share attaches to it, and its router is told."""
        mux = slot.mux
        if slot.status != "ready" or mux is None or self._tg is None or self._child(slot.name) is not slot:
            return
        for router in self._routers():
            view = router.members.get(slot.name)
            if isinstance(view, MuxView) and view.mux is not mux:
                mux.attach(view)
                self._tg.start_soon(router.restarted, slot.name)

    def _routers(self) -> list[Router]:
        """Every session's router, and the SDK path's."""
        found: list[object] = [session.pipe.upstream for session in self.sessions.live.values() if session.pipe]
        found.append(self.translating.channel())
        found.append(self.shared.channel if self.shared is not None else None)
        return [router for router in found if isinstance(router, Router)]

    def usable(self, name: str) -> bool:
        """A server whose child or probe is not ready is not waited for (a silent one would hold every session up)."""
        slot = self.supervisor.get(name)
        return slot is None or slot.status == "ready"

    def _serves(self, slot: Supervised, tools_changed: bool) -> None:
        """An HTTP server's probe is ready again: sessions that went without it take it in."""
        if slot.status != "ready" or self._tg is None:
            return
        for router in self._routers():
            if slot.name in router.members and slot.name not in router.identity:
                self._tg.start_soon(router.restarted, slot.name)

    def _behind(self) -> Behind:
        """The SDK path reaches the servers through a router of its own, over the same children."""
        return Behind("servers", self._reach(), self.limits)

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: servers added, removed or changed for every open session; one server needs a restart."""
        if len(servers) < 2:
            return replies.ONE_AND_SEVERAL
        self.specs = list(servers)
        assert self._tg_supervising is not None, "supervise() runs before a reload"
        await self.supervisor.keep(self._tg_supervising, servers, settle=True)
        self.modern.reconfigured()
        for session in list(self.sessions.live.values()):
            if session.pipe is not None:
                await session.pipe.reconfigure(servers)
        if self.shared is not None:
            await self.shared.channel.reconfigure(servers)
        return await self.translating.reconfigure(servers)

    # --- sessions ----------------------------------------------------------------------------

    def _reach(self) -> Opener:
        """A router of the session's own, its members opened with it and ended with it."""
        catalog = Catalog(self.owners, on_listed=self.metrics.learn, on_dropped=self.metrics.dropped)
        return opener(self.specs, self.limits, member=self._member, catalog=catalog, usable=self.usable)

    def _left(self, upstream: Channel) -> None:
        if isinstance(upstream, Router):
            for member in upstream.members.values():
                super()._left(member)

    def _member(self, spec: ServerSpec, receiver: Receiver) -> Channel:
        """A stdio server: a share of its child (or a child of its own); an HTTP server: a session of its own."""
        if isinstance(spec, HttpServer) or self.settings.child_per_session:
            return channel(spec, receiver, limits=self.limits, lenient=True)
        label = f"`{spec.public_name}`"

        def current() -> Mux | None:
            slot = self._child(spec.name)
            return slot.mux if slot is not None and slot.status == "ready" else None

        view = MuxView(label, receiver, None, current)
        slot = self._child(spec.name)
        if slot is not None:
            view.down = f"upstream {label} is {slot.status}: {slot.reason}"
        return view
