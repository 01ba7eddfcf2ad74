"""Streamable HTTP and SSE sessions of the aggregating proxy, and requests without a session.

The guard owns its session manager rather than using the SDK's: every session needs a server
of its own (its judge, its upstream links), sessions are capped, and an aborted session ends
at once: its refusal goes out, then its id answers 404. Requests without a session
(``--stateless``, 2026-07-28) go to :mod:`.sessionless`.

Each session lives in a task of its own that also closes it, so expiry, eviction and
shutdown never close something from another task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from uuid import uuid4

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.runner import serve_dual_era_loop, serve_loop
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.message import SessionMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.agents import agent_loop, judge_for
from mcp_loop_guard.proxy.downstream.http.admin import LiveAgent
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import (
    RETRY_AFTER_BUSY,
    HostRules,
    reply,
    retry_after,
    token_of,
    transport_security,
)
from mcp_loop_guard.proxy.downstream.http.sessionless import Sessionless
from mcp_loop_guard.proxy.downstream.sessions import SessionFactory, fixed_judge
from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.relay.judge import Judge

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Live:
    """One stateful session: its transport, its judge, and the scope that ends it."""

    session_id: str
    transport: StreamableHTTPServerTransport
    judge: Judge
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    abort_after: types.RequestId | None = None


class GuardSessions:
    """Stateful sessions, sessionless requests and SSE connections of one HTTP guard."""

    def __init__(
        self,
        plan: Plan,
        *,
        factory: SessionFactory,
        agents: Agents,
        metrics: Metrics,
        security: HostRules,
        events: object,
    ) -> None:
        """Sessions made by ``factory``; sessionless agents held by ``agents``."""
        self.plan = plan
        self.settings = plan.settings
        self.factory = factory
        self.agents = agents
        self.metrics = metrics
        self.security = transport_security(security)
        self.events = events
        self.sse = SseServerTransport(
            "/messages/", security_settings=self.security, max_request_body_size=self.settings.max_request_bytes
        )
        self.live: dict[str, Live] = {}
        self.sse_live: dict[str, Judge] = {}
        """Open SSE sessions by agent key, for the admin API."""
        self.sessionless = Sessionless(plan, factory=factory, agents=agents, security=security)
        self._tg: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve until the context ends; then every session closes in its own task."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await self.sessionless.start(tg)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    def held(self) -> Iterator[LiveAgent]:
        """Every agent held in memory now: sessions, SSE sessions, keyed agents (for the admin API)."""
        for live in list(self.live.values()):
            yield LiveAgent("session", live.judge.agent, live.in_flight)
        for judge in list(self.sse_live.values()):
            yield LiveAgent("sse", judge.agent)
        for agent in list(self.agents.held.values()):
            yield LiveAgent("keyed", agent.judge.agent, agent.in_flight)

    # --- streamable HTTP ------------------------------------------------------------------

    async def handle_mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER.lower())
        modern = version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
        if modern or self.settings.stateless:
            await self.sessionless.serve(scope, receive, send, version, modern=modern)
            return
        session_id = headers.get(MCP_SESSION_ID_HEADER.lower())
        if session_id is None:
            await self._open_session(scope, receive, send)
            return
        live = self.live.get(session_id)
        if live is None:
            await reply(send, 404, "Session not found")
            return
        await self._serve(live, scope, receive, send)

    async def _serve(self, live: Live, scope: Scope, receive: Receive, send: Send) -> None:
        live.in_flight += 1
        live.last_used = time.monotonic()
        try:
            await live.transport.handle_request(scope, receive, send)
        finally:
            live.in_flight -= 1
            live.last_used = time.monotonic()
        if live.abort_after is not None or live.transport.is_terminated:
            await self._end(live)

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._tg is not None
        if len(self.live) >= self.settings.max_sessions and not await self._evict_idle_session():
            await reply(
                send, 503, "Service Unavailable: too many sessions; try again later", retry_after(RETRY_AFTER_BUSY)
            )
            return
        session_id = uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            security_settings=self.security,
            idle_timeout=self.settings.session_idle_seconds,
        )
        key = f"session:{token_of(scope) or '-'}/{session_id}"
        loop = agent_loop(self.plan, self.agents.store, self.agents.health, key)
        judge = judge_for(self.plan, loop, label=key, events=self.agents.events, observe=self.agents.observe)
        live = Live(session_id, transport, judge)

        def on_abort(ctx: Context, verdict: Verdict) -> None:
            # The id stops being served at once; the transport ends once the refusal has gone out.
            live.abort_after = ctx.request_id
            self.live.pop(session_id, None)

        async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with live.scope:
                async with (
                    transport.connect() as (read, write),
                    self.factory.open(fixed_judge(judge), on_abort) as proxy,
                ):
                    self.metrics.sessions.inc()
                    task_status.started()
                    try:
                        idle = transport.idle_scope or anyio.CancelScope()
                        with idle:
                            await serve_loop(proxy.server, read, write, lifespan_state={}, session_id=session_id)
                        if idle.cancelled_caught:
                            logger.info(
                                "session %s expired after %.0fs idle",
                                session_id[:8],
                                self.settings.session_idle_seconds,
                            )
                    finally:
                        self.metrics.sessions.dec()
            self.live.pop(session_id, None)

        self.live[session_id] = live
        await self._tg.start(run)
        status = await _status_of(live, scope, receive, send)
        if status is None or status >= 400 or live.abort_after is not None:
            await self._end(live)

    async def _evict_idle_session(self) -> bool:
        idle = sorted((live for live in self.live.values() if live.in_flight == 0), key=lambda live: live.last_used)
        if not idle:
            return False
        logger.info("session limit reached: closing the least recently used idle session %s", idle[0].session_id[:8])
        await self._end(idle[0])
        return True

    async def _end(self, live: Live) -> None:
        """Forget a session (its id answers 404 from now on) and close what it holds, once."""
        self.live.pop(live.session_id, None)
        if live.scope.cancel_called:
            return
        if live.abort_after is not None:
            logger.warning("session %s aborted: tool %r kept looping", live.session_id[:8], _tool(live.judge.aborted))
        if not live.transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await live.transport.terminate()
        live.scope.cancel()

    # --- legacy SSE ---------------------------------------------------------------------------

    async def handle_sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An SSE connection: a session until the client leaves or it is aborted (after its refusal went out)."""
        key = f"sse:{token_of(scope) or '-'}/{uuid4().hex}"
        loop = agent_loop(self.plan, self.agents.store, self.agents.health, key)
        judge = judge_for(self.plan, loop, label=key, events=self.agents.events, observe=self.agents.observe)
        abort_after: list[types.RequestId | None] = []

        def on_abort(ctx: Context, verdict: Verdict) -> None:
            abort_after.append(ctx.request_id)

        self.sse_live[key] = judge
        with anyio.CancelScope() as cancel:
            async with (
                self.sse.connect_sse(scope, receive, send) as (read, write),
                self.factory.open(fixed_judge(judge), on_abort) as proxy,
                anyio.create_task_group() as tg,
            ):
                self.metrics.sessions.inc()
                try:
                    out_send, out_receive = anyio.create_memory_object_stream[SessionMessage](16)
                    tg.start_soon(_pass_until_abort, out_receive, write, abort_after, cancel)
                    await serve_dual_era_loop(proxy.server, read, out_send, lifespan_state={})
                    tg.cancel_scope.cancel()
                finally:
                    self.metrics.sessions.dec()
                    self.sse_live.pop(key, None)
        if abort_after:
            logger.warning("SSE session aborted: tool %r kept looping", _tool(judge.aborted))

    async def handle_messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A message posted to an SSE session."""
        await self.sse.handle_post_message(scope, receive, send)


async def _pass_until_abort(
    receive: MemoryObjectReceiveStream[SessionMessage],
    write: MemoryObjectSendStream[SessionMessage],
    abort_after: list[types.RequestId | None],
    cancel: anyio.CancelScope,
) -> None:
    """Hand the server's messages to the SSE stream; after an aborting refusal, end the connection."""
    async with receive:
        async for message in receive:
            await write.send(message)
            inner = message.message
            if (
                abort_after
                and isinstance(inner, types.JSONRPCResponse | types.JSONRPCError)
                and inner.id in abort_after
            ):
                cancel.cancel()
                return


async def _status_of(live: Live, scope: Scope, receive: Receive, send: Send) -> int | None:
    status: int | None = None

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        await send(message)

    live.in_flight += 1
    try:
        await live.transport.handle_request(scope, receive, watch)
    finally:
        live.in_flight -= 1
    return status


def _tool(verdict: Verdict | None) -> str:
    return verdict.tool if verdict is not None else "?"
