"""``--stateless`` requests to the HTTP guard in front of one stdio server: each one relayed on its own.

A request opens no session: it is relayed through a share of the child made for it alone
(so two requests with the same id never meet), judged by the agent its key names, and its
answer and what belongs to it come back on its own response. An aborted agent's next
requests get 429 until its request window closes, as for every sessionless request.
"""

from __future__ import annotations

from typing import Protocol

from starlette.types import Receive, Scope, Send

from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import header, reply, token_of
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession
from mcp_loop_guard.proxy.downstream.http.replies import read_posted
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.wire.messages import BadLine, Message

__all__ = ["StatelessRequests", "posted"]


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


class Relays(Protocol):
    """What relays the requests (the relay in front of the shared child)."""

    agents: Agents

    def new_session(self, token: str, *, kind: str = "session", judge: Judge | None = None) -> MuxedSession:
        """A session with its relay (not kept, given a judge)."""
        ...

    async def request(
        self, session: MuxedSession, message: Message, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request relayed, its answer streamed back."""
        ...


class StatelessRequests:
    """Requests without a session, each relayed on its own and judged by its key's agent."""

    def __init__(self, relay: Relays) -> None:
        """Requests are relayed by ``relay``."""
        self.relay = relay
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
            if isinstance(parsed, Message) and parsed.is_request:
                await self.relay.request(session, parsed, scope, receive, send)
            else:
                await pipe.take_client(parsed)
                await send({"type": "http.response.start", "status": 202, "headers": []})
                await send({"type": "http.response.body", "body": b""})
        finally:
            self.open.discard(session)
            agent.in_flight -= 1
            if session.view is not None:
                session.view.leave()
