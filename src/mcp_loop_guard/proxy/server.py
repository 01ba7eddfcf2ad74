"""The downstream face of the proxy: one SDK server per downstream session.

The SDK owns the protocol (both eras, initialization, cancellation, progress
plumbing); this module only decides where each message goes. With one upstream
the session is a mirror of it (identity, capabilities, names); with several it
is an aggregate under the guard's own name (see :mod:`catalog`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.core.detector import LoopDetector
from mcp_loop_guard.core.model import Action, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy import guard
from mcp_loop_guard.proxy.aggregate import Aggregate, for_era
from mcp_loop_guard.proxy.jsonlines import GUARD_FAULT
from mcp_loop_guard.proxy.links import Link
from mcp_loop_guard.proxy.pool import PROXY_INFO
from mcp_loop_guard.proxy.upstream.session import REQUESTS, UpstreamGoneError

logger = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
AbortHook = Callable[[types.RequestId | None, Verdict], None]
CallObserver = Callable[[str, str, Action, float], None]
"""(server, tool, action, seconds): told about every tools/call, for metrics."""

_RESERVED_META_PREFIX = "io.modelcontextprotocol/"
_P = TypeVar("_P", bound=BaseModel)


class _RawResult:
    """A ``result_type`` for ServerSession.send_request that keeps the raw dict."""

    @staticmethod
    def model_validate(obj: Any, by_name: bool = False) -> Any:
        return obj


class SessionDownstream:
    """Server-to-client traffic for one downstream session.

    A request from the upstream (sampling, elicitation, roots) rides on the stream
    of a client request still in flight when there is one, which is where an HTTP
    client listens for it; otherwise on the session's own channel.
    """

    def __init__(self) -> None:
        self.session: ServerSession | None = None
        self.in_flight: dict[types.RequestId, ServerSession] = {}

    async def request(self, request: BaseModel) -> dict[str, Any]:
        result_type: Any = _RawResult
        server_request = cast(types.ServerRequest, request)
        if self.in_flight:
            request_id, session = next(reversed(self.in_flight.items()))
            metadata = ServerMessageMetadata(related_request_id=request_id)
            result = await session.send_request(server_request, result_type, metadata=metadata)
        elif self.session is not None:
            result = await self.session.send_request(server_request, result_type)
        else:
            raise MCPError(types.INVALID_REQUEST, "no client is connected")
        return cast(dict[str, Any], result)

    async def notify(self, notification: types.ServerNotification) -> None:
        if self.session is not None:
            await self.session.send_notification(notification)


def _client_identity(ctx: Context) -> tuple[types.Implementation, types.ClientCapabilities]:
    """The client's name and capabilities, from ``initialize``, the session, or the 2026-07-28 envelope."""
    params: Mapping[str, Any] = ctx.params or {}
    if ctx.method == "initialize":
        info, caps = params.get("clientInfo"), params.get("capabilities")
    elif ctx.session.client_params is not None:
        return ctx.session.client_params.client_info, ctx.session.client_params.capabilities
    else:
        meta = params.get("_meta") or {}
        info, caps = meta.get(types.CLIENT_INFO_META_KEY), meta.get(types.CLIENT_CAPABILITIES_META_KEY)
    client_info = types.Implementation.model_validate(info or {"name": "unknown", "version": ""}, by_name=False)
    capabilities = types.ClientCapabilities.model_validate(caps or {}, by_name=False)
    return client_info, capabilities


def strip_envelope(params: _P) -> _P:
    """Drop the 2026-07-28 per-request keys: the upstream connection has its own era."""
    meta = getattr(params, "meta", None)
    if not meta or not any(key.startswith(_RESERVED_META_PREFIX) for key in meta):
        return params
    kept = {k: v for k, v in meta.items() if not k.startswith(_RESERVED_META_PREFIX)}
    return params.model_copy(update={"meta": kept or None})


def _clip(value: object, limit: int = 2000) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def relayable(capabilities: types.ServerCapabilities) -> types.ServerCapabilities:
    """Capabilities minus the task methods, which the proxy does not relay."""
    return capabilities.model_copy(update={"tasks": None}, deep=True)


