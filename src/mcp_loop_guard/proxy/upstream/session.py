"""One upstream MCP server reached through the SDK's client session (the aggregating proxy's way).

Requests are relayed as raw result dictionaries: the SDK checks that a result has the shape
its method requires, but nothing re-validates ``structuredContent`` against an output schema
(``ClientSession.call_tool`` would, and may send a hidden ``tools/list``). Server-to-client
traffic (sampling, elicitation, roots, notifications) goes to whatever :class:`Downstream`
the proxy attaches. A connection that breaks, in any way, only ever marks this upstream gone:
it never escapes into the guard.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any, Protocol, cast

import anyio
import anyio.abc
import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.session import ClientRequestContext, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, TypeAdapter, ValidationError

from mcp_loop_guard.config import StdioServer, redact_url
from mcp_loop_guard.proxy.compat import (
    MCP_DEFAULT_SSE_READ_TIMEOUT,
    MCP_DEFAULT_TIMEOUT,
    MirrorSession,
    ReadStream,
    WriteStream,
    connection_closed,
)
from mcp_loop_guard.proxy.upstream.child import ChildProcess, spawn
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized

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

HANDSHAKE_TIMEOUT = 120.0
"""Seconds an upstream may take to answer initialize (``npx`` may download a package first)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to reach an HTTP upstream (TCP and TLS) before it counts as down."""


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
        name: str,
        read: ReadStream[SessionMessage | Exception],
        write: WriteStream[SessionMessage],
        *,
        child: ChildProcess | None = None,
        label: str | None = None,
    ) -> None:
        """``label`` names the upstream in messages (never an expanded secret)."""
        self.name = name
        self.child = child
        self._label = label or name
        self._gone: str | None = None
        self._unreadable = 0
        self.handshake_timeout = HANDSHAKE_TIMEOUT
        self._gone_event = anyio.Event()
        self.session = MirrorSession(
            read,
            write,
            sampling_callback=self.on_sampling,
            elicitation_callback=self.on_elicitation,
            list_roots_callback=self.on_list_roots,
            message_handler=self.on_message,
        )
        self.downstream: Downstream | None = None
        self.initialize_result: types.InitializeResult | None = None
        self._connect_lock = anyio.Lock()

    @property
    def label(self) -> str:
        """How error messages name this upstream."""
        return f"`{self.child.label}`" if self.child is not None else self._label

    def gone_reason(self) -> str | None:
        """Why the upstream cannot answer any more, or None while it can."""
        if self.child is not None and self.child.exited.is_set():
            return f"upstream {self.label} {self.child.describe_exit()}"
        return self._gone

    def mark_gone(self, reason: str) -> None:
        """Record that the connection is unusable (a failed health check, a closed stream)."""
        if self._gone is None:
            self._gone = reason
            self._gone_event.set()

    async def wait_gone(self) -> str:
        """Return once the upstream cannot answer any more, with the reason."""
        async with anyio.create_task_group() as tg:

            async def child_exit() -> None:
                if self.child is not None:
                    await self.child.exited.wait()
                    tg.cancel_scope.cancel()

            async def closed() -> None:
                await self._gone_event.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(child_exit)
            tg.start_soon(closed)
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
                reason = await self._wait_reason()
                self.mark_gone(reason)
                raise UpstreamGoneError(reason) from exc
            raise
        except ValidationError as exc:
            message = f"upstream {self.label} sent a result of the wrong shape for the request"
            raise MCPError(types.INTERNAL_ERROR, message, data={wire.GUARD_FAULT: "invalid-result"}) from exc
        except (httpx2.HTTPError, OSError) as exc:
            reason = f"upstream {self.label} is unreachable: {_short(exc)}"
            self.mark_gone(reason)
            raise UpstreamGoneError(reason) from exc

    async def _wait_reason(self) -> str:
        """The exit status arrives a moment after stdout closes: wait briefly for it."""
        if self.child is not None:
            with anyio.move_on_after(1.0):
                await self.child.exited.wait()
        return self.gone_reason() or f"upstream {self.label} closed the connection"

    # Server-to-client traffic, relayed to the attached downstream.

    async def _to_downstream(self, request: BaseModel) -> Any:
        if self.downstream is None:
            return types.ErrorData(code=types.INVALID_REQUEST, message="no client is connected")
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
        if self.downstream is not None:
            await self.downstream.notify(message)


def _as_list(raw: Mapping[str, Any]) -> Sequence[Any]:
    content = raw.get("content")
    if isinstance(content, list):
        return content
    return [content]


def _short(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:300]


# --- a child process as SDK message streams ----------------------------------------------------


async def _pump_out(
    child: ChildProcess, send: MemoryObjectSendStream[SessionMessage | Exception], max_bytes: int
) -> None:
    """The child's stdout lines as SDK messages; what cannot be one is answered or skipped, never fatal."""
    lines = LineReader(max_bytes)
    junk = 0
    async with send:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            while chunk := await child.from_child.read():
                for line in lines.feed(chunk):
                    message, is_junk = _as_session_message(line, child, max_bytes)
                    junk += is_junk
                    if is_junk and junk == 1:
                        logger.warning(
                            "upstream `%s` wrote a line to stdout that is not JSON-RPC; ignoring it and any later ones",
                            child.label,
                        )
                    if message is not None:
                        await send.send(message)


