"""``--stateless`` requests to the HTTP guard: each one relayed on its own, over a share of what they all share.

A request opens no session: it is relayed through a share made for it alone (so two
requests with the same id never meet) of the one child, or of the one channel the guard
keeps for such requests (a session at the server, or a router of several:
:mod:`~mcp_loop_guard.proxy.upstream.shared_channel`), judged by the agent its key names, and
its answer and what belongs to it come back on its own response. An aborted agent's next
requests get 429 until its request window closes, as for every sessionless request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import anyio
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.core import replies
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.event_log import primes, serve_log, single_answer
from mcp_loop_guard.proxy.downstream.http.middleware import header, reply, token_of, trace_headers
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession
from mcp_loop_guard.proxy.downstream.http.replies import json_reply, read_posted
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.pipe import Pipe
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.upstream.shared_channel import SharedChannel
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import BadLine, Message

__all__ = ["StatelessRequests", "posted", "request_session", "stream_request"]

VERSION = b"mcp-protocol-version"


async def posted(scope: Scope, receive: Receive, send: Send) -> Message | BadLine | None:
    """The message a POST carries; None when the request was answered instead (400, 406)."""
    posted_ = await read_posted(receive, send)
    if posted_ is None:
        return None
    _, parsed = posted_
    accept = header(scope, b"accept") or b""
    is_request = isinstance(parsed, Message) and parsed.is_request
    if is_request and b"text/event-stream" not in accept and b"application/json" not in accept:
        await reply(send, 406, replies.NOT_ACCEPTABLE_ANSWER)
        return None
    return parsed


async def stream_request(
    session: MuxedSession, message: Message, scope: Scope, receive: Receive, send: Send, *, ping: float
) -> None:
    """A client request: relayed, and what belongs to it streamed back until its answer (``ping``: keep-alive).

    A session's event stream cut before the answer leaves its log parked: the answer still
    lands there, for the client to resume with ``Last-Event-ID``.
    """
    ident = message.id
    pipe = session.pipe
    assert ident is not None
    assert pipe is not None
    if ident in session.streams:
        reused = wire.error(ident, wire.INVALID_REQUEST, replies.invalid_request(replies.ID_IN_FLIGHT))
        await json_reply(send, 200, reused)
        return
    log = session.opened(message)
    session.in_flight += 1
    resumable = bool(session.session_id)
    finished = True
    try:
        await pipe.take_client(message, trace=trace_headers(scope))
        accept = header(scope, b"accept") or b""
        headers = [(b"mcp-session-id", session.session_id)] if resumable else []
        if b"text/event-stream" in accept:
            prime = resumable and primes(header(scope, VERSION))
            finished = await serve_log(log, 0, headers, receive, send, ids=resumable, prime=prime, ping=ping)
        else:
            await single_answer(log, headers, send)
    finally:
        session.in_flight -= 1
        if finished or not resumable:
            session.closed(ident)
            session.delivered(log)


def request_session(
    shared: SharedChannel,
    token: str,
    kind: str,
    judge: Judge,
    *,
    server: str,
    limits: Limits,
    on_abort: Callable[[MuxedSession], None],
) -> MuxedSession:
    """A ``--stateless`` request's session, not kept: its relay over a share of ``shared``."""
    session = MuxedSession(b"", token, None, kind=kind)

    def aborted() -> None:
        on_abort(session)

    share, router, facts = shared.share, shared.router, shared.facts
    pipe = Pipe(share, session.send, judge, server=server, limits=limits, on_abort=aborted, router=router, facts=facts)
    session.pipe = pipe
    assert isinstance(pipe.upstream, MuxView)
    session.view = pipe.upstream
    return session


class Relays(Protocol):
    """What relays the requests: a relay of the guard's own sessions, or the relay in front of one HTTP server."""

    agents: Agents

    @property
    def ping(self) -> float:
        """Seconds between keep-alive comments on a request's event stream."""
        ...

    def new_session(self, token: str, *, kind: str = "session", judge: Judge | None = None) -> MuxedSession:
        """A session with its relay (not kept, given a judge)."""
        ...


class StatelessRequests:
    """Requests without a session, each relayed on its own and judged by its key's agent."""

    def __init__(self, relay: Relays, *, runs_upstream: bool = False) -> None:
        """Requests are relayed by ``relay``; ``runs_upstream``: each has an upstream of its own, run meanwhile."""
        self.relay = relay
        self.runs_upstream = runs_upstream
        self.open: set[MuxedSession] = set()
        """The requests being relayed now (a stop answers them)."""

    async def post(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One POST: a request (answered on its response), or a notification or a response (202)."""
        parsed = await posted(scope, receive, send)
        if parsed is None:
            return
        agent = await self.relay.agents.admit(scope, send)
        if agent is None:
            return
        session = self.relay.new_session(token_of(scope), judge=agent.judge)
        pipe = session.pipe
        assert pipe is not None
        agent.in_flight += 1
        self.open.add(session)
        try:
            async with anyio.create_task_group() as tg:
                if self.runs_upstream:
                    await tg.start(pipe.upstream.run)
                if isinstance(parsed, Message) and parsed.is_request:
                    await stream_request(session, parsed, scope, receive, send, ping=self.relay.ping)
                else:
                    await pipe.take_client(parsed)
                    await send({"type": "http.response.start", "status": 202, "headers": []})
                    await send({"type": "http.response.body", "body": b""})
                tg.cancel_scope.cancel()
        finally:
            self.open.discard(session)
            agent.in_flight -= 1
            if session.view is not None:
                session.view.leave()
