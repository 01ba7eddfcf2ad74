"""The aggregating proxy: one downstream session relayed through the SDK's session layer.

Used where the message relay cannot serve: several upstreams under one name, an HTTP
upstream behind a stdio guard, an HTTP guard in front of shared stdio servers. The SDK owns
the protocol here (both eras, initialization, cancellation, progress plumbing); this module
decides where each request goes, and hands every ``tools/call`` to the same judge the
message relay uses.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.core import replies
from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.proxy.relay.aggregate import Aggregate, for_era
from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.lifecycle import Refused, begin, failure, timed_out
from mcp_loop_guard.proxy.relay.merged import MergedLists
from mcp_loop_guard.proxy.relay.sdk_server import SessionDownstream, SessionServer, client_identity, strip_envelope
from mcp_loop_guard.proxy.relay.stopping import Stopping
from mcp_loop_guard.proxy.upstream.links import Link
from mcp_loop_guard.proxy.upstream.session import UpstreamGoneError
from mcp_loop_guard.proxy.wire.messages import GUARD_FAULT, Message
from mcp_loop_guard.trace_context import CARRIER_KEYS

logger = logging.getLogger(__name__)


JudgeOf = Callable[[Context], Awaitable[Judge]]
"""The judge of the agent a request belongs to (the session's own, or a keyed agent's)."""
AbortHook = Callable[[Context, Verdict], None]
"""Called once an aborting refusal is decided; the transport ends the session after it went out."""


class GuardedProxy:
    """Relays one downstream session to its upstreams, judging every tool call."""

    def __init__(
        self,
        links: Sequence[Link],
        downstream: SessionDownstream,
        judge_of: JudgeOf,
        on_abort: AbortHook,
        *,
        stopping: Stopping,
        on_dropped: Callable[[str, str], None] | None = None,
        on_listed: Callable[[str, list[str]], None] | None = None,
        owners: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """``stopping``: the guard's (its calls in flight are answered when it stops); ``on_dropped(server, tool)``:
        a colliding tool was left out of a list; ``on_listed(server, names)``: a server listed these tools (both
        for metrics)."""
        self.links = {link.name: link for link in links}
        self.single = links[0] if len(links) == 1 else None
        self.downstream = downstream
        self.judge_of = judge_of
        self.on_abort = on_abort
        self.stopping = stopping
        lists = MergedLists(self.links, self.relay, on_dropped=on_dropped, on_listed=on_listed, owners=owners)
        self.aggregate = Aggregate(lists)
        self.server = SessionServer(self)
        self._connected = False
        self._client: tuple[types.Implementation, types.ClientCapabilities] | None = None

    async def add_link(self, link: Link) -> None:
        """A server added by a config reload: reachable from now on, connected as this session's client."""
        self.links[link.name] = link
        self.single = link if len(self.links) == 1 else None
        self.aggregate.relinked()
        if self._client is not None:
            try:
                await link.connect(*self._client)
            except UpstreamGoneError as exc:
                logger.warning("upstream %r is not available: %s", link.name, exc)

    def drop_link(self, name: str) -> Link | None:
        """A server removed by a config reload: no longer routed to; the caller closes the link."""
        link = self.links.pop(name, None)
        self.single = next(iter(self.links.values())) if len(self.links) == 1 else None
        self.aggregate.relinked()
        return link

    async def relay(self, ctx: Context, server: str, method: str, params: BaseModel | None) -> dict[str, Any]:
        """Send one request to one upstream on behalf of the client, progress included.

        With a call timeout, every progress notification from the upstream restarts the
        clock; when it runs out the request is cancelled upstream (leaving the scope sends
        ``notifications/cancelled``) and the client is told why.

        Raises:
            MCPError: the upstream's own error, or the guard's (marked with GUARD_FAULT data).
        """
        link = self.links[server]
        timeout = link.call_timeout
        wants_progress = ctx.meta is not None and ctx.meta.get("progress_token") is not None
        scope = anyio.CancelScope(deadline=anyio.current_time() + timeout if timeout else float("inf"))
        session = ctx.session
        on_progress = None
        if wants_progress or timeout:

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                if timeout:
                    scope.deadline = anyio.current_time() + timeout
                if wants_progress:
                    await session.report_progress(progress, total, message)

        if params is not None:
            params = strip_envelope(params)
        label = f"`{server}`"
        self.stopping.add(scope)
        try:
            with scope:
                async with link.using() as upstream:
                    label = upstream.label
                    result = await upstream.request(method, params, on_progress)
        except UpstreamGoneError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc), data={GUARD_FAULT: "gone"}) from exc
        finally:
            self.stopping.discard(scope)
        if self.stopping.flag and scope.cancelled_caught:
            raise MCPError(types.INTERNAL_ERROR, replies.SHUTTING_DOWN, data={GUARD_FAULT: "stopping"})
        if scope.cancelled_caught:
            assert timeout is not None
            raise MCPError(types.INTERNAL_ERROR, timed_out(label, method, timeout), data={GUARD_FAULT: "timeout"})
        if method == "tools/list" and getattr(params, "cursor", None) is None:
            link.note_tools(result.get("tools"))
        return for_era(ctx, result)

    async def connect_first(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """Middleware: connect upstreams on the first request, as the client it came from."""
        self.downstream.session = ctx.session
        if ctx.request_id is not None and ctx.method != "initialize":
            self.downstream.in_flight[ctx.request_id] = ctx.session
            try:
                return await self._connected_call(ctx, call_next)
            finally:
                self.downstream.in_flight.pop(ctx.request_id, None)
        return await self._connected_call(ctx, call_next)

    async def _connected_call(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        if not self._connected:
            if ctx.method == "ping":
                return {}  # nothing to connect for: a ping is answered here
            client_info, capabilities = client_identity(ctx)
            self._client = (client_info, capabilities)
            for link in list(self.links.values()):
                try:
                    await link.connect(client_info, capabilities)
                except UpstreamGoneError as exc:
                    if self.single is not None:
                        raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
                    logger.warning("upstream %r is not available: %s", link.name, exc)
            self._connected = True
            self.server.adopt_identity()
        return await call_next(ctx)

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        """The guarded method, through the one lifecycle (:mod:`.lifecycle`); the SDK carries it.

        Raises:
            MCPError: an unknown tool, or the upstream's own JSON-RPC error.
        """
        route = await self.aggregate.tool_route(ctx, params.name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        server, upstream_name = route
        judge = await self.judge_of(ctx)
        body = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        message = Message({"jsonrpc": "2.0", "id": ctx.request_id or 0, "method": "tools/call", "params": body})

        async def annotations(name: str, given: object) -> dict[str, Any] | None:
            return await self.aggregate.annotations(ctx, server, upstream_name)

        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        decision = await begin(
            judge, server, message, tool=upstream_name, annotations=annotations, carried=_headers(ctx), modern=modern
        )
        if isinstance(decision, Refused):
            if decision.abort and judge.aborted is not None:
                self.on_abort(ctx, judge.aborted)
            answer = decision.answer.body
            if "error" in answer:
                raise MCPError(answer["error"]["code"], answer["error"]["message"])
            return cast(dict[str, Any], answer["result"])
        sent = message.body["params"]
        forwarded = params.model_copy(update={"name": upstream_name, "meta": sent.get("_meta") or None})
        try:
            with decision.pending.span.current() if decision.pending.span is not None else nullcontext():
                result = await self.relay(ctx, server, "tools/call", forwarded)
        except MCPError as exc:
            if isinstance(exc.error.data, dict) and GUARD_FAULT in exc.error.data:
                # A failure the guard saw (upstream gone, timeout, oversized or malformed answer):
                # the model gets a tool error it can act on, not a protocol error.
                await decision.dropped()
                logger.warning("tools/call %r failed: %s", params.name, exc.error.message)
                fault = exc.error.data[GUARD_FAULT]
                return cast(
                    dict[str, Any], failure(0, "tools/call", exc.error.message, fault, modern=modern).body["result"]
                )
            await decision.answered(Message({"error": exc.error.model_dump(mode="json", exclude_none=True)}))
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await decision.dropped()
            raise
        answered = await decision.answered(Message({"result": result}))
        if answered is None:
            return cast(
                dict[str, Any],
                failure(0, "tools/call", replies.WRONG_SHAPE_RESULT, "invalid-result", modern=modern).body["result"],
            )
        return for_era(ctx, answered.body["result"])


def _headers(ctx: Context) -> dict[str, str] | None:
    """The trace context the HTTP request carried in its headers, for a call whose ``_meta`` has none."""
    headers = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    return {key: value for key in CARRIER_KEYS if (value := headers.get(key)) is not None} or None
