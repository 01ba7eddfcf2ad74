"""Which front of the HTTP guard serves a plan: the relays that need no SDK to start, or the SDK-based sessions."""

from __future__ import annotations

from mcp_loop_guard.config import HttpServer, StdioServer
from mcp_loop_guard.plan import Plan

__all__ = ["channeled_upstream", "muxed_upstream", "relayed_upstream"]


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


def channeled_upstream(plan: Plan) -> HttpServer | None:
    """The one remote server an HTTP guard relays for each session over an upstream session of its own.

    A legacy SSE server, or a streamable HTTP one in front of legacy SSE clients; not with
    ``--stateless``, whose requests open no session (the SDK path serves those).
    """
    servers = plan.config.servers
    settings = plan.settings
    if settings.transport not in ("http", "sse") or settings.stateless or len(servers) != 1:
        return None
    spec = servers[0]
    if not isinstance(spec, HttpServer) or (spec.transport != "sse" and settings.transport != "sse"):
        return None
    return spec


def muxed_upstream(plan: Plan) -> StdioServer | None:
    """The one stdio server an HTTP guard relays message by message for every session, when that is all it serves.

    Legacy SSE connections are its sessions too, and ``--stateless`` requests are relayed each on its own.
    """
    servers = plan.config.servers
    settings = plan.settings
    if settings.transport not in ("http", "sse") or len(servers) != 1:
        return None
    spec = servers[0]
    return spec if isinstance(spec, StdioServer) else None
