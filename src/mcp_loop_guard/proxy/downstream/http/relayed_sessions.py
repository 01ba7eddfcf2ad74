"""The upstream sessions an HTTP relay judges: each one's agent, bound to its token, capped, expired, ended.

A session is the server's own (its ``Mcp-Session-Id``). The guard starts judging it when the
server names it in its answer to ``initialize``, or at its first request when the guard did
not see it open (a guard started again in another's place: its loop state is in the store;
such an id is first asked of the server). A session the guard ends (aborted, evicted,
expired) answers 404 from then on, its open streams close, and the server is sent a DELETE
for it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import anyio
from starlette.types import Send

from mcp_loop_guard import codec
from mcp_loop_guard.core import replies
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import reply, sessions_busy
from mcp_loop_guard.proxy.downstream.session_table import SessionTable
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.tasks import HeldTasks
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange, UpstreamHttpError
from mcp_loop_guard.proxy.wire.messages import own_request_id

logger = logging.getLogger(__name__)

END_TIMEOUT = 5.0
"""Seconds the server gets to take the guard's DELETE of a session the guard ended."""


@dataclass(eq=False)
class RelayedSession:
    """One upstream session as the guard sees it: its agent, and the requests it has open."""

    session_id: bytes
    token: str
    judge: Judge
    tasks: HeldTasks
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    scopes: set[anyio.CancelScope] = field(default_factory=set)
    """The session's open requests and streams, cancelled when the guard ends the session."""
    headers: Sequence[tuple[bytes, bytes]] = ()
    """The MCP headers of its last request (session id, protocol version), for the guard's own requests."""

    @property
    def short(self) -> str:
        """The id's first characters, for logs."""
        return self.session_id[:8].decode("latin-1")


class RelayedSessions:
    """Every session of one relay, in the guard's one session table (:mod:`..session_table`)."""

    def __init__(self, plan: Plan, agents: Agents, metrics: Metrics, upstream: HttpExchange) -> None:
        """Agents are made with ``agents``' store and event log; ended sessions are DELETEd at ``upstream``."""
        self.plan = plan
        self.agents = agents
        self.upstream = upstream
        self.table: SessionTable[RelayedSession] = SessionTable(plan.settings.max_sessions, metrics.sessions)

    @property
    def live(self) -> OrderedDict[bytes, RelayedSession]:
        """The live sessions, least recently used first."""
        return self.table.live

    async def lookup(
        self, session_id: bytes, token: str, headers: Sequence[tuple[bytes, bytes]], send: Send
    ) -> RelayedSession | None:
        """The session a request names; None when the request was answered instead.

        404 for a session the guard ended, one opened with another token, or one the server
        does not know: an id the guard has not seen is asked of the server (a ping) before it
        gets loop state or room, so made-up ids can neither fill the store nor push out
        other clients' sessions.
        """
        if not self.table.known(session_id):
            if not await self._known_upstream(session_id, headers):
                await reply(send, 404, replies.SESSION_NOT_FOUND)
                return None
            if not await self.room(send):
                return None
            await self.open(session_id, token)
        session = self.table.lookup(session_id, token)
        if session is None:
            await reply(send, 404, replies.SESSION_NOT_FOUND)
        return session

    async def _known_upstream(self, session_id: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bool:
        """Whether the server still serves this session (it answers a ping on it)."""
        version = [(key, value) for key, value in headers if key == b"mcp-protocol-version"]
        sent = [
            (b"mcp-session-id", session_id),
            *version,
            (b"accept", b"application/json, text/event-stream"),
            (b"content-type", b"application/json"),
        ]
        ping = codec.dumps({"jsonrpc": "2.0", "id": own_request_id(), "method": "ping"})
        with anyio.move_on_after(END_TIMEOUT):
            try:
                async with self.upstream.send("POST", sent, ping) as response:
                    return response.is_success
            except UpstreamHttpError as error:
                logger.debug("could not ask the server about session %s: %s", session_id[:8], error)
        return False

    async def open(self, session_id: bytes, token: str) -> RelayedSession:
        """Start judging a session the server opened, with what the store kept of it (a guard restarted)."""
        existing = self.table.get(session_id)
        if existing is not None:
            return existing
        key = f"session:{token or '-'}/{session_id.decode('latin-1')}"
        state = await self.agents.stored(key)
        existing = self.table.get(session_id)
        if existing is not None:  # opened by another request meanwhile
            return existing
        judge = self.agents.judge(key, state)
        session = RelayedSession(session_id, token, judge, HeldTasks(judge))
        self.table.add(session)
        return session

    async def room(self, send: Send) -> bool:
        """Room for one more session: the least recently used idle one ends, or the client gets 503."""
        if await self.table.room(self.end):
            return True
        await sessions_busy(send)
        return False

    async def expire(self, idle: float) -> None:
        """End the sessions unused for ``idle`` seconds with nothing in flight."""
        await self.table.expire(idle, self.end)

    def forget(self, session: RelayedSession) -> None:
        """The session is over for the server too (it answered 404, or the client deleted it)."""
        self.table.forget(session)

    def retire(self, session: RelayedSession) -> None:
        """Stop serving a session: its id answers 404 from now on and its open streams close."""
        self.table.end(session)
        for cancel in list(session.scopes):
            cancel.cancel()

    async def end(self, session: RelayedSession) -> None:
        """Retire a session and tell the server."""
        self.retire(session)
        await self.tell_upstream_ended(session)

    async def tell_upstream_ended(self, session: RelayedSession) -> None:
        """DELETE the session upstream, so the server frees it too (best effort, bounded)."""
        if not session.headers:
            return
        with anyio.move_on_after(END_TIMEOUT):
            try:
                async with self.upstream.send("DELETE", session.headers):
                    pass
            except UpstreamHttpError as error:
                logger.debug("could not end session %s upstream: %s", session.short, error)
