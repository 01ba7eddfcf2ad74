"""The HTTP guard in front of one streamable HTTP server: each client request relayed as the same request.

A POST goes upstream with the same body and MCP headers and its answer comes back as it was
sent (a JSON body, or an event stream passed on event by event); a GET event stream and a
DELETE cross the same way. The client and the server negotiate everything between
themselves (protocol era, capabilities, ``Mcp-Session-Id``), so every method, present and
future, crosses the guard as it would cross a pipe. Only a ``tools/call`` is judged before it
goes (a refusal is answered here and never reaches the server) and its answer judged before
it comes back (passed on as its own bytes unless a warning is appended).

Loop state is kept per upstream session (the ``Mcp-Session-Id`` the server gave, bound to the
token that opened it) or, for requests without one (2026-07-28, or ``--stateless``: relayed as
they are to a server that opens no sessions, each on its own over a share of one session of the
guard's own to one that does), per key as for sessionless requests. An aborted session's
refusal goes out, then the session ends: its id answers 404, its open streams close, and
the server is told to end it too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.abc
from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.config import HttpServer, ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.admin import LiveAgent
from mcp_loop_guard.proxy.downstream.http.agents import Agents, KeyedAgent
from mcp_loop_guard.proxy.downstream.http.exchanges import Exchange
from mcp_loop_guard.proxy.downstream.http.middleware import header, reply, token_of
from mcp_loop_guard.proxy.downstream.http.relayed_sessions import RelayedSession, RelayedSessions
from mcp_loop_guard.proxy.downstream.http.relayed_stateless import OverOneSession
from mcp_loop_guard.proxy.downstream.http.replies import (
    ASK_TIMEOUT,
    is_modern,
    opens_sessions,
    read_posted,
    relay_plain,
    speaks_modern,
    until_disconnected,
)
from mcp_loop_guard.proxy.downstream.http.translating import Translating
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange, UpstreamHttpError
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts
from mcp_loop_guard.proxy.wire.messages import Message

logger = logging.getLogger(__name__)

SESSION = b"mcp-session-id"
VERSION = b"mcp-protocol-version"
ASK_AGAIN_SECONDS = 5.0
"""After a server could not say whether it opens sessions, how long until it is asked again (the SDK path meanwhile)."""


class HttpRelay:
    """Every client of one HTTP guard in front of one streamable HTTP upstream."""

    def __init__(
        self, plan: Plan, spec: HttpServer, *, agents: Agents, metrics: Metrics, translating: Translating
    ) -> None:
        """Sessions' agents are judged through ``agents``' store; keyless requests through ``agents`` itself.

        ``translating`` serves 2026-07-28 requests when the server speaks only the handshake
        era: through the SDK, which speaks each side's era.
        """
        self.plan = plan
        self.settings = plan.settings
        self.spec = spec
        self.agents = agents
        self.stopping = agents.stopping
        self.metrics = metrics
        self.upstream = HttpExchange(spec)
        self.facts = ToolFacts()
        self.sessions = RelayedSessions(plan, agents, metrics, self.upstream)
        self.translating = translating
        self.modern: bool | None = None
        """Whether the server answers 2026-07-28 requests itself; None until it could be asked."""
        self.server_info: object = None
        """The upstream's 2026-07-28 ``serverInfo``, stamped on the results the guard writes in that era."""
        self.opens_sessions: bool | None = None
        """With ``--stateless``: whether the server gives its clients sessions; None until it could be asked."""
        self.over_one_session = OverOneSession(plan, spec, agents)
        """``--stateless`` requests to a server that opens sessions."""
        self._sessions_asked = -ASK_AGAIN_SECONDS
        self._asking = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None

    # --- life --------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve until the context ends; then close the connections."""
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._expire)
                await self.translating.start(tg)
                if self.settings.stateless:
                    tg.start_soon(self._relays_stateless)  # asked at start-up, not by the first request
                    tg.start_soon(self.over_one_session.answer_at_stop)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            # Clients' sessions are left open at the server: a guard started again in this one's
            # place serves them on, judged by the state they left in the store. The guard's own end.
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()

    async def _expire(self) -> None:
        idle = self.settings.session_idle_seconds
        while True:
            await anyio.sleep(min(idle, 30.0))
            await self.sessions.expire(idle)
            self.agents.expire(idle)

    async def _speaks_modern(self) -> bool:
        """Whether 2026-07-28 requests can be relayed as they are: asked of the server once it answers."""
        if self.modern is None:
            self.modern = await speaks_modern(self.upstream, self.settings.max_message_bytes)
        return bool(self.modern)

    async def _relays_stateless(self) -> bool:
        """With ``--stateless``: whether handshake-era requests (they carry no session) can go to the server as is.

        Only a server that opens no sessions takes them (a stateless server); to one that does,
        and until the server could say, each goes on its own over a share of one session of the
        guard's own (:mod:`.relayed_stateless`), which a server that opens none serves too.
        """
        if self.opens_sessions is not None:
            return not self.opens_sessions
        async with self._asking:  # one question at a time; the others wait for its answer
            if self.opens_sessions is None and time.monotonic() - self._sessions_asked >= ASK_AGAIN_SECONDS:
                self._sessions_asked = time.monotonic()
                try:
                    with anyio.fail_after(ASK_TIMEOUT):
                        self.opens_sessions = await opens_sessions(self.upstream, self.settings.max_message_bytes)
                except (UpstreamHttpError, TimeoutError) as error:
                    logger.warning("could not ask upstream %r whether it opens sessions: %s", self.spec.name, error)
                    return False
                logger.info(
                    "upstream %r %s",
                    self.spec.name,
                    "opens a session per client: stateless requests share one session of the guard's own"
                    if self.opens_sessions
                    else "opens no sessions: stateless requests are relayed as they are",
                )
        return self.opens_sessions is False

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the same server with other rules or headers applies at once; another needs a restart."""
        spec = servers[0] if len(servers) == 1 else None
        if not isinstance(spec, HttpServer) or not self.spec.same_endpoint(spec):
            return "this guard relays one HTTP server directly; serving other servers needs a restart"
        if spec.headers != self.spec.headers:
            self.upstream.use_headers(spec.headers)
        self.spec = spec
        return None

    def held(self) -> Iterator[LiveAgent]:
        """Every agent held in memory now, for the admin API."""
        for session in list(self.sessions.live.values()):
            yield LiveAgent("session", session.judge.agent, session.in_flight)
        for agent in list(self.agents.held.values()):
            yield LiveAgent("keyed", agent.judge.agent, agent.in_flight)

    # --- requests ----------------------------------------------------------------------------

    async def handle_mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``."""
        modern = is_modern(scope["headers"])
        stateless = not modern and self.settings.stateless
        if stateless and not await self._relays_stateless():
            assert self._tg is not None, "the relay is not running"
            await self.over_one_session.handle(self._tg, scope, receive, send)
            return
        if modern and not await self._speaks_modern():
            await self.translating.serve(scope, receive, send)
            return
        method = scope["method"]
        if method == "POST":
            await self._post(scope, receive, send)
        elif method in ("GET", "DELETE"):
            await self._other(method, scope, receive, send)
        else:
            await reply(send, 405, replies.METHOD_NOT_ALLOWED, [(b"allow", b"GET, POST, DELETE")])

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        posted = await read_posted(receive, send)
        if posted is None:
            return
        body, parsed = posted
        token = token_of(scope)
        session_id = header(scope, SESSION)
        session: RelayedSession | None = None
        if session_id is not None:
            session = await self.sessions.lookup(session_id, token, scope["headers"], send)
            if session is None:
                return
        message = parsed if isinstance(parsed, Message) else None
        judge: Judge | None = session.judge if session is not None else None
        keyed: KeyedAgent | None = None
        if session is None and message is not None and message.method != "initialize" and not message.is_response:
            keyed = await self.agents.admit(scope, send)
            if keyed is None:
                return
            judge = keyed.judge
        elif (
            session is None
            and message is not None
            and message.method == "initialize"
            and not await self.sessions.room(send)
        ):
            return
        exchange = Exchange(self, scope, send, body, message, session, judge)
        if keyed is not None:
            keyed.in_flight += 1
        if session is not None:
            session.in_flight += 1
            session.last_used = time.monotonic()
        try:
            await exchange.run()
        finally:
            if keyed is not None:
                keyed.in_flight -= 1
            if session is not None:
                session.in_flight -= 1
                session.last_used = time.monotonic()

    async def _other(self, method: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A GET event stream or a DELETE: relayed as they are, within the session's life."""
        session_id = header(scope, SESSION)
        session = (
            await self.sessions.lookup(session_id, token_of(scope), scope["headers"], send)
            if session_id is not None
            else None
        )
        if session_id is not None and session is None:
            return
        answered = False

        async def tracked(message: ASGIMessage) -> None:
            nonlocal answered
            answered = True
            if message["type"] == "http.response.start" and message["status"] == 404 and session is not None:
                self.sessions.forget(session)  # the server does not know it (any more)
            await send(message)

        with anyio.CancelScope() as cancel:
            if session is not None:
                session.scopes.add(cancel)
            try:
                async with anyio.create_task_group() as tg:
                    if method == "GET":
                        tg.start_soon(until_disconnected, receive, cancel)
                    await relay_plain(self.upstream, self.facts, method, scope["headers"], tracked)
                    tg.cancel_scope.cancel()
            finally:
                if session is not None:
                    session.scopes.discard(cancel)
        if not answered:
            await reply(send, 404, replies.SESSION_NOT_FOUND)  # ended by the guard before the server answered
        if method == "DELETE" and session is not None:
            self.sessions.forget(session)

    # --- sessions and agents -----------------------------------------------------------------

    def aborted(self, session: RelayedSession | None, tool: str) -> None:
        """An aborting refusal went out: the session ends now (a keyed agent gets 429 from its next request)."""
        if session is None:
            logger.warning("an agent was aborted for looping on %r; its requests get 429 for a while", tool)
            return
        logger.warning("session %s aborted: tool %r kept looping", session.short, tool)
        assert self._tg is not None
        self.sessions.retire(session)
        self._tg.start_soon(self.sessions.tell_upstream_ended, session)
