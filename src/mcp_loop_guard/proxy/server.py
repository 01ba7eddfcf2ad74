"""The downstream face of the proxy: an SDK server whose every handler relays upstream.

The SDK owns the protocol (both eras, initialization, cancellation, progress
plumbing); this module only decides where each message goes. The upstream is
connected lazily, on the client's first request, so that it sees the client's
own identity and capabilities.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.core.detector import LoopDetector
from mcp_loop_guard.core.model import Action, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy import guard
from mcp_loop_guard.proxy.upstream import REQUESTS, Upstream, UpstreamGoneError

logger = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
AbortHook = Callable[[types.RequestId | None, Verdict], None]

_RESERVED_META_PREFIX = "io.modelcontextprotocol/"
_P = TypeVar("_P", bound=BaseModel)


class _RawResult:
    """A ``result_type`` for ServerSession.send_request that keeps the raw dict."""

    @staticmethod
    def model_validate(obj: Any, by_name: bool = False) -> Any:
        return obj


class SessionDownstream:
    """Server-to-client traffic for one downstream connection."""

    def __init__(self) -> None:
        self.session: ServerSession | None = None

    async def request(self, request: BaseModel) -> dict[str, Any]:
        if self.session is None:
            raise MCPError(types.INVALID_REQUEST, "no client is connected")
        result_type: Any = _RawResult
        result = await self.session.send_request(cast(types.ServerRequest, request), result_type)
        return cast(dict[str, Any], result)

    async def notify(self, notification: types.ServerNotification) -> None:
        if self.session is not None:
            await self.session.send_notification(notification)


def _client_identity(ctx: Context) -> tuple[types.Implementation, types.ClientCapabilities]:
    """The client's name and capabilities, from ``initialize`` or the 2026-07-28 envelope."""
    params: Mapping[str, Any] = ctx.params or {}
    if ctx.method == "initialize":
        info, caps = params.get("clientInfo"), params.get("capabilities")
    else:
        meta = params.get("_meta") or {}
        info, caps = meta.get(types.CLIENT_INFO_META_KEY), meta.get(types.CLIENT_CAPABILITIES_META_KEY)
    client_info = types.Implementation.model_validate(info or {"name": "unknown", "version": ""}, by_name=False)
    capabilities = types.ClientCapabilities.model_validate(caps or {}, by_name=False)
    return client_info, capabilities


def _strip_envelope(params: _P) -> _P:
    """Drop the 2026-07-28 per-request keys: the upstream connection has its own era."""
    meta = getattr(params, "meta", None)
    if not meta or not any(key.startswith(_RESERVED_META_PREFIX) for key in meta):
        return params
    kept = {k: v for k, v in meta.items() if not k.startswith(_RESERVED_META_PREFIX)}
    return params.model_copy(update={"meta": kept or None})


