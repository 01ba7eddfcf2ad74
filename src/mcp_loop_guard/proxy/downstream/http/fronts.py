"""Which front of the HTTP guard serves a plan (:data:`TOPOLOGIES`, the first that serves it), and how each is made.

The relays need no SDK to start: one HTTP server, one stdio server, one remote server with a
session per client's, several servers through a router per session; each relays
``--stateless`` requests too. The SDK path, loaded by the first request that needs it, only
translates between protocol eras. The rows are those of ARCHITECTURE.md's path table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.abc

from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.middleware import security_settings
from mcp_loop_guard.proxy.downstream.http.probe import HttpProbe, Supervisor
from mcp_loop_guard.proxy.downstream.http.relayed import HttpRelay
from mcp_loop_guard.proxy.downstream.http.translating import Translating
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.health import Supervised

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.downstream.http.session_relay import SessionRelay

S = TypeVar("S", bound=ServerSpec)

__all__ = [
    "TOPOLOGIES",
    "Served",
    "Start",
    "Topology",
    "channeled_front",
    "channeled_upstream",
    "muxed_front",
    "muxed_upstream",
    "relayed_front",
    "relayed_upstream",
    "routed_front",
    "routed_upstreams",
    "topology",
]


def relayed_upstream(plan: Plan) -> HttpServer | None:
    """The one streamable HTTP server an HTTP guard relays request by request, when that is all it serves.

    With ``--stateless`` too: requests that open no session are relayed as they are when the
    server opens none either, and over sessions of the guard's own when it gives each client one.
    """
    servers = plan.config.servers
    settings = plan.settings
    if settings.transport != "http" or len(servers) != 1:
        return None
    spec = servers[0]
    return spec if isinstance(spec, HttpServer) and spec.transport == "http" else None


def channeled_upstream(plan: Plan) -> ServerSpec | None:
    """The one server an HTTP guard relays for each session over an upstream session (or child) of its own.

    A legacy SSE server, a streamable HTTP one in front of legacy SSE clients (whose
    connections are sessions, ``--stateless`` or not), or a stdio server started anew for each
    session (``--child-per-session``). Requests that open no session (``--stateless``) are each
    relayed over a share of one session (or child) of the guard's.
    """
    servers = plan.config.servers
    settings = plan.settings
    if settings.transport not in ("http", "sse") or len(servers) != 1:
        return None
    spec = servers[0]
    if isinstance(spec, StdioServer):
        return spec if settings.child_per_session else None
    if spec.transport != "sse" and settings.transport != "sse":
        return None
    return spec


def muxed_upstream(plan: Plan) -> StdioServer | None:
    """The one stdio server an HTTP guard relays message by message for every session, when that is all it serves.

    Legacy SSE connections are its sessions too, and ``--stateless`` requests are relayed each on its own.
    """
    servers = plan.config.servers
    settings = plan.settings
    if settings.transport not in ("http", "sse") or len(servers) != 1 or settings.child_per_session:
        return None
    spec = servers[0]
    return spec if isinstance(spec, StdioServer) else None


def routed_upstreams(plan: Plan) -> bool:
    """Several servers behind an HTTP guard: each session relayed through a router of its own.

    ``--stateless`` requests, which open no session, are each relayed over a share of one
    router the guard keeps for them; legacy SSE connections are sessions either way.
    """
    return plan.settings.transport in ("http", "sse") and len(plan.config.servers) > 1


@dataclass(frozen=True, slots=True)
class Start:
    """What every front is made with."""

    agents: Agents
    metrics: Metrics
    tg: anyio.abc.TaskGroup
    first: ChildProcess | None
    """The one stdio server's child, when it was started before the event loop."""


@dataclass
class Served:
    """What serves ``/mcp``, the upstreams ``/readyz`` reports, and how a config reload applies."""

    sessions: HttpRelay | SessionRelay
    slots: Sequence[Supervised]
    reconfigure: Callable[[Sequence[ServerSpec]], Awaitable[str | None]]


