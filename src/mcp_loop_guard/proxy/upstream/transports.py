"""How an SDK client session reaches an upstream: a child process's stdio, or streamable HTTP or SSE.

A child's stdout is read with the guard's own line framing, so a line that is no JSON-RPC
message (or is over the size limit) is answered or skipped rather than breaking the session.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, suppress

import anyio
import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcp_loop_guard.config import StdioServer
from mcp_loop_guard.proxy.compat import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp_loop_guard.proxy.upstream.channel import UpstreamDownError
from mcp_loop_guard.proxy.upstream.child import ChildProcess, spawn
from mcp_loop_guard.proxy.upstream.mux import Mux
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.upstream.session import Upstream, UpstreamGoneError, brief
from mcp_loop_guard.proxy.upstream.tls import CONNECT_TIMEOUT, tls_context
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import Message

logger = logging.getLogger(__name__)


class _ToSession:
    """What the shared child sends the SDK session, as SDK messages; what cannot be one is answered or skipped."""

    def __init__(self, child: ChildProcess, send: MemoryObjectSendStream[SessionMessage | Exception], max_bytes: int):
        self.child = child
        self.send = send
        self.max_bytes = max_bytes
        self.junk = 0

    async def __call__(self, item: Message | wire.BadLine | Oversized) -> None:
        message, is_junk = _as_session_message(item, self.child, self.max_bytes)
        self.junk += is_junk
        if is_junk and self.junk == 1:
            logger.warning(
                "upstream `%s` wrote a line to stdout that is not JSON-RPC; ignoring it and any later ones",
                self.child.label,
            )
        if message is not None:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self.send.send(message)


def _as_session_message(  # noqa: PLR0911 - one return per kind of line
    parsed: Message | wire.BadLine | Oversized, child: ChildProcess, max_bytes: int
) -> tuple[SessionMessage | None, bool]:
    """A line as an SDK message (or the error standing in for it); None with True for junk."""
    if isinstance(parsed, Oversized):
        logger.warning(
            "upstream `%s` sent a %d-byte message (limit %d); not relayed", child.label, parsed.size, max_bytes
        )
        if parsed.request_id is None:
            return None, False
        why = (
            f"the upstream's answer of {parsed.size} bytes is over the limit of {max_bytes} "
            "(LOOP_GUARD_MAX_MESSAGE_BYTES); it was not relayed"
        )
        return _error_message(parsed.request_id, why, "too-large"), False
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


async def _pump_in(mux: Mux, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """SDK messages to the shared child, one line each; a dead child's input is drained and dropped."""
    async with receive:
        try:
            async for message in receive:
                root = message.message
                line = root.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
                request = root.id if isinstance(root, types.JSONRPCRequest) else None
                cancelled = None
                if isinstance(root, types.JSONRPCNotification) and root.method == "notifications/cancelled":
                    cancelled = (root.params or {}).get("requestId")
                await mux.from_primary(line, request=request, method=getattr(root, "method", None), cancelled=cancelled)
        except UpstreamDownError:
            async for _ in receive:
                pass
        finally:
            mux.child.close_stdin()


