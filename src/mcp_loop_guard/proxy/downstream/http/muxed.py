"""The HTTP guard in front of one stdio server: every session's messages relayed through the one shared child.

The guard is the streamable HTTP server here (it gives the session ids); behind it, one
child process serves every session (:mod:`~mcp_loop_guard.proxy.upstream.mux`). A session's
messages go to the child as they came, ids rewritten in one place, and what comes back is
passed on as its bytes: every method, present and future (``tasks/*``, extensions), crosses
as it would cross a pipe, and only a ``tools/call`` is judged, by the session's own agent.
The guard opens the child with a handshake of its own and supervises it without the SDK.
2026-07-28 requests (sessionless) go through the SDK path, loaded when the first one comes
(:mod:`.translating`), which speaks that era to the client and the handshake era to the same
child through a share of its own; legacy SSE connections are sessions of the relay too (:mod:`.muxed_sse`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import anyio.abc

from mcp_loop_guard.config import ServerSpec, StdioServer
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules
from mcp_loop_guard.proxy.downstream.http.muxed_stateless import StatelessRequests
from mcp_loop_guard.proxy.downstream.http.probe import Supervisor
from mcp_loop_guard.proxy.downstream.http.session_relay import SessionRelay
from mcp_loop_guard.proxy.downstream.http.translating import Translating
from mcp_loop_guard.proxy.upstream.channel import Receiver
from mcp_loop_guard.proxy.upstream.channels import Behind, Opener
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.mux import Mux
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.upstream.shared_child import SharedChild
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts

__all__ = ["MuxedRelay"]


class MuxedRelay(SessionRelay):
    """Every client of one HTTP guard in front of one shared stdio server."""

    def __init__(
        self,
        plan: Plan,
        spec: StdioServer,
        *,
        agents: Agents,
        metrics: Metrics,
        security: HostRules,
        first: ChildProcess | None = None,
    ) -> None:
        """``first``: the child, started before the guard loaded its web server."""
        translating = Translating(plan, agents=agents, metrics=metrics, security=security, behind=self._behind)
        super().__init__(plan, agents=agents, metrics=metrics, translating=translating, security=security)
        self.security = security
        self.spec = spec
        self.first = first
        self.supervisor = Supervisor(plan.limits, on_child=self._changed)
        """The one child (a config reload may replace it)."""
        self.facts = ToolFacts()  # one child: what one session learnt of its tools holds for all
        self.stateless = StatelessRequests(self)
        self._supervising: anyio.abc.TaskGroup | None = None

    @property
    def slot(self) -> SharedChild:
        """The one child (a config reload may replace it)."""
        slot = self.supervisor.slots[0]
        assert isinstance(slot, SharedChild)
        return slot

    async def supervise(self, tg: anyio.abc.TaskGroup) -> None:
        """Keep the child up, in ``tg``."""
        self._supervising = tg
        await self.supervisor.keep(tg, [self.spec], first=self.first)
        self.first = None

    def _behind(self) -> Behind:
        """The SDK path reaches the same child, through a share of its own."""
        return Behind(self.spec.name, self._share, self.limits)

    @property
    def server(self) -> ServerSpec:
        """The one stdio server."""
        return self.spec

    def _changed(self, slot: SharedChild, tools_changed: bool) -> None:
        """A new child serves: the sessions attach to it, and are told when its tools changed."""
        mux = slot.mux
        if slot.status != "ready" or mux is None or self._tg is None:
            return
        for session in list(self.sessions.live.values()):
            if session.view is not None and session.view.mux is not mux:
                mux.attach(session.view)
                if session.pipe is not None:
                    self._tg.start_soon(session.pipe.upstream_restarted)
        shared = self.translating.channel()
        if isinstance(shared, MuxView) and shared.mux is not mux:
            mux.attach(shared)
            self._tg.start_soon(self.translating.restarted)

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the one stdio server, changed or not, applies at once; anything else needs a restart."""
        if len(servers) != 1 or not isinstance(servers[0], StdioServer):
            return "this guard relays one stdio server directly; serving other servers needs a restart"
        assert self._supervising is not None, "supervise() runs before a reload"
        self.spec = servers[0]
        await self.supervisor.keep(self._supervising, servers)  # the old child stops; its calls in flight get why
        return None

    def _reach(self) -> Opener:
        return self._share

    def _share(self, receiver: Receiver) -> MuxView:
        """A share of the child, for one session (or the SDK path); it attaches to the child when it first sends."""
        slot = self.slot
        spec = slot.spec
        assert isinstance(spec, StdioServer)

        def listed(tools: list[Any]) -> None:
            self.metrics.learn(spec.name, [tool["name"] for tool in tools if isinstance(tool, dict) and "name" in tool])

        view = MuxView(f"`{spec.public_name}`", receiver, listed, self._serving)
        view.down = f"upstream `{spec.public_name}` is {slot.status}: {slot.reason}"
        return view

    def _serving(self) -> Mux | None:
        """The child serving now: the slot's, while it is ready."""
        slot = self.slot
        return slot.mux if slot.status == "ready" else None