async def relayed_front(plan: Plan, at: Start) -> Served:
    """One streamable HTTP server, relayed request by request: no SDK until a request needs translating."""
    spec, agents, metrics = _one(relayed_upstream(plan)), at.agents, at.metrics
    translating = Translating(plan, agents=agents, metrics=metrics, security=security_settings(plan.settings))
    sessions = HttpRelay(plan, spec, agents=agents, metrics=metrics, translating=translating)
    probe = HttpProbe(spec, plan.limits, sessions.upstream)
    await at.tg.start(probe.supervise)
    return Served(sessions, [probe], sessions.reconfigure)


async def muxed_front(plan: Plan, at: Start) -> Served:
    """One stdio server, its child shared by every session: no SDK until a request needs translating."""
    from mcp_loop_guard.proxy.downstream.http.muxed import MuxedRelay  # noqa: PLC0415 - only this front needs it

    security = security_settings(plan.settings)
    spec = _one(muxed_upstream(plan))
    sessions = MuxedRelay(plan, spec, agents=at.agents, metrics=at.metrics, security=security, first=at.first)
    await sessions.supervise(at.tg)
    return Served(sessions, sessions.supervisor.slots, sessions.reconfigure)


async def channeled_front(plan: Plan, at: Start) -> Served:
    """One remote server, a session of its own for each client's: no SDK until a request needs translating."""
    spec, agents, metrics, tg = _one(channeled_upstream(plan)), at.agents, at.metrics, at.tg
    from mcp_loop_guard.proxy.downstream.http.channeled import ChanneledRelay  # noqa: PLC0415 - only this front needs it

    security = security_settings(plan.settings)
    translating = Translating(plan, agents=agents, metrics=metrics, security=security)
    sessions = ChanneledRelay(plan, spec, agents=agents, metrics=metrics, translating=translating, security=security)
    probes = Supervisor(plan.limits, child_per_session=True)  # none for a child per session

    async def reconfigure(servers: Sequence[ServerSpec]) -> str | None:
        problem = await sessions.reconfigure(servers)
        if problem is None:
            await probes.keep(tg, [sessions.spec])
        return problem

    await probes.keep(tg, [spec])
    return Served(sessions, probes.slots, reconfigure)


async def routed_front(plan: Plan, at: Start) -> Served:
    """Several servers, each session through a router: no SDK until a 2026-07-28 request comes."""
    from mcp_loop_guard.proxy.downstream.http.routed import RoutedRelay  # noqa: PLC0415 - only this front needs it

    sessions = RoutedRelay(plan, agents=at.agents, metrics=at.metrics, security=security_settings(plan.settings))
    await sessions.supervise(at.tg)
    return Served(sessions, sessions.supervisor.slots, sessions.reconfigure)


@dataclass(frozen=True, slots=True)
class Topology:
    """One row of the path table: the plans it serves, and how its front is made."""

    row: str
    serves: Callable[[Plan], object]
    """The row serves the plan when what this returns is true (a server's spec, or True)."""
    build: Callable[[Plan, Start], Awaitable[Served]]


TOPOLOGIES: tuple[Topology, ...] = (
    Topology("5: one streamable HTTP server, relayed request by request", relayed_upstream, relayed_front),
    Topology("6: one stdio server, its child shared by every session", muxed_upstream, muxed_front),
    Topology("7: one remote server, an upstream session for each client's", channeled_upstream, channeled_front),
    Topology("8: several servers, a router per session", routed_upstreams, routed_front),
)
"""In order: a plan is served by the first row that serves it."""


def topology(plan: Plan) -> Topology:
    """The row of the path table that serves an HTTP guard's plan."""
    return next(row for row in TOPOLOGIES if row.serves(plan))


def _one(spec: S | None) -> S:
    assert spec is not None, "built only for a plan its row serves"
    return spec
