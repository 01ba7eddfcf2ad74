"""The SDK path: requests the message relays cannot pass on as they are, translated between protocol eras.

The SDK owns the protocol on the client's side (both eras, initialization, cancellation,
progress plumbing); every request goes on to the one channel behind it (a server's, or a
router of several: :mod:`.sdk_channel`), and every ``tools/call`` goes through the one
lifecycle (:mod:`.lifecycle`) with the same judge the message relays use.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
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
from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.lifecycle import Refused, begin, failure, timed_out
from mcp_loop_guard.proxy.relay.sdk_channel import ChannelLink
from mcp_loop_guard.proxy.relay.sdk_server import SessionDownstream, SessionServer, strip_envelope
from mcp_loop_guard.proxy.relay.stopping import Stopping
from mcp_loop_guard.proxy.upstream.session import UpstreamGoneError
from mcp_loop_guard.proxy.wire.messages import GUARD_FAULT, Message
from mcp_loop_guard.trace_context import CARRIER_KEYS

logger = logging.getLogger(__name__)


JudgeOf = Callable[[Context], Awaitable[Judge]]
"""The judge of the agent a request belongs to (the session's own, or a keyed agent's)."""
AbortHook = Callable[[Context, Verdict], None]
"""Called once an aborting refusal is decided; the transport ends the session after it went out."""
Handler = Callable[[Context, Any], Awaitable[dict[str, Any]]]


def for_era(ctx: Context, result: dict[str, Any]) -> dict[str, Any]:
    """Every 2026-07-28 result names its type; handshake-era upstreams (and the guard's own results) don't."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
        result["resultType"] = "complete"
    return result


class GuardedProxy:
    """Relays the SDK path's requests to its one channel (a server's, or a router of several), judging tool calls."""

    def __init__(
        self,
        link: ChannelLink,
        downstream: SessionDownstream,
        judge_of: JudgeOf,
        on_abort: AbortHook,
        *,
        stopping: Stopping,
        on_listed: Callable[[str, list[str]], None] | None = None,
    ) -> None:
        """``stopping``: the guard's (its calls in flight are answered when it stops); ``on_listed(server, names)``:
        one server listed these tools (for metrics; a router tells its own)."""
        self.link = link
        self.downstream = downstream
        self.judge_of = judge_of
        self.on_abort = on_abort
        self.stopping = stopping
        self.on_listed = on_listed
        self.server = SessionServer(self)
        self._connected = False

    def handler(self, method: str) -> Handler:
        """The handler of one relayed method (tools/call is :meth:`call_tool`): straight to the channel."""

        async def straight(ctx: Context, params: BaseModel | None) -> dict[str, Any]:
            result = await self.relay(ctx, None, method, params)
            if method == "tools/list":
                tools = result.get("tools") or []
                self.link.tools.seen(tools, first_page=getattr(params, "cursor", None) is None)
                if self.on_listed is not None and self.link.router is None:
                    self.on_listed(self.link.name, [t["name"] for t in tools if isinstance(t, dict) and "name" in t])
            return for_era(ctx, result)

        return straight

    async def relay(self, ctx: Context, server: str | None, method: str, params: BaseModel | None) -> dict[str, Any]:
        """Send one request upstream on behalf of the client (to ``server`` of several), progress included.

        With a call timeout, every progress notification from the upstream restarts the
        clock; when it runs out the request is cancelled upstream (leaving the scope sends
        ``notifications/cancelled``) and the client is told why.

        Raises:
            MCPError: the upstream's own error, or the guard's (marked with GUARD_FAULT data).
        """
        timeout = self.link.timeout_for(server)
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
        self.stopping.add(scope)
        try:
            with scope:
                async with self.link.using() as upstream:
                    result = await upstream.request(method, params, on_progress)
        except UpstreamGoneError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc), data={GUARD_FAULT: "gone"}) from exc
        finally:
            self.stopping.discard(scope)
        if self.stopping.flag and scope.cancelled_caught:
            raise MCPError(types.INTERNAL_ERROR, replies.SHUTTING_DOWN, data={GUARD_FAULT: "stopping"})
        if scope.cancelled_caught:
            assert timeout is not None
            label = self.link.label_of(server)
            raise MCPError(types.INTERNAL_ERROR, timed_out(label, method, timeout), data={GUARD_FAULT: "timeout"})
        return result

    async def connect_first(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """Middleware: connect upstream on the first request."""
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
            try:
                async with self.link.using():
                    pass
            except UpstreamGoneError as exc:
                raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
            self._connected = True
            self.server.adopt_identity()
        return await call_next(ctx)

    async def roots_changed(self) -> None:
        """Tell the servers the client's roots changed."""
        upstream = self.link.upstream
        if upstream is not None and upstream.initialize_result is not None:
            try:
                await upstream.notify(types.RootsListChangedNotification())
            except (UpstreamGoneError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                logger.debug("roots/list_changed to %s failed: %s", self.link.channel.label, exc)

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        """The guarded method, through the one lifecycle (:mod:`.lifecycle`); the SDK carries it.

        Raises:
            MCPError: an unknown tool, or the upstream's own JSON-RPC error.
        """
        body = params.model_dump(mode="json", by_alias=True, exclude_none=True)
        route = await self.link.route(params.name, body.get("_meta"))
        if route is None:
            raise MCPError(types.INVALID_PARAMS, replies.unknown("tool", params.name))
        server, upstream_name = route
        judge = await self.judge_of(ctx)
        message = Message({"jsonrpc": "2.0", "id": ctx.request_id or 0, "method": "tools/call", "params": body})

        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        decision = await begin(
            judge,
            server,
            message,
            tool=upstream_name,
            annotations=self.link.tools.annotations,
            carried=_headers(ctx),
            modern=modern,
        )
        if isinstance(decision, Refused):
            if decision.abort and judge.aborted is not None:
                self.on_abort(ctx, judge.aborted)
            answer = decision.answer.body
            if "error" in answer:
                raise MCPError(answer["error"]["code"], answer["error"]["message"])
            return cast(dict[str, Any], answer["result"])
        sent = message.body["params"]
        forwarded = params.model_copy(update={"meta": sent.get("_meta") or None})
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
