"""The SDK path's client session to what is behind it (a server, or a router of several) over a channel.

Requests are relayed as raw result dictionaries: the SDK checks that a result has the shape
its method requires, but nothing re-validates ``structuredContent`` against an output schema
(``ClientSession.call_tool`` would, and may send a hidden ``tools/list``). Server-to-client
traffic (sampling, elicitation, roots, notifications) goes to whatever :class:`Downstream`
the proxy attaches. A connection that breaks, in any way, only ever marks this upstream gone:
it never escapes into the guard.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, TypeAdapter, ValidationError

from mcp_loop_guard.proxy.compat import MirrorSession, ReadStream, WriteStream, connection_closed
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.redaction import without_urls

logger = logging.getLogger(__name__)

_RAW: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])

REQUESTS: dict[str, type[BaseModel]] = {
    "ping": types.PingRequest,
    "tools/list": types.ListToolsRequest,
    "tools/call": types.CallToolRequest,
    "resources/list": types.ListResourcesRequest,
    "resources/templates/list": types.ListResourceTemplatesRequest,
    "resources/read": types.ReadResourceRequest,
    "resources/subscribe": types.SubscribeRequest,
    "resources/unsubscribe": types.UnsubscribeRequest,
    "prompts/list": types.ListPromptsRequest,
    "prompts/get": types.GetPromptRequest,
    "completion/complete": types.CompleteRequest,
    "logging/setLevel": types.SetLevelRequest,
}
"""Client-to-server methods relayed upstream, with the SDK model that carries each."""


class Downstream(Protocol):
    """The client side, as the upstream sees it."""

    async def request(self, request: BaseModel) -> dict[str, Any]:
        """Send a server-to-client request (sampling, elicitation, roots) and return the raw result."""
        ...

    async def notify(self, notification: types.ServerNotification) -> None:
        """Relay a notification from the upstream."""
        ...


class UpstreamGoneError(Exception):
    """The upstream cannot answer: it died or was never reachable."""


class Upstream:
    """A connected (or connectable) upstream server."""

    def __init__(
        self,
        label: str,
        read: ReadStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
        *,
        downstream: Downstream,
        handshake_timeout: float,
    ) -> None:
        """``label`` names the upstream in messages (never an expanded secret); ``downstream`` hears its traffic."""
        self.label = label
        self.downstream = downstream
        self.handshake_timeout = handshake_timeout
        self._gone: str | None = None
        self._unreadable = 0
        self._gone_event = anyio.Event()
        self.session = MirrorSession(
            read,
            write,
            sampling_callback=self.on_sampling,
            elicitation_callback=self.on_elicitation,
            list_roots_callback=self.on_list_roots,
            message_handler=self.on_message,
        )
        self.initialize_result: types.InitializeResult | None = None
        self._connect_lock = anyio.Lock()

    def gone_reason(self) -> str | None:
        """Why the upstream cannot answer any more, or None while it can."""
        return self._gone

    def mark_gone(self, reason: str) -> None:
        """Record that the connection is unusable (a failed health check, a closed stream)."""
        if self._gone is None:
            self._gone = reason
            self._gone_event.set()

    async def wait_gone(self) -> str:
        """Return once the upstream cannot answer any more, with the reason."""
        await self._gone_event.wait()
        return self.gone_reason() or f"upstream {self.label} closed the connection"

    async def connect(self, client_info: types.Implementation, capabilities: types.ClientCapabilities) -> None:
        """Run the handshake once, claiming the downstream client's identity and capabilities.

        Raises:
            UpstreamGoneError: no answer in time, or the connection failed.
        """
        async with self._connect_lock:
            if self.initialize_result is not None:
                return
            self.session.mirror(client_info, capabilities)
            try:
                with anyio.fail_after(self.handshake_timeout):
                    self.initialize_result = await self._guarded(self.session.initialize())
            except TimeoutError:
                reason = f"upstream {self.label} did not answer initialize within {self.handshake_timeout:g}s"
                self.mark_gone(reason)
                raise UpstreamGoneError(reason) from None
            except MCPError as exc:
                self.mark_gone(f"upstream {self.label} refused initialize: {exc.error.message}")
                raise UpstreamGoneError(exc.error.message) from exc
            logger.info(
                "connected to upstream %s (%s %s, protocol %s)",
                self.label,
                self.initialize_result.server_info.name,
                self.initialize_result.server_info.version,
                self.initialize_result.protocol_version,
            )

    async def request(
        self, method: str, params: BaseModel | None, on_progress: ProgressFnT | None = None
    ) -> dict[str, Any]:
        """Relay one request and return the upstream's raw result.

        Raises:
            MCPError: the upstream answered with a JSON-RPC error (any code, -32000 included).
            UpstreamGoneError: the upstream died or closed its connection.
        """
        model = REQUESTS[method]
        request = model(params=params) if params is not None else model()
        result = await self._guarded(
            self.session.send_request(request, _RAW, progress_callback=on_progress)  # type: ignore[arg-type]
        )
        return cast(dict[str, Any], result)

    async def notify(self, notification: types.ClientNotification) -> None:
        """Relay a client notification (roots changed)."""
        if self.initialize_result is not None and self.gone_reason() is None:
            await self.session.send_notification(notification)

    async def _guarded(self, pending: Any) -> Any:
        reason = self.gone_reason()
        if reason is not None:
            pending.close()
            raise UpstreamGoneError(reason)
        try:
            return await pending
        except MCPError as exc:
            if connection_closed(exc.error) or self.gone_reason() is not None:
                reason = self.gone_reason() or f"upstream {self.label} closed the connection"
                self.mark_gone(reason)
                raise UpstreamGoneError(reason) from exc
            raise
        except ValidationError as exc:
            message = f"upstream {self.label} sent a result of the wrong shape for the request"
            raise MCPError(types.INTERNAL_ERROR, message, data={wire.GUARD_FAULT: "invalid-result"}) from exc
        except OSError as exc:
            reason = f"upstream {self.label} is unreachable: {brief(exc)}"
            self.mark_gone(reason)
            raise UpstreamGoneError(reason) from exc

    # Server-to-client traffic, relayed to the attached downstream.

    async def _to_downstream(self, request: BaseModel) -> Any:
        try:
            return await self.downstream.request(request)
        except MCPError as exc:
            return exc.error

    async def on_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        """A sampling request from the upstream, answered by the client."""
        raw = await self._to_downstream(types.CreateMessageRequest(params=params))
        if isinstance(raw, types.ErrorData):
            return raw
        if any(isinstance(c, dict) and c.get("type") in ("tool_use", "tool_result") for c in _as_list(raw)):
            return types.CreateMessageResultWithTools.model_validate(raw, by_name=False)
        return types.CreateMessageResult.model_validate(raw, by_name=False)

    async def on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        """An elicitation request from the upstream, answered by the client."""
        raw = await self._to_downstream(types.ElicitRequest(params=params))
        return raw if isinstance(raw, types.ErrorData) else types.ElicitResult.model_validate(raw, by_name=False)

    async def on_list_roots(self, context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        """A roots request from the upstream, answered by the client."""
        raw = await self._to_downstream(types.ListRootsRequest())
        return raw if isinstance(raw, types.ErrorData) else types.ListRootsResult.model_validate(raw, by_name=False)

    async def on_message(self, message: IncomingMessage) -> None:
        """Notifications go to the client; unreadable ones are logged once."""
        if isinstance(message, Exception):
            self._unreadable += 1
            if self._unreadable == 1:
                logger.warning(
                    "upstream %s sent something unreadable (%s); further ones are not logged",
                    self.label,
                    type(message).__name__,
                )
            return
        if isinstance(message, types.ProgressNotification):
            return  # relayed per request through the progress callback, never twice
        await self.downstream.notify(message)


def _as_list(raw: Mapping[str, Any]) -> Sequence[Any]:
    content = raw.get("content")
    if isinstance(content, list):
        return content
    return [content]


def brief(error: BaseException) -> str:
    """The first line of an error, clipped, without a URL (an HTTP client's error may quote one): a reason's end."""
    text = str(error) or type(error).__name__
    return without_urls(text.splitlines()[0][:300])
