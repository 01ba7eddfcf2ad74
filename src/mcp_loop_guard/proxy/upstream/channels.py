"""One factory for the message relay's upstream: a channel for one server, a router for several.

| Server | Channel |
| --- | --- |
| a command (stdio) | :class:`~.stdio.StdioUpstream`: the child, restarted with backoff, the handshake replayed |
| a streamable HTTP URL | :class:`~.http_lines.HttpLines`: each message POSTed as it came |
| a legacy SSE URL | :class:`~.sse_lines.SseLines`: one event stream in, one POST per message out |
| a share of a child an HTTP guard's sessions share | :class:`~.mux_view.MuxView` (made by that front) |
| several of these | :class:`~.router.Router`, each member one of the above |

The HTTP channels are imported only when a server over HTTP is named: a guard of stdio
servers holds no HTTP client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from mcp_loop_guard.config import HttpServer, ServerSpec
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.upstream.backoff import HANDSHAKE_TIMEOUT
from mcp_loop_guard.proxy.upstream.channel import Channel, Receiver
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.stdio import StdioUpstream

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.upstream.http_lines import HttpLines
    from mcp_loop_guard.proxy.upstream.router import MemberOpener
    from mcp_loop_guard.proxy.upstream.router_lists import Catalog
    from mcp_loop_guard.proxy.upstream.sse_lines import SseLines

__all__ = ["Behind", "Opener", "channel", "opener"]

Opener = Callable[[Receiver], Channel]
"""Makes the relay's upstream, given who receives from it (the relay itself)."""


@dataclass(frozen=True, slots=True)
class Behind:
    """What the SDK path reaches: the server's name, how its channel is made, and its limits."""

    name: str
    reach: Opener
    limits: Limits


def opener(
    servers: Sequence[ServerSpec],
    limits: Limits,
    *,
    first: ChildProcess | None = None,
    member: MemberOpener | None = None,
    catalog: Catalog | None = None,
    usable: Callable[[str], bool] | None = None,
) -> Opener:
    """How the relay of one client reaches ``servers``: one's channel, or a router of several.

    ``first``: the one stdio server's child, started before the event loop. ``member``: how
    a router makes each member (by default a channel of its own, like one server's);
    ``catalog``: the router's names (its owners shared guard-wide by an HTTP guard);
    ``usable(name)``: whether a member is worth asking now (its health probe's word).
    """
    if len(servers) == 1:
        return partial(channel, servers[0], limits=limits, first=first)
    make = member or partial(channel, limits=limits, lenient=True)

    def router(receiver: Receiver) -> Channel:
        from mcp_loop_guard.proxy.upstream.router import Router  # noqa: PLC0415 - a guard of one server needs none
        from mcp_loop_guard.proxy.upstream.router_lists import Catalog  # noqa: PLC0415 - nor this

        catalog_ = catalog or Catalog()
        return Router(servers, receiver, make, catalog=catalog_, call_timeout=limits.call_timeout, usable=usable)

    return router


def channel(
    spec: ServerSpec, receiver: Receiver, *, limits: Limits, first: ChildProcess | None = None, lenient: bool = False
) -> Channel:
    """The channel of one server (see the module's table).

    ``lenient``: a command that cannot start is reported and retried, not fatal (one of several).
    """
    handshake = spec.call_timeout or limits.call_timeout or HANDSHAKE_TIMEOUT
    if isinstance(spec, HttpServer):
        http_lines, sse_lines = _http_classes()
        kind = sse_lines if spec.transport == "sse" else http_lines
        return kind(spec, receiver, max_bytes=limits.max_message_bytes, handshake_timeout=handshake)
    return StdioUpstream(
        spec, receiver, max_bytes=limits.max_message_bytes, first=first, handshake_timeout=handshake, lenient=lenient
    )


def _http_classes() -> tuple[type[HttpLines], type[SseLines]]:
    """Imported once a server over HTTP is named: a guard of stdio servers holds no HTTP client (0.3 MB)."""
    from mcp_loop_guard.proxy.upstream.http_lines import HttpLines  # noqa: PLC0415
    from mcp_loop_guard.proxy.upstream.sse_lines import SseLines  # noqa: PLC0415

    return HttpLines, SseLines