class GuardedProxy:
    """Relays one downstream session to its upstreams, judging every tool call."""

    def __init__(  # noqa: PLR0917 - one positional per collaborator, all required
        self,
        links: Sequence[Link],
        detector: LoopDetector,
        policy: Policy,
        on_abort: AbortHook,
        downstream: SessionDownstream,
        observe: CallObserver | None = None,
    ) -> None:
        self.links = {link.name: link for link in links}
        self.single = links[0] if len(links) == 1 else None
        self.detector = detector
        self.policy = policy
        self.on_abort = on_abort
        self.observe = observe
        self.downstream = downstream
        self.log_contents = False
        """Log arguments and results: unsafe, for debugging only (LOOP_GUARD_LOG_CONTENTS)."""
        self.aggregate = Aggregate(self)
        self.server = _SessionServer(self)
        self._connected = False

    # Plumbing shared by every relayed request.

    async def relay(self, ctx: Context, server: str, method: str, params: BaseModel | None) -> dict[str, Any]:
        """Send one request to one upstream on behalf of the client, progress included.

        With a call timeout, every progress notification from the upstream restarts the
        clock; when it runs out the request is cancelled upstream (leaving the scope sends
        ``notifications/cancelled``) and the client is told why.
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
        label = repr(server)
        try:
            with scope:
                async with link.using() as upstream:
                    label = upstream.label
                    result = await upstream.request(method, params, on_progress)
        except UpstreamGoneError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc), data={GUARD_FAULT: "gone"}) from exc
        if scope.cancelled_caught:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"upstream {label} sent no answer or progress for {method} within {timeout:g}s "
                "(call timeout); the request was cancelled",
                data={GUARD_FAULT: "timeout"},
            )
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
        if not self._connected and ctx.method != "ping":
            client_info, capabilities = _client_identity(ctx)
            for link in self.links.values():
                try:
                    await link.connect(client_info, capabilities)
                except UpstreamGoneError as exc:
                    if self.single is not None:
                        raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
                    logger.warning("upstream %r is not available: %s", link.name, exc)
            self._connected = True
            self.server.adopt_identity()
        return await call_next(ctx)

    # The guarded method.

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        started = anyio.current_time()
        route = await self.aggregate.tool_route(params.name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        server, upstream_name = route
        ticket, verdict = self.detector.begin(params.name, params.arguments, started)
        if verdict.action >= Action.BLOCK:
            return self._refuse(ctx, server, verdict, started)
        forwarded = params if upstream_name == params.name else params.model_copy(update={"name": upstream_name})
        if self.log_contents:
            logger.info("call %r arguments (LOOP_GUARD_LOG_CONTENTS): %s", params.name, _clip(params.arguments))
        try:
            result = await self.relay(ctx, server, "tools/call", forwarded)
        except BaseException as exc:
            if ticket is not None:
                self.detector.abandon(ticket, anyio.current_time())
            if not isinstance(exc, MCPError):
                raise
            self._observe(server, params.name, Action.ALLOW, started)
            if not (isinstance(exc.error.data, dict) and GUARD_FAULT in exc.error.data):
                raise
            # A failure the guard saw (upstream gone, timeout, oversized or malformed answer):
            # the model gets a tool error it can act on, not a protocol error.
            logger.warning("tools/call %r failed: %s", params.name, exc.error.message)
            return for_era(ctx, guard.failed(exc.error.message))
        if ticket is None or result.get("resultType") == "input_required":
            # Not judged: an ignored tool, or an interim result the client will complete and retry.
            if ticket is not None:
                self.detector.abandon(ticket, anyio.current_time())
            self._observe(server, params.name, Action.ALLOW, started)
            return result
        if self.log_contents:
            logger.info("result of %r (LOOP_GUARD_LOG_CONTENTS): %s", params.name, _clip(result.get("content")))
        seen = guard.without_notes(result)
        verdict = self.detector.finish(ticket, seen, anyio.current_time())
        self._observe(server, params.name, verdict.action, started)
        if verdict.action is Action.WARN:
            logger.info("warn tool %r: %d identical calls with unchanged results", verdict.tool, verdict.streak)
            return guard.warned(seen, verdict, self.policy)  # one note, the nearest guard's
        return result

    def _refuse(self, ctx: Context, server: str, verdict: Verdict, started: float) -> dict[str, Any]:
        action = verdict.action.name.lower()
        logger.warning(
            "%s tool %r: identical call #%d, refusal %d in this window",
            action,
            verdict.tool,
            verdict.streak,
            verdict.blocks,
        )
        self._observe(server, verdict.tool, verdict.action, started)
        if verdict.action is Action.ABORT:
            self.on_abort(ctx.request_id, verdict)
        return for_era(ctx, guard.refused(verdict, self.policy))

    def _observe(self, server: str, tool: str, action: Action, started: float) -> None:
        if self.observe is not None:
            self.observe(server, tool, action, anyio.current_time() - started)


class _SessionServer(Server[Any]):
    """An SDK server that presents the upstream's identity (or the guard's, for several) as its own."""

    def __init__(self, proxy: GuardedProxy) -> None:
        # A relayed list may change at any moment: tell 2026-07-28 clients not to cache it.
        super().__init__(PROXY_INFO.name, cache_hints=dict.fromkeys(cast(Any, CACHEABLE_METHODS), CacheHint()))
        self.proxy = proxy
        # Replaces the SDK's default OpenTelemetry middleware: four spans per relayed call cost
        # about 3% of the guard's CPU with no tracer installed, on every call of every agent.
        self.middleware = [proxy.connect_first]
        aggregate = proxy.aggregate
        for method in REQUESTS:
            self.add_request_handler(method, _params_type(method), aggregate.handler(method))
        self.add_request_handler("tools/call", types.CallToolRequestParams, proxy.call_tool)
        self.add_request_handler("server/discover", types.RequestParams, self._discover)
        self.add_notification_handler("notifications/roots/list_changed", types.NotificationParams, self._roots)

    async def _roots(self, ctx: Context, params: types.NotificationParams) -> None:
        await self.proxy.aggregate.roots_changed()

    def capabilities(self) -> types.ServerCapabilities:
        """What the client is told the server can do."""
        single = self.proxy.single
        if single is not None and single.identity is not None:
            return relayable(single.identity.capabilities)
        return self.proxy.aggregate.capabilities()

    async def _discover(self, ctx: Context, params: types.RequestParams) -> types.DiscoverResult:
        caps = self.capabilities()
        # 2026-07-28 delivers change notifications only on subscriptions/listen, which is not relayed.
        for cap in (caps.tools, caps.prompts):
            if cap is not None:
                cap.list_changed = False
        if caps.resources is not None:
            caps.resources.list_changed = False
            caps.resources.subscribe = False
        caps.logging = None
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS), capabilities=caps, instructions=self.instructions
        )

    def adopt_identity(self) -> None:
        """Take the upstream's serverInfo (one upstream), so every era's results carry it."""
        single = self.proxy.single
        if single is None or single.identity is None:
            self.name, self.version = PROXY_INFO.name, PROXY_INFO.version
            self.instructions = self.proxy.aggregate.instructions()
        else:
            info = single.identity.server_info
            self.name, self.version, self.title = info.name, info.version, info.title
            self.description, self.website_url, self.icons = info.description, info.website_url, info.icons
            self.instructions = single.identity.instructions
        self.__dict__.pop("_server_info_stamp_source", None)

    def create_initialization_options(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return InitializationOptions(
            server_name=self.name,
            server_version=self.version,
            title=self.title,
            description=self.description,
            capabilities=self.capabilities(),
            instructions=self.instructions,
            website_url=self.website_url,
            icons=self.icons,
        )


def _params_type(method: str) -> type[BaseModel]:
    model = REQUESTS[method]
    annotation = model.model_fields["params"].annotation
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return types.RequestParams
