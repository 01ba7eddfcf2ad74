"""The SDK path: requests to ``/mcp`` the message relays cannot pass on as they are, translated by the SDK.

2026-07-28 requests to servers of the handshake era, and ``--stateless`` requests in front of
several servers or of one legacy SSE server. One SDK server serves them all over one channel
(:class:`~mcp_loop_guard.proxy.relay.sdk_channel.ChannelLink`); each request is judged by its
key's agent (token, key header or address), so an agent's loop state outlives any
connection; an agent aborted for looping gets 429 for a while.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import anyio.abc
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION
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

    async def serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        version: str | None,
        *,
        modern: bool,
    ) -> None:
        """One request, judged by its key's agent; ``modern``: a 2026-07-28 request."""
        agent = await self.agents.admit(scope, send)
        if agent is None:
            return
        scope.setdefault("state", {})[AGENT] = agent
        agent.in_flight += 1
        try:
            proxy = self.proxy
            if modern:
                await handle_modern_request(proxy.server, self.security, False, {}, scope, receive, send)
            else:
                await self._serve_stateless(proxy, version, scope, receive, send)
        finally:
            agent.in_flight -= 1

    async def _serve_stateless(
        self, proxy: GuardedProxy, version: str | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        assert self._tg is not None
        transport = StreamableHTTPServerTransport(mcp_session_id=None, security_settings=self.security)

        async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with transport.connect() as (read, write):
                task_status.started()
                # One request per connection, so the connection is born initialized (as in the SDK's
                # own stateless mode); with no session, nothing can reach the client but the answer.
                dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                    read,
                    write,
                    inline_methods=frozenset({"initialize"}),
                    transport_builder=lambda _md: TransportContext(kind="streamable-http", can_send_request=False),
                )
                connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
                await serve_connection(proxy.server, dispatcher, connection=connection, lifespan_state={})

        await self._tg.start(run)
        try:
            await transport.handle_request(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await transport.terminate()
