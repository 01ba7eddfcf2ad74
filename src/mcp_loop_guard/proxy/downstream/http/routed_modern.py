"""2026-07-28 requests to an HTTP guard in front of several servers that all speak that era: relayed as messages.

That era has no sessions: each request carries what a handshake said (version, client,
capabilities) in its ``_meta``. When every server behind the guard is a streamable HTTP
server that answers it, no era needs translating, so each request is relayed on its own,
as a ``--stateless`` one is, through a router of its own whose members post to each server
without a session; what belongs to the request (progress, log messages, a listen stream's
notifications) comes back on its own response, and nothing of it can reach another
client's. The routers share what the servers listed (where each exported name goes, the
tools' annotations, and which of a tool's arguments its calls mirror in ``Mcp-Param-*``
headers), so a call is routed, judged and sent without a list of its own first, and each
server's keep-alive connections, so a request opens none of its own.

A server that speaks only the handshake era (every stdio server, which the guard's sessions
share, and every legacy SSE server) needs its era translated: then such requests go to the
SDK path (:mod:`.translating`), as in front of one such server.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Protocol

import anyio

from mcp_loop_guard.config import HttpServer, ServerSpec
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession
from mcp_loop_guard.proxy.downstream.http.muxed_stateless import StatelessRequests
from mcp_loop_guard.proxy.downstream.http.replies import speaks_modern
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.pipe import Pipe
from mcp_loop_guard.proxy.upstream.channel import Channel, Receiver
from mcp_loop_guard.proxy.upstream.channels import channel, opener
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange
from mcp_loop_guard.proxy.upstream.http_headers import ParamHeaders
from mcp_loop_guard.proxy.upstream.http_lines import HttpLines
from mcp_loop_guard.proxy.upstream.router_lists import Catalog
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts

__all__ = ["ModernRequests"]

logger = logging.getLogger(__name__)


class Routed(Protocol):
    """What the relay in front of several servers gives (:class:`~.routed.RoutedRelay`)."""

    agents: Agents
    metrics: Metrics
    owners: dict[str, tuple[str, str]]
    specs: list[ServerSpec]

    @property
    def server(self) -> ServerSpec:
        """The first server."""
        ...

    @property
    def limits(self) -> Limits:
        """The guard's limits."""
        ...

    @property
    def ping(self) -> float:
        """Seconds between keep-alive comments on a request's event stream."""
        ...

    def usable(self, name: str) -> bool:
        """Whether a server is worth asking now."""
        ...

    def aborted(self, session: MuxedSession) -> None:
        """An aborting refusal went out on the request's stream."""
        ...


class ModernRequests:
    """2026-07-28 requests in front of several servers of that era, each relayed through a router of its own."""

    def __init__(self, relay: Routed) -> None:
        """Nothing is asked of the servers until the first such request."""
        self.relay = relay
        self.agents: Agents = relay.agents
        self.requests = StatelessRequests(self, runs_upstream=True)
        self.catalog = Catalog(relay.owners, on_listed=relay.metrics.learn, on_dropped=relay.metrics.dropped)
        """Where each exported name goes, shared by every request's router (a call needs no list first)."""
        self.facts = ToolFacts()
        """The tools' annotations, learnt by any request's list: a call's relay lists nothing first to judge it."""
        self.params: dict[str, ParamHeaders] = {}
        """Each server's ``Mcp-Param-*`` declarations, learnt by any request's list, used by every call."""
        self.exchanges: dict[str, HttpExchange] = {}
        """Each server's pool of keep-alive connections (its probe's), which every request's router posts through."""
        self.modern: dict[str, bool] = {}
        """Each server's answer: whether it speaks 2026-07-28 (a server not asked yet is not in it)."""
        self._asking = anyio.Lock()

    @property
    def ping(self) -> float:
        """Seconds between keep-alive comments on a request's event stream."""
        return self.relay.ping

    async def relayed(self, specs: Sequence[ServerSpec], exchanges: dict[str, HttpExchange]) -> bool:
        """Whether 2026-07-28 requests can be relayed as they are: every server speaks that era (asked once each).

        A server that cannot be asked now is asked again by the next request; meanwhile this
        one is translated.
        """
        if not all(isinstance(spec, HttpServer) and spec.transport == "http" for spec in specs):
            return False
        self.exchanges = exchanges
        async with self._asking:
            for spec in specs:
                if spec.name not in self.modern:
                    exchange = exchanges.get(spec.name)
                    if exchange is None:
                        return False
                    said = await speaks_modern(exchange, self.relay.limits.max_message_bytes)
                    if said is None:
                        return False
                    self.modern[spec.name] = said
        return all(self.modern[spec.name] for spec in specs)

    def reconfigured(self) -> None:
        """The servers changed: each is asked again."""
        self.modern.clear()

    def new_session(self, token: str, *, kind: str = "session", judge: Judge | None = None) -> MuxedSession:
        """One request's relay, over a router of its own (run by :attr:`requests` while the request lasts)."""
        assert judge is not None, "only requests without a session are relayed this way"
        relay = self.relay
        session = MuxedSession(b"", token, None, kind=kind)
        reach = opener(relay.specs, relay.limits, member=self._member, catalog=self.catalog, usable=relay.usable)
        aborted = partial(relay.aborted, session)
        server, limits, facts = relay.server.name, relay.limits, self.facts
        session.pipe = Pipe(reach, session.send, judge, server=server, limits=limits, on_abort=aborted, facts=facts)
        return session

    def _member(self, spec: ServerSpec, receiver: Receiver) -> Channel:
        """A server posted to without a session, its tools' header declarations shared."""
        member = channel(spec, receiver, limits=self.relay.limits, lenient=True)
        if isinstance(member, HttpLines):
            member.params = self.params.setdefault(spec.name, ParamHeaders())
            exchange = self.exchanges.get(spec.name)
            if exchange is not None:
                member.share(exchange)  # no new connection (nor TLS handshake) for each request
        return member
