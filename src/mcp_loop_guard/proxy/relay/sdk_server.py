"""The SDK server the SDK path presents, and its server-to-client channel.

It mirrors what is behind it (identity, capabilities): one server, or the router of several
under the guard's own name.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.subscriptions import LISTEN_STREAM_METHODS, event_from_wire
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.proxy.compat import forget_server_info
from mcp_loop_guard.proxy.relay.listens import Handler, RelayedListens
from mcp_loop_guard.proxy.relay.sdk_channel import PROXY_INFO, ChannelLink
from mcp_loop_guard.proxy.upstream.session import REQUESTS

Context = ServerRequestContext[Any, Any]
_RESERVED_META_PREFIX = "io.modelcontextprotocol/"
_P = TypeVar("_P", bound=BaseModel)


class _RawResult:
    """A ``result_type`` for ServerSession.send_request that keeps the raw dict."""

    @staticmethod
    def model_validate(obj: Any, by_name: bool = False) -> Any:
        return obj


class SessionDownstream:
    """Server-to-client traffic for one downstream session.

    A request from the upstream (sampling, elicitation, roots) rides on the stream of a
    client request still in flight when there is one, which is where an HTTP client listens
    for it; otherwise on the session's own channel. At most ``limit`` such requests wait for
    the client at once: more are refused to the upstream, so a flood cannot grow the guard.
    """

    def __init__(self, limit: int = 64, *, bus: SubscriptionBus | None = None) -> None:
        """``limit``: upstream requests awaiting the client at once; ``bus``: where the upstreams'
        changes go for 2026-07-28 clients' ``subscriptions/listen`` streams (requests without a session)."""
        self.session: ServerSession | None = None
        self.in_flight: dict[types.RequestId, ServerSession] = {}
        self.limit = limit
        self.waiting = 0
        self.bus = bus

    async def request(self, request: BaseModel) -> dict[str, Any]:
        """Ask the client; the raw result.

        Raises:
            MCPError: no client, too many requests waiting, or the client's own error.
        """
        if self.waiting >= self.limit:
            raise MCPError(-32000, "too many requests are awaiting the client's answer; try again later")
        result_type: Any = _RawResult
        server_request = cast(types.ServerRequest, request)
        self.waiting += 1
        try:
            if self.in_flight:
                request_id, session = next(reversed(self.in_flight.items()))
                metadata = ServerMessageMetadata(related_request_id=request_id)
                result = await session.send_request(server_request, result_type, metadata=metadata)
            elif self.session is not None:
                result = await self.session.send_request(server_request, result_type)
            else:
                raise MCPError(types.INVALID_REQUEST, "no client is connected")
        finally:
            self.waiting -= 1
        return cast(dict[str, Any], result)

    async def notify(self, notification: types.ServerNotification) -> None:
        """Relay an upstream notification to the client (a change also to the listen streams)."""
        if self.bus is not None and notification.method in LISTEN_STREAM_METHODS:
            uri = getattr(notification.params, "uri", None)
            event = event_from_wire(notification.method, {"uri": str(uri)} if uri is not None else None)
            if event is not None:
                await self.bus.publish(event)
        if self.session is not None:
            await self.session.send_notification(notification)


def strip_envelope(params: _P) -> _P:
    """Drop the 2026-07-28 per-request keys: the upstream connection has its own era."""
    meta = getattr(params, "meta", None)
    if not meta or not any(key.startswith(_RESERVED_META_PREFIX) for key in meta):
        return params
    kept = {k: v for k, v in meta.items() if not k.startswith(_RESERVED_META_PREFIX)}
    return params.model_copy(update={"meta": kept or None})


def relayable(capabilities: types.ServerCapabilities) -> types.ServerCapabilities:
    """Capabilities minus the task methods, which the session-level proxy does not relay."""
    return capabilities.model_copy(update={"tasks": None}, deep=True)


class Owner(Protocol):
    """What the server face needs from the proxy behind it."""

    link: ChannelLink
    downstream: SessionDownstream

    def handler(self, method: str) -> Handler:
        """The handler of one relayed method."""
        ...

    async def roots_changed(self) -> None:
        """The client's roots changed."""
        ...

    async def connect_first(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """Middleware connecting the upstreams on the first request."""
        ...

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> dict[str, Any]:
        """The guarded tools/call."""
        ...


class SessionServer(Server[Any]):
    """An SDK server that presents the upstream's identity (or the guard's, for several) as its own."""

    def __init__(self, owner: Owner) -> None:
        """Register every relayed method on ``owner``; tools/call too."""
        # A relayed list may change at any moment: tell 2026-07-28 clients not to cache it.
        super().__init__(PROXY_INFO.name, cache_hints=dict.fromkeys(cast(Any, CACHEABLE_METHODS), CacheHint()))
        self.owner = owner
        # Replaces the SDK's default OpenTelemetry middleware: four spans per relayed call cost
        # about 3% of the guard's CPU with no tracer installed, on every call of every agent.
        self.middleware = [owner.connect_first]
        for method in REQUESTS:
            self.add_request_handler(method, _params_type(method), owner.handler(method))
        self.add_request_handler("tools/call", types.CallToolRequestParams, owner.call_tool)
        self.add_request_handler("server/discover", types.RequestParams, self._discover)
        bus = owner.downstream.bus
        self.listens = bus is not None
        """2026-07-28 clients can open ``subscriptions/listen``: the upstreams' changes reach them."""
        if bus is not None:
            listens = RelayedListens(bus, owner.handler)
            self.add_request_handler("subscriptions/listen", types.SubscriptionsListenRequestParams, listens)
        self.add_notification_handler("notifications/roots/list_changed", types.NotificationParams, self._roots)

    async def _roots(self, ctx: Context, params: types.NotificationParams) -> None:
        await self.owner.roots_changed()

    def capabilities(self) -> types.ServerCapabilities:
        """What the client is told the server can do."""
        identity = self.owner.link.identity
        return relayable(identity.capabilities) if identity is not None else types.ServerCapabilities()

    async def _discover(self, ctx: Context, params: types.RequestParams) -> types.DiscoverResult:
        caps = self.capabilities()
        # 2026-07-28 delivers changes only on subscriptions/listen: the lists' changes and the
        # resources a stream names, when this server serves it; log messages are not relayed there.
        for cap in (caps.tools, caps.prompts, caps.resources):
            if cap is not None and not self.listens:
                cap.list_changed = False
        if caps.resources is not None and not self.listens:
            caps.resources.subscribe = False
        caps.logging = None
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS), capabilities=caps, instructions=self.instructions
        )

    def adopt_identity(self) -> None:
        """Take the upstream's serverInfo (the guard's, for several), so every era's results carry it."""
        identity = self.owner.link.identity
        if identity is None:
            self.name, self.version = PROXY_INFO.name, PROXY_INFO.version
        else:
            info = identity.server_info
            self.name, self.version, self.title = info.name, info.version, info.title
            self.description, self.website_url, self.icons = info.description, info.website_url, info.icons
            self.instructions = identity.instructions
        forget_server_info(self)

    def create_initialization_options(
        self,
        notification_options: Any = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The upstream's identity and capabilities (the SDK's HTTP manager asks with no arguments)."""
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
