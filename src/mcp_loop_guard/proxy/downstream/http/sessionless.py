"""The SDK path: 2026-07-28 requests to servers of the handshake era, translated by the SDK.

One SDK server serves them all over one channel
(:class:`~mcp_loop_guard.proxy.relay.sdk_channel.ChannelLink`); each request is judged by its
key's agent (token, key header or address), so an agent's loop state outlives any
connection; an agent aborted for looping gets 429 for a while.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import anyio.abc
from mcp.server.subscriptions import InMemorySubscriptionBus
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.compat import handle_modern_request
from mcp_loop_guard.proxy.downstream.http.agents import Agents, KeyedAgent
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules, transport_security
from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.sdk_channel import ChannelLink
from mcp_loop_guard.proxy.relay.sdk_server import SessionDownstream
from mcp_loop_guard.proxy.relay.session_server import GuardedProxy
from mcp_loop_guard.proxy.upstream.channels import Behind

logger = logging.getLogger(__name__)

AGENT = "mcp-loop-guard.agent"
"""Scope state key holding a sessionless request's agent."""


class Sessionless:
    """The SDK path of sessionless requests over one channel, and the agents it judges them by."""

    def __init__(self, plan: Plan, behind: Behind, *, agents: Agents, security: HostRules, metrics: Metrics) -> None:
        """Requests reach what is ``behind``; agents are held by ``agents``."""
        self.settings = plan.settings
        self.agents = agents
        self.security = transport_security(security)
        # Requests without a session can carry no server-to-client traffic, but can listen: the
        # servers' changes go to their ``subscriptions/listen`` streams.
        self.downstream = SessionDownstream(plan.settings.max_pending_requests, bus=InMemorySubscriptionBus())
        self.link = ChannelLink(behind.name, behind.reach, behind.limits, self.downstream)

        async def judge_of(ctx: Context) -> Judge:
            request = ctx.request
            agent = request.scope.get("state", {}).get(AGENT) if request is not None else None
            if not isinstance(agent, KeyedAgent):
                raise RuntimeError("a sessionless request reached the guard without its agent")
            return agent.judge

        def on_abort(ctx: Context, verdict: Verdict) -> None:
            logger.warning("an agent was aborted for looping on %r; its requests get 429 for a while", verdict.tool)

        self.proxy = GuardedProxy(
            self.link, self.downstream, judge_of, on_abort, stopping=agents.stopping, on_listed=metrics.learn
        )
        self._tg: anyio.abc.TaskGroup | None = None

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Run the channel and expire idle agents in ``tg``, which also runs each stateless connection."""
        self._tg = tg
        await tg.start(self.link.run)
        tg.start_soon(self._expire_agents)

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the channel takes the servers (a router adds and drops members)."""
        return await self.link.channel.reconfigure(servers)

    async def _expire_agents(self) -> None:
        idle = self.settings.session_idle_seconds
        while True:
            await anyio.sleep(min(idle, 30.0))
            self.agents.expire(idle)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One 2026-07-28 request, judged by its key's agent."""
        agent = await self.agents.admit(scope, send)
        if agent is None:
            return
        scope.setdefault("state", {})[AGENT] = agent
        agent.in_flight += 1
        try:
            await handle_modern_request(self.proxy.server, self.security, False, {}, scope, receive, send)
        finally:
            agent.in_flight -= 1
