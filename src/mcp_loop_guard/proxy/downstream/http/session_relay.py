"""The HTTP guard's own sessions, each one a message relay: what every such relay does with its clients' requests.

The guard is the streamable HTTP server here (it gives the session ids). Each session has a
message relay (:class:`~mcp_loop_guard.proxy.relay.pipe.Pipe`); what reaches the upstream
behind it is the subclass's business: a view of one shared child
(:class:`~.muxed.MuxedRelay`), or an upstream connection of the session's own
(:class:`~.channeled.ChanneledRelay`). Here: the requests to ``/mcp`` (a session's POSTs,
its GET stream, a resumed stream, DELETE), the session limit, expiry, the abort and the
guard's stop. 2026-07-28 requests, which have no session, go to the SDK path (``translating``);
legacy SSE connections are sessions of the same relay (:mod:`.muxed_sse`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial

import anyio
import anyio.abc
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Limits, Plan
from mcp_loop_guard.proxy.downstream.http.admin import LiveAgent
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.event_log import parse_event_id, primes, serve_log
from mcp_loop_guard.proxy.downstream.http.middleware import (
    HostRules,
    header,
    reply,
    sessions_busy,
    token_of,
)
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession, MuxedSessions
from mcp_loop_guard.proxy.downstream.http.muxed_sse import SseSessions
from mcp_loop_guard.proxy.downstream.http.muxed_stateless import (
    StatelessRequests,
    posted,
    request_session,
    stream_request,
)
from mcp_loop_guard.proxy.downstream.http.relayed import SESSION, VERSION
from mcp_loop_guard.proxy.downstream.http.replies import is_modern
from mcp_loop_guard.proxy.downstream.http.translating import Translating
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.pipe import Pipe
from mcp_loop_guard.proxy.upstream.channel import Channel
from mcp_loop_guard.proxy.upstream.channels import Opener
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.upstream.shared_channel import SharedChannel
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts
from mcp_loop_guard.proxy.wire.eras import HANDSHAKE_PROTOCOL_VERSIONS
from mcp_loop_guard.proxy.wire.messages import Message

__all__ = ["SessionRelay"]

logger = logging.getLogger(__name__)


class SessionRelay:
    """Every session of one HTTP guard whose sessions are its own, each relayed message by message."""

    handle_sse: ASGIApp
    """A legacy SSE client's event stream (served with ``--transport sse``)."""
    handle_messages: ASGIApp
    """A legacy SSE client's messages (served with ``--transport sse``)."""

    def __init__(
        self,
        plan: Plan,
        *,
        agents: Agents,
        metrics: Metrics,
        translating: Translating,
        security: HostRules,
    ) -> None:
        """``translating`` serves 2026-07-28 requests through the SDK."""
        sse = SseSessions(self, plan.settings.sse_ping_seconds)
        self.handle_sse = sse.handle_sse
        self.handle_messages = sse.handle_messages
        self.plan = plan
        self.settings = plan.settings
        self.agents = agents
        self.metrics = metrics
        self.translating = translating
        self.sessions = MuxedSessions(plan, agents, metrics)
        self.stateless: StatelessRequests | None = None
        """``--stateless`` requests, for a relay that serves them."""
        self.shared: SharedChannel | None = None
        """The channel ``--stateless`` requests share, for a relay that reaches its servers over one."""
        self.facts: ToolFacts | None = None
        """The tools' annotations every session's relay shares (in front of one child), else each learns its own."""
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def server(self) -> ServerSpec:
        """The one upstream (a config reload may replace it)."""
        raise NotImplementedError

    @property
    def limits(self) -> Limits:
        """The relay's limits, with the server's own call timeout."""
        return Limits.of(self.settings, self.server.call_timeout)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve until the context ends; calls in flight are answered when the guard stops."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._started()
            tg.start_soon(self._expire)
            tg.start_soon(self._on_stop)
            if self.shared is not None:
                await tg.start(self.shared.run)
            await self.translating.start(tg)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    def _started(self) -> None:
        """Hook: the relay's task group is there."""

    def _reach(self) -> Opener:
        """How a session's relay reaches the servers: a share of the child, or a channel or router of its own."""
        raise NotImplementedError

    def _left(self, upstream: Channel) -> None:
        """A session's upstream is let go: a share of a shared child is left (a router's, each of its shares)."""
        if isinstance(upstream, MuxView):
            upstream.leave()

    def new_session(self, token: str, *, kind: str = "session", judge: Judge | None = None) -> MuxedSession:
        """A session opened with ``token``, its upstream (:meth:`_reach`) run until the session ends.

        Given a sessionless request's ``judge``, a session that is not kept: its relay over a
        share of :attr:`shared` (or, in front of a shared child, of the child).
        """
        server, limits = self.server.name, self.limits
        if judge is not None and self.shared is not None:
            return request_session(self.shared, token, kind, judge, server=server, limits=limits, on_abort=self.aborted)
        if judge is None:
            session = self.sessions.new(token, None, kind=kind)
            judge = self.agents.judge(self.sessions.key(session))
        else:
            session = MuxedSession(b"", token, None, kind=kind)
        aborted = partial(self.aborted, session)
        pipe = Pipe(
            self._reach(), session.send, judge, server=server, limits=limits, on_abort=aborted, facts=self.facts
        )
        session.pipe = pipe
        if isinstance(pipe.upstream, MuxView):
            session.view = pipe.upstream
        if session.session_id:
            assert self._tg is not None, "the relay is not running"
            connection = anyio.CancelScope()
            session.on_retire = partial(self._retired, pipe.upstream, connection)
            session.running = anyio.Event()
            self._tg.start_soon(self._connect, pipe.upstream, connection, session.running)
        return session

    async def _connect(self, upstream: Channel, connection: anyio.CancelScope, running: anyio.Event) -> None:
        """A session's upstream, until the session ends (a streamable HTTP session is DELETEd then)."""
        try:
            with connection:
                async with anyio.create_task_group() as tg:
                    await tg.start(upstream.run)
                    running.set()
        finally:
            running.set()

    def _retired(self, upstream: Channel, connection: anyio.CancelScope) -> None:
        """The session ended: its shares of shared children are left, its own upstream ends."""
        self._left(upstream)
        connection.cancel()

    @property
    def ping(self) -> float:
        """Seconds between keep-alive comments on a request's event stream."""
        return self.settings.sse_ping_seconds

    # --- life --------------------------------------------------------------------------------

    async def _expire(self) -> None:
        idle = self.settings.session_idle_seconds
        while True:
            await anyio.sleep(min(idle, 30.0))
            await self.sessions.table.expire(idle, self.end)
            self.agents.expire(idle)

    async def _on_stop(self) -> None:
        """At the first signal, every request in flight is answered with an error on its own stream."""
        await self.agents.stopping.wait()
        for session in [*self.sessions.live.values(), *self.requests_open()]:
            if session.pipe is not None:
                await session.pipe.shut_down("the guard is shutting down")
            session.close_streams()

    def requests_open(self) -> list[MuxedSession]:
        """The requests without a session being relayed now (``--stateless`` ones)."""
        return list(self.stateless.open) if self.stateless is not None else []

    def held(self) -> Iterator[LiveAgent]:
        """Every agent held in memory now, for the admin API."""
        for session in list(self.sessions.live.values()):
            if session.pipe is not None:
                yield LiveAgent("session", session.pipe.judge.agent, session.in_flight)
        for agent in list(self.agents.held.values()):
            yield LiveAgent("keyed", agent.judge.agent, agent.in_flight)

    # --- requests ----------------------------------------------------------------------------

    async def handle_mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``."""
        if is_modern(scope["headers"]) and header(scope, SESSION) is None:
            await self.modern_request(scope, receive, send)
            return
        method = scope["method"]
        if self.settings.stateless:
            if method == "POST" and self.stateless is not None:
                await self.stateless.post(scope, receive, send)
            else:
                await reply(send, 405, replies.NO_SESSIONS_STATELESS, [(b"allow", b"POST")])
        elif method == "POST":
            await self._post(scope, receive, send)
        elif method == "GET":
            await self._get(scope, receive, send)
        elif method == "DELETE":
            session = await self._session(scope, send)
            if session is not None:
                await self.end(session)
                await send({"type": "http.response.start", "status": 200, "headers": []})
                await send({"type": "http.response.body", "body": b""})
        else:
            await reply(send, 405, replies.METHOD_NOT_ALLOWED, [(b"allow", b"GET, POST, DELETE")])

    async def modern_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A 2026-07-28 request (it has no session): through the SDK path, which translates the era."""
        await self.translating.serve(scope, receive, send)

    async def _session(self, scope: Scope, send: Send) -> MuxedSession | None:
        """The session the request names; None when the request was answered instead (400, 404)."""
        session_id = header(scope, SESSION)
        if session_id is None:
            await reply(send, 400, replies.MISSING_SESSION)
            return None
        version = header(scope, VERSION)
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            await reply(send, 400, replies.unsupported_version(version.decode("latin-1")))
            return None
        session = self.sessions.lookup(session_id, token_of(scope))
        if session is None:
            await reply(send, 404, replies.SESSION_NOT_FOUND)
        return session

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        parsed = await posted(scope, receive, send)
        if parsed is None:
            return
        if isinstance(parsed, Message) and parsed.method == "initialize" and header(scope, SESSION) is None:
            session = await self._open(scope, send)
        else:
            session = await self._session(scope, send)
        if session is None:
            return
        pipe = session.pipe
        assert pipe is not None
        if not isinstance(parsed, Message) or not parsed.is_request:
            await pipe.take_client(parsed)
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.request(session, parsed, scope, receive, send)

    async def _open(self, scope: Scope, send: Send) -> MuxedSession | None:
        """A new session for an ``initialize``, once its upstream runs; None: no room (the client got 503)."""
        if not await self.room(send):
            return None
        session = self.new_session(token_of(scope))
        if session.running is not None:
            await session.running.wait()
        return session

    async def room(self, send: Send) -> bool:
        """Room for one more session: the least recently used idle one ends, or the client gets 503."""
        if await self.sessions.table.room(self.end):
            return True
        await sessions_busy(send)
        return False

    async def request(
        self, session: MuxedSession, message: Message, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A client request: relayed, and what belongs to it streamed back until its answer."""
        await stream_request(session, message, scope, receive, send, ping=self.ping)

    async def _get(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The session's stream of what belongs to no request (list changes, logging), or a cut stream resumed."""
        if b"text/event-stream" not in (header(scope, b"accept") or b""):
            await reply(send, 406, replies.NOT_ACCEPTABLE_STREAM)
            return
        session = await self._session(scope, send)
        if session is None:
            return
        log, after = session.listener, session.listener.written
        last_event = header(scope, b"last-event-id")
        if last_event is not None:
            named = parse_event_id(last_event)
            found = None if named is None else session.logs.get(named[0]) if named[0] else session.listener
            if named is None or found is None:
                await reply(send, 400, replies.NOTHING_TO_RESUME)
                return
            log, after = found, named[1]
            await log.take_over()
        elif log.following:
            await reply(send, 409, replies.ONE_GET_STREAM)
            return
        headers = [(b"mcp-session-id", session.session_id)]
        prime = primes(header(scope, VERSION))
        ping = self.settings.sse_ping_seconds
        if await serve_log(log, after, headers, receive, send, prime=prime, ping=ping) and log is not session.listener:
            session.delivered(log)

    # --- ends --------------------------------------------------------------------------------

    def aborted(self, session: MuxedSession) -> None:
        """An aborting refusal is on its stream: the session ends now (the refusal still goes out)."""
        if not session.session_id:
            logger.warning("an agent was aborted for looping; its requests get 429 for a while")
            return
        logger.warning("session %s aborted: its agent kept looping", session.short)
        self.sessions.retire(session)

    async def end(self, session: MuxedSession) -> None:
        """End a session: its requests in flight get an error, its id 404."""
        if self.sessions.retire(session) and session.pipe is not None:
            await session.pipe.shut_down("the session ended")
