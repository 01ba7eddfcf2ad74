"""``--stateless`` requests to one streamable HTTP server that gives each client a session: over one of the guard's.

Such a server refuses a request that names no session, so the guard opens one session there
with its own ``initialize`` when the first such request comes, and relays each request on
its own over a share of it (ids rewritten, so requests numbered alike never meet), as it
relays ``--stateless`` requests in front of one stdio server or of several servers: what the
server keeps per session (tasks, subscriptions, its log level) is the same for every request,
and a session the server forgot (it restarted) is opened again with the same handshake.
"""

from __future__ import annotations

import logging
from functools import partial

import anyio
import anyio.abc
from starlette.types import Receive, Scope, Send

from mcp_loop_guard.config import HttpServer
from mcp_loop_guard.core import replies
from mcp_loop_guard.plan import Limits, Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import reply
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession
from mcp_loop_guard.proxy.downstream.http.muxed_stateless import StatelessRequests, request_session
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.upstream.channels import channel
from mcp_loop_guard.proxy.upstream.shared_channel import SharedChannel

__all__ = ["OverOneSession"]

logger = logging.getLogger(__name__)


class OverOneSession:
    """Requests without a session, each relayed over a share of one session of the guard's own at the server."""

    def __init__(self, plan: Plan, spec: HttpServer, agents: Agents) -> None:
        """Nothing is opened until the first request."""
        self.settings = plan.settings
        self.spec = spec
        self.agents = agents
        self.limits = Limits.of(plan.settings, spec.call_timeout)
        self.shared: SharedChannel | None = None
        self.requests = StatelessRequests(self)

    @property
    def ping(self) -> float:
        """Seconds between keep-alive comments on a request's event stream."""
        return self.settings.sse_ping_seconds

    async def handle(self, tg: anyio.abc.TaskGroup, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``; the first opens the session (in ``tg``, the relay's)."""
        if self.shared is None:
            self.shared = SharedChannel(partial(channel, self.spec, limits=self.limits), self.limits)
            await tg.start(self.shared.run)
        if scope["method"] == "POST":
            await self.requests.post(scope, receive, send)
        else:
            await reply(send, 405, replies.NO_SESSIONS_STATELESS, [(b"allow", b"POST")])

    def new_session(self, token: str, *, kind: str = "session", judge: Judge | None = None) -> MuxedSession:
        """One request's relay over a share of the session (not kept)."""
        assert judge is not None, "only --stateless requests are relayed this way"
        assert self.shared is not None, "handle() opens the session first"
        spec, limits = self.spec, self.limits
        return request_session(self.shared, token, kind, judge, server=spec.name, limits=limits, on_abort=_aborted)

    async def answer_at_stop(self) -> None:
        """At the first signal, every request in flight gets why."""
        await self.agents.stopping.wait()
        for session in list(self.requests.open):
            if session.pipe is not None:
                await session.pipe.shut_down("the guard is shutting down")


def _aborted(session: MuxedSession) -> None:
    logger.warning("an agent was aborted for looping; its requests get 429 for a while")