async def _pump_view(view: MuxView, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """SDK messages to a shared child as a relayed session's; once the child is gone they are drained and dropped."""
    async with receive:
        try:
            async for message in receive:
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                parsed = wire.parse(line)
                if isinstance(parsed, Message):
                    await view.send_message(parsed)
        except UpstreamDownError:
            async for _ in receive:
                pass


async def _read_child(mux: Mux, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    """Route the child's output until it ends; then its relayed sessions are told why."""
    async with send:
        await mux.read()
        with anyio.move_on_after(1.0):  # the exit status arrives a moment after stdout closes
            await mux.child.exited.wait()
        reason = f"upstream `{mux.child.label}` {mux.child.describe_exit()}"
        await mux.close(reason)


@asynccontextmanager
async def open_stdio_upstream(
    spec: StdioServer, *, max_bytes: int, first: ChildProcess | None = None
) -> AsyncIterator[Upstream]:
    """Start the upstream command, or take ``first`` (started already); the handshake waits for ``connect``.

    The child's stdio is a :class:`Mux`: relayed sessions share it with the SDK session
    (``upstream.mux``).

    Raises:
        UpstreamStartError: the command cannot be started.
    """
    if first is None:
        first = spawn(
            [spec.command, *spec.args], name=spec.public_name, env=spec.env, cwd=spec.cwd, display=spec.display
        )
    child = first
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(child.watch)
            tg.start_soon(child.relay_stderr)
            mux = Mux(child, _ToSession(child, read_send, max_bytes), max_bytes=max_bytes)
            tg.start_soon(_read_child, mux, read_send)
            tg.start_soon(_pump_in, mux, write_receive)
            upstream = Upstream(spec.name, read_receive, write_send, child=child)
            upstream.mux = mux
            try:
                async with upstream.session:
                    yield upstream
            finally:
                write_send.close()
                await mux.close(upstream.gone_reason() or f"upstream {upstream.label} was stopped")
                await child.stop()
                tg.cancel_scope.cancel()
    finally:
        await child.stop(eof_grace=0, term_grace=0.5)


@asynccontextmanager
async def open_view_upstream(spec: StdioServer, mux: Mux, *, max_bytes: int) -> AsyncIterator[Upstream]:
    """An SDK session on a child the guard opened itself: one more relayed session of its mux.

    Its ``initialize`` is answered with the child's answer to the guard's own, as every
    session's is, so the child still sees one handshake.
    """
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    upstream = Upstream(spec.name, read_receive, write_send, child=mux.child)

    async def gone(reason: str) -> None:
        upstream.mark_gone(reason)
        read_send.close()

    def current() -> Mux | None:
        return mux if mux.closed is None else None

    view = MuxView(
        f"`{mux.child.label}`", _ViewReceiver(_ToSession(mux.child, read_send, max_bytes), gone), current=current
    )
    mux.attach(view)
    async with anyio.create_task_group() as tg:
        tg.start_soon(_pump_view, view, write_receive)
        try:
            async with upstream.session:
                yield upstream
        finally:
            write_send.close()
            view.leave()
            read_send.close()
            tg.cancel_scope.cancel()


class _ViewReceiver:
    """What the shared child sends the SDK's session on it, and the child's end."""

    def __init__(self, to_session: _ToSession, gone: Callable[[str], Awaitable[None]]) -> None:
        self.to_session, self.gone = to_session, gone

    async def from_upstream(self, item: Message | wire.BadLine | Oversized) -> None:
        await self.to_session(item)

    async def upstream_lost(self, reason: str) -> None:
        await self.gone(reason)

    async def upstream_failed(self, ident: object, reason: str) -> None:
        """A shared child fails no single request of the SDK's session."""

    async def upstream_restarted(self) -> None:
        """A restarted child is another session of the SDK's (see :class:`~.pool.Slot`)."""


@asynccontextmanager
async def open_http_upstream(
    name: str, url: str, *, transport: str = "http", headers: Mapping[str, str] | None = None
) -> AsyncIterator[Upstream]:
    """Connect to a streamable HTTP or SSE upstream; the handshake waits for :meth:`Upstream.connect`.

    Raises:
        UpstreamGoneError: the upstream cannot be reached.
    """
    label = f"`{name}`"  # never the URL, whose path may hold a key
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
            raise UpstreamGoneError(f"upstream {label} is unreachable: {brief(exc)}") from exc
        upstream = Upstream(name, read, write, label=label)
        await stack.enter_async_context(upstream.session)
        yield upstream


def _http_client(headers: Mapping[str, str] | None) -> httpx2.AsyncClient:
    """An HTTP client with the SDK's MCP timeouts (long reads for event streams), a bounded connect."""
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT, connect=CONNECT_TIMEOUT)
    return httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout, verify=tls_context())