def _as_session_message(  # noqa: PLR0911 - one return per kind of line
    line: bytes | Oversized, child: ChildProcess, max_bytes: int
) -> tuple[SessionMessage | None, bool]:
    """A line as an SDK message (or the error standing in for it); None with True for junk."""
    if isinstance(line, Oversized):
        logger.warning(
            "upstream `%s` sent a %d-byte message (limit %d); not relayed", child.label, line.size, max_bytes
        )
        if line.request_id is None:
            return None, False
        why = (
            f"the upstream's answer of {line.size} bytes is over the limit of {max_bytes} "
            "(LOOP_GUARD_MAX_MESSAGE_BYTES); it was not relayed"
        )
        return _error_message(line.request_id, why, "too-large"), False
    parsed = wire.parse(line)
    if parsed is None:
        return None, False
    if isinstance(parsed, wire.BadLine):
        if parsed.response_to is None:
            return None, True
        why = "the upstream answered with a response of the wrong shape (its result must be an object)"
        return _error_message(parsed.response_to, why, "invalid-result"), False
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_python(parsed.body, by_name=False)), False
    except ValidationError:
        ident = parsed.id
        if ident is not None and parsed.is_response:
            why = "the upstream answered with a response of the wrong shape"
            return _error_message(ident, why, "invalid-result"), False
        return None, True


def _error_message(request_id: wire.RequestId, message: str, fault: str) -> SessionMessage:
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=message, data={wire.GUARD_FAULT: fault})
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


async def _pump_in(child: ChildProcess, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """SDK messages to the child's stdin, one line each; a dead child's input is drained and dropped."""
    async with receive:
        try:
            async for message in receive:
                await child.to_child.write(
                    message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                )
        except OSError:
            async for _ in receive:
                pass
        finally:
            child.close_stdin()


@asynccontextmanager
async def open_stdio_upstream(spec: StdioServer, *, max_bytes: int) -> AsyncIterator[Upstream]:
    """Start the upstream command; the MCP handshake waits for :meth:`Upstream.connect`.

    Raises:
        UpstreamStartError: the command cannot be started.
    """
    child = spawn([spec.command, *spec.args], env=spec.env, cwd=spec.cwd, display=spec.display)
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.watch)
            tg.start_soon(child.relay_stderr)
            tg.start_soon(_pump_out, child, read_send, max_bytes)
            tg.start_soon(_pump_in, child, write_receive)
            upstream = Upstream(spec.name, read_receive, write_send, child=child)
            try:
                async with upstream.session:
                    yield upstream
            finally:
                write_send.close()
                await child.stop()
                tg.cancel_scope.cancel()
    finally:
        await child.stop(eof_grace=0, term_grace=0.5)


@asynccontextmanager
async def open_http_upstream(
    name: str, url: str, *, transport: str = "http", headers: Mapping[str, str] | None = None
) -> AsyncIterator[Upstream]:
    """Connect to a streamable HTTP or SSE upstream; the handshake waits for :meth:`Upstream.connect`.

    Raises:
        UpstreamGoneError: the upstream cannot be reached.
    """
    label = f"{name} ({redact_url(url)})"
    async with AsyncExitStack() as stack:
        try:
            if transport == "sse":
                read, write = await stack.enter_async_context(
                    sse_client(url, headers=dict(headers or {}), timeout=CONNECT_TIMEOUT)
                )
            else:
                client = await stack.enter_async_context(_http_client(headers))
                read, write = await stack.enter_async_context(
                    streamable_http_client(url, http_client=client, terminate_on_close=True)
                )
        except (OSError, httpx2.HTTPError, MCPError) as exc:
            raise UpstreamGoneError(f"upstream {label} is unreachable: {_short(exc)}") from exc
        upstream = Upstream(name, read, write, label=label)
        await stack.enter_async_context(upstream.session)
        yield upstream


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every upstream connection: each costs about 1 MB to build, and
    an HTTP guard opens an upstream connection per downstream session."""
    return httpx2.create_ssl_context()


def _http_client(headers: Mapping[str, str] | None) -> httpx2.AsyncClient:
    """An HTTP client with the SDK's MCP timeouts (long reads for event streams), a bounded connect."""
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT, connect=CONNECT_TIMEOUT)
    return httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout, verify=_tls())
