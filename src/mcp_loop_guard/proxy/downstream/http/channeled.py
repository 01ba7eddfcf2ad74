"""The HTTP guard in front of one server it does not share: each session over an upstream session of its own.

For a legacy SSE server (whose event stream is its session), for legacy SSE clients in front
of one streamable HTTP server, and for a stdio server started anew for each session
(``--child-per-session``, as a stdio guard starts one for its client). Each of the guard's
sessions opens its own session at the server (or its own child) when it opens, with the
client's own ``initialize``, and ends it when it ends;
its messages cross as they came, ids and all, and only a ``tools/call`` is judged: the same
message relay, over the same upstream channels, as a stdio guard's ``--upstream URL``
(:mod:`~mcp_loop_guard.proxy.upstream.sse_lines`, :mod:`~mcp_loop_guard.proxy.upstream.http_lines`).
What the client sees is what the server says, in the era the two agree on.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import HostRules
from mcp_loop_guard.proxy.downstream.http.muxed_stateless import StatelessRequests
from mcp_loop_guard.proxy.downstream.http.session_relay import SessionRelay
from mcp_loop_guard.proxy.downstream.http.translating import Translating
from mcp_loop_guard.proxy.upstream.channels import Opener, channel, opener
from mcp_loop_guard.proxy.upstream.shared_channel import SharedChannel

__all__ = ["ChanneledRelay"]


class ChanneledRelay(SessionRelay):
    """Every client of one HTTP guard in front of one remote server, each over its own upstream session."""

    def __init__(
        self,
        plan: Plan,
        spec: ServerSpec,
        *,
        agents: Agents,
        metrics: Metrics,
        translating: Translating,
        security: HostRules,
    ) -> None:
        """``translating`` serves 2026-07-28 requests through the SDK."""
        super().__init__(plan, agents=agents, metrics=metrics, translating=translating, security=security)
        self.spec = spec
        if plan.settings.stateless and plan.settings.transport == "http":
            self.stateless = StatelessRequests(self)
            self.shared = SharedChannel(opener([spec], self.limits), self.limits)

    @property
    def server(self) -> ServerSpec:
        """The one remote server."""
        return self.spec

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: the same server with other rules or headers applies to new sessions; else restart."""
        spec = servers[0] if len(servers) == 1 else None
        if spec is None or not _same_server(self.spec, spec):
            return "this guard relays one server, each session on its own; serving other servers needs a restart"
        self.spec = spec
        return None if self.shared is None else await self.shared.channel.reconfigure(servers)

    def _reach(self) -> Opener:
        """An upstream session (or child) of the session's own; one that cannot start fails its requests (lenient)."""
        return partial(channel, self.spec, limits=self.limits, lenient=True)


def _same_server(old: ServerSpec, new: ServerSpec) -> bool:
    """The same endpoint (a URL), or the same command run the same way (a child per session)."""
    if isinstance(old, HttpServer) and isinstance(new, HttpServer):
        return old.same_endpoint(new)
    if isinstance(old, StdioServer) and isinstance(new, StdioServer):
        return (old.command, old.args, dict(old.env), old.cwd) == (new.command, new.args, dict(new.env), new.cwd)
    return False
