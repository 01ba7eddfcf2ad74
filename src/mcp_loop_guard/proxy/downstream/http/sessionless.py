"""Requests to ``/mcp`` without a session (``--stateless``, 2026-07-28): one shared proxy serves them all.

Each request is judged by its key's agent (token, key header or address), so an agent's
loop state outlives any connection; an agent aborted for looping gets 429 for a while. A
``--stateless`` HTTP guard whose requests the message relays cannot take (several servers,
or one legacy SSE server, which needs a session) is served here whole (:class:`SessionlessFront`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.compat import handle_modern_request
from mcp_loop_guard.proxy.downstream.http.admin import LiveAgent
from mcp_loop_guard.proxy.downstream.http.agents import Agents, KeyedAgent
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules, transport_security
from mcp_loop_guard.proxy.downstream.sessions import SessionFactory
from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.session_server import GuardedProxy
from mcp_loop_guard.proxy.wire.eras import HANDSHAKE_PROTOCOL_VERSIONS

logger = logging.getLogger(__name__)

AGENT = "mcp-loop-guard.agent"
"""Scope state key holding a sessionless request's agent."""


class Sessionless:
    """The shared proxy of sessionless requests, and the agents it judges them by."""

    def __init__(self, plan: Plan, *, factory: SessionFactory, agents: Agents, security: HostRules) -> None:
        """The proxy is made by ``factory`` once :meth:`start` runs; agents are held by ``agents``."""
        self.settings = plan.settings
        self.factory = factory
        self.agents = agents
        self.security = transport_security(security)
        self.proxy: GuardedProxy | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Open the shared proxy and expire idle agents in ``tg``, which also runs each stateless connection."""
        self._tg = tg
        await tg.start(self._hold_proxy)
        tg.start_soon(self._expire_agents)

    async def _hold_proxy(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async def judge_of(ctx: Context) -> Judge:
            request = ctx.request
            agent = request.scope.get("state", {}).get(AGENT) if request is not None else None
            if not isinstance(agent, KeyedAgent):
                raise RuntimeError("a sessionless request reached the guard without its agent")
            return agent.judge

        def on_abort(ctx: Context, verdict: Verdict) -> None:
            logger.warning("an agent was aborted for looping on %r; its requests get 429 for a while", verdict.tool)

        async with self.factory.open(judge_of, on_abort, stopping=self.agents.stopping, shared_only=True) as proxy:
            self.proxy = proxy
            task_status.started()
            await anyio.sleep_forever()

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
            assert proxy is not None
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


class SessionlessFront:
    """``/mcp`` of a ``--stateless`` HTTP guard served by the SDK path: every request on its own."""

    def __init__(self, sessionless: Sessionless) -> None:
        """Requests are served by ``sessionless``."""
        self.sessionless = sessionless
        self.agents = sessionless.agents

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve until the context ends."""
        async with anyio.create_task_group() as tg:
            await self.sessionless.start(tg)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    def held(self) -> Iterator[LiveAgent]:
        """Every keyed agent held in memory now (for the admin API)."""
        for agent in list(self.agents.held.values()):
            yield LiveAgent("keyed", agent.judge.agent, agent.in_flight)

    async def handle_mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``: 2026-07-28 ones translated, the rest served without a session."""
        found = [value for key, value in scope["headers"] if key.lower() == b"mcp-protocol-version"]
        version = found[0].decode("latin-1") if found else None
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        await self.sessionless.serve(scope, receive, send, version, modern=modern)