def _for_era(ctx: Context, result: dict[str, Any]) -> dict[str, Any]:
    """Every 2026-07-28 result names its type; handshake-era upstreams (and the guard's own results) don't."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
        result["resultType"] = "complete"
    return result


class GuardedProxy:
    """Relays one downstream connection to one upstream, judging every tool call."""

    def __init__(
        self,
        upstream: Upstream,
        detector: LoopDetector,
        policy: Policy,
        on_abort: AbortHook,
    ) -> None:
        self.upstream = upstream
        self.detector = detector
        self.policy = policy
        self.on_abort = on_abort
        self.downstream = SessionDownstream()
        upstream.downstream = self.downstream
        self.server = _MirrorServer(self)

    # Plumbing shared by every relayed request.

    async def relay(self, ctx: Context, method: str, params: BaseModel | None) -> dict[str, Any]:
        on_progress = None
        if ctx.meta is not None and ctx.meta.get("progress_token") is not None:
            session = ctx.session

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                await session.report_progress(progress, total, message)

        if params is not None:
            params = _strip_envelope(params)
        try:
            result = await self.upstream.request(method, params, on_progress)
        except UpstreamGoneError as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
        return _for_era(ctx, result)

    async def connect_first(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """Middleware: connect upstream on the first request, as the client it came from."""
        if self.upstream.initialize_result is None and ctx.method != "ping":
            client_info, capabilities = _client_identity(ctx)
            try:
                await self.upstream.connect(client_info, capabilities)
            except UpstreamGoneError as exc:
                raise MCPError(types.INTERNAL_ERROR, str(exc)) from exc
            self.server.adopt_identity()
        self.downstream.session = ctx.session
        return await call_next(ctx)

    # The guarded method.

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        ticket, verdict = self.detector.begin(params.name, params.arguments, anyio.current_time())
        if verdict.action >= Action.BLOCK:
            logger.warning(
                "%s tool %r: %d identical calls, refusal %d in this window",
                verdict.action.name.lower(),
                verdict.tool,
                verdict.streak,
                verdict.blocks,
            )
            if verdict.action is Action.ABORT:
                self.on_abort(ctx.request_id, verdict)
            return _for_era(ctx, guard.refused(verdict, self.policy))
        try:
            result = await self.relay(ctx, "tools/call", params)
        except MCPError as exc:
            if ticket is not None:
                self.detector.abandon(ticket, anyio.current_time())
            if self.upstream.gone_reason() is not None:
                return _for_era(ctx, guard.failed(exc.error.message))
            raise
        except BaseException:
            if ticket is not None:
                self.detector.abandon(ticket, anyio.current_time())
            raise
        if ticket is None:
            return result
        if result.get("resultType") == "input_required":
            # Not an answer yet: the client will retry with the input, judge that one.
            self.detector.abandon(ticket, anyio.current_time())
            return result
        verdict = self.detector.finish(ticket, result, anyio.current_time())
        if verdict.action is Action.WARN:
            logger.info("warn tool %r: %d identical calls with unchanged results", verdict.tool, verdict.streak)
            return guard.warned(result, verdict, self.policy)
        return result


class _MirrorServer(Server[Any]):
    """An SDK server that presents the upstream's identity and capabilities as its own."""

    def __init__(self, proxy: GuardedProxy) -> None:
        # A relayed list may change at any moment: tell 2026-07-28 clients not to cache it.
        super().__init__("mcp-loop-guard", cache_hints=dict.fromkeys(cast(Any, CACHEABLE_METHODS), CacheHint()))
        self.proxy = proxy
        self.middleware.append(proxy.connect_first)
        for method in REQUESTS:
            params_type = _params_type(method)
            self.add_request_handler(method, params_type, self._relay_handler(method))
        self.add_request_handler("tools/call", types.CallToolRequestParams, proxy.call_tool)
        self.add_request_handler("ping", types.RequestParams, self._ping)
        self.add_request_handler("server/discover", types.RequestParams, self._discover)
        self.add_notification_handler("notifications/roots/list_changed", types.NotificationParams, self._roots)

    def _relay_handler(self, method: str) -> Any:
        async def handler(ctx: Context, params: BaseModel) -> dict[str, Any]:
            return await self.proxy.relay(ctx, method, params)

        return handler

    async def _ping(self, ctx: Context, params: types.RequestParams) -> dict[str, Any]:
        if self.proxy.upstream.initialize_result is None:
            return {}
        return await self.proxy.relay(ctx, "ping", params)

    async def _roots(self, ctx: Context, params: types.NotificationParams) -> None:
        await self.proxy.upstream.notify(types.RootsListChangedNotification())

    def _upstream_init(self) -> types.InitializeResult:
        result = self.proxy.upstream.initialize_result
        if result is None:  # pragma: no cover - the middleware connects before any handler runs
            raise MCPError(types.INTERNAL_ERROR, "upstream is not connected")
        return result

    async def _discover(self, ctx: Context, params: types.RequestParams) -> types.DiscoverResult:
        init = self._upstream_init()
        # 2026-07-28 delivers change notifications only on subscriptions/listen, which is not relayed.
        caps = _relayable(init.capabilities)
        for name in ("tools", "prompts"):
            cap = getattr(caps, name)
            if cap is not None:
                cap.list_changed = False
        if caps.resources is not None:
            caps.resources.list_changed = False
            caps.resources.subscribe = False
        caps.logging = None
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS), capabilities=caps, instructions=init.instructions
        )

    def adopt_identity(self) -> None:
        """Take the upstream's serverInfo, so 2026-07-28 results are stamped with it."""
        info = self._upstream_init().server_info
        self.name, self.version, self.title = info.name, info.version, info.title
        self.description, self.website_url, self.icons = info.description, info.website_url, info.icons
        self.instructions = self._upstream_init().instructions
        self.__dict__.pop("_server_info_stamp_source", None)

    def create_initialization_options(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        init = self._upstream_init()
        info = init.server_info
        return InitializationOptions(
            server_name=info.name,
            server_version=info.version,
            title=info.title,
            description=info.description,
            capabilities=_relayable(init.capabilities),
            instructions=init.instructions,
            website_url=info.website_url,
            icons=info.icons,
        )


def _relayable(capabilities: types.ServerCapabilities) -> types.ServerCapabilities:
    """The upstream's capabilities minus the task methods, which the proxy does not relay."""
    return capabilities.model_copy(update={"tasks": None}, deep=True)


def _params_type(method: str) -> type[BaseModel]:
    model = REQUESTS[method]
    annotation = model.model_fields["params"].annotation
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return types.RequestParams
