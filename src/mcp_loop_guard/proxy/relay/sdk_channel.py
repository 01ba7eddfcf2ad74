"""The SDK path's way upstream: the SDK's client session over one of the guard's channels.

The SDK path only translates between protocol eras. What carries its messages to the
servers is the channel the message relays use (a share of a shared child, a streamable HTTP
or legacy SSE server over the guard's own HTTP client, a router of several), so every
topology reaches its servers the same way, restarts and all: the channel keeps the
session across a server's restart; a handshake that fails is tried again, after a backoff,
by the next request.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcp_loop_guard import __version__
from mcp_loop_guard.core import replies
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.relay.tool_list import ToolList
from mcp_loop_guard.proxy.upstream.backoff import HANDSHAKE_TIMEOUT, Backoff
from mcp_loop_guard.proxy.upstream.channel import Channel, Item, UpstreamDownError
from mcp_loop_guard.proxy.upstream.channels import Opener
from mcp_loop_guard.proxy.upstream.session import Downstream, Upstream, UpstreamGoneError
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.upstream.router import Router

__all__ = ["PROXY_INFO", "SHARED_CAPABILITIES", "ChannelLink"]

logger = logging.getLogger(__name__)

PROXY_INFO = types.Implementation(name="mcp-loop-guard", version=__version__)
"""How the guard names itself to the servers its SDK path reaches."""

SHARED_CAPABILITIES = types.ClientCapabilities(
    sampling=types.SamplingCapability(),
    elicitation=types.ElicitationCapability(
        form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
    ),
)
"""The SDK path's one session serves clients of every kind, so it claims the per-request client
features (answering with an error for a client that lacks one) but not roots: one session
cannot have each client's roots."""


class ChannelLink:
    """One SDK client session over a channel, for every request of the SDK path; the channel's receiver."""

    def __init__(self, name: str, reach: Opener, limits: Limits, downstream: Downstream) -> None:
        """``reach`` makes the channel (its receiver is this link); ``downstream`` hears the servers' traffic."""
        self.name = name
        self.limits = limits
        self.downstream = downstream
        self.channel: Channel = reach(self)
        self.router = _router(self.channel)
        self.tools = ToolList(self.channel, limits)
        self.upstream: Upstream | None = None
        self._to_session: MemoryObjectSendStream[SessionMessage | Exception] | None = None
        self._open: set[RequestId] = set()
        """The SDK session's requests on the channel, waiting for an answer."""
        self._lock = anyio.Lock()
        self._backoff = Backoff()
        self._failures = 0
        self._retry_at = 0.0
        self._last_error = ""
        self._junk = 0
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def identity(self) -> types.InitializeResult | None:
        """The server's answer to the handshake (with several, the router's merged one)."""
        return self.upstream.initialize_result if self.upstream is not None else None

    def timeout_for(self, server: str | None) -> float | None:
        """The call timeout of the server a request goes to (its own, else the guard's)."""
        if self.router is not None and server is not None:
            return self.router.timeout_for(server)
        return self.limits.call_timeout

    def label_of(self, server: str | None) -> str:
        """How messages name the server a request went to."""
        member = self.router.members.get(server) if self.router is not None and server is not None else None
        return member.label if member is not None else self.channel.label

    async def route(self, tool: str, meta: object) -> tuple[str, str] | None:
        """(server, its own name) of a tool the client called; None when no server listed it."""
        if self.router is not None:
            return await self.router.route(tool, meta)
        return self.name, tool

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the channel, and the SDK session once a request opens it, until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            await tg.start(self.channel.run)
            task_status.started()
            await anyio.sleep_forever()

    @asynccontextmanager
    async def using(self) -> AsyncIterator[Upstream]:
        """The SDK session for one request, its handshake done (tried again after a backoff when it failed).

        Raises:
            UpstreamGoneError: the handshake failed, now or within the backoff.
        """
        upstream = self.upstream
        if upstream is None or upstream.initialize_result is None:
            async with self._lock:  # only the first request (or one after a failure) takes it
                upstream = await self._connected()
        yield upstream

    async def _connected(self) -> Upstream:
        if self.upstream is not None and self.upstream.initialize_result is not None:
            return self.upstream
        if anyio.current_time() < self._retry_at:
            raise UpstreamGoneError(self._last_error)
        assert self._tg is not None, "run() runs before the first request"
        upstream: Upstream = await self._tg.start(self._session)
        try:
            await upstream.connect(PROXY_INFO, SHARED_CAPABILITIES)
        except UpstreamGoneError as exc:
            self._failures += 1
            self._retry_at = anyio.current_time() + self._backoff.delay(self._failures)
            self._last_error = str(exc)
            upstream.mark_gone(str(exc))
            raise
        if self._failures:
            logger.info("reached upstream %s after: %s", self.channel.label, self._last_error)
        self._failures = 0
        return upstream

    async def _session(self, *, task_status: anyio.abc.TaskStatus[Upstream]) -> None:
        """One SDK session over the channel, held in a task of its own until it fails its handshake."""
        read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
        timeout = self.limits.call_timeout or HANDSHAKE_TIMEOUT
        upstream = Upstream(
            self.channel.label, read_receive, write_send, downstream=self.downstream, handshake_timeout=timeout
        )
        self._to_session, self._open = read_send, set()
        self.upstream = upstream
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._pump, write_receive)
            try:
                async with upstream.session:
                    task_status.started(upstream)
                    await upstream.wait_gone()
            finally:
                read_send.close()
                tg.cancel_scope.cancel()
                if self.upstream is upstream:
                    self.upstream = None

    async def _pump(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        """The SDK session's messages onto the channel; a request the channel cannot take is answered here."""
        async with receive:
            async for sent in receive:
                line = sent.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                message = wire.parse(line)
                if not isinstance(message, Message):
                    continue
                ident = message.id if message.is_request else None
                if message.method == "initialize":
                    self.channel.initialize = message.body
                elif message.method == "notifications/initialized":
                    self.channel.initialized = line + b"\n"
                if ident is not None:
                    self._open.add(ident)
                try:
                    await self.channel.send_message(message)
                except UpstreamDownError as down:
                    if ident is not None:
                        await self.upstream_failed(ident, str(down))

    # --- what the channel hears ----------------------------------------------------------------

    async def from_upstream(self, item: Item) -> None:
        """One message from the server(s), to the SDK session; what cannot be one is answered or skipped."""
        if isinstance(item, Oversized):
            logger.warning(
                "upstream %s sent a %d-byte message (limit %d); not relayed",
                self.channel.label,
                item.size,
                self.limits.max_message_bytes,
            )
            if item.request_id is not None:
                why = replies.answer_too_large(item.size, self.limits.max_message_bytes)
                await self._fail(item.request_id, why, "too-large")
            return
        if isinstance(item, wire.BadLine):
            if item.response_to is not None:
                await self._fail(item.response_to, replies.WRONG_SHAPE_RESPONSE, "invalid-result")
            else:
                self._bad_line(item.problem)
            return
        try:
            message = types.jsonrpc_message_adapter.validate_python(item.body, by_name=False)
        except ValidationError:
            if item.id is not None and item.is_response:
                await self._fail(item.id, replies.WRONG_SHAPE_RESPONSE, "invalid-result")
            else:
                self._bad_line("not a JSON-RPC message")
            return
        if item.is_response and item.id is not None:
            self._open.discard(item.id)
        await self._deliver(SessionMessage(message))

    async def upstream_lost(self, reason: str) -> None:
        """The server went away: every request in flight gets ``reason``."""
        for ident in list(self._open):
            await self._fail(ident, reason, "gone")

    async def upstream_failed(self, ident: RequestId, reason: str) -> None:
        """The server will not answer one request."""
        if ident in self._open:
            await self._fail(ident, reason, "gone")

    async def upstream_restarted(self) -> None:
        """A new server process or session serves from now on: the clients hear of it if its tools changed."""
        await self.restarted()

    async def restarted(self) -> None:
        """The server was replaced (by its channel, or by whoever supervises a shared child)."""
        if await self.tools.changed_on_restart():
            logger.info("upstream %s has other tools after its restart; telling the clients", self.channel.label)
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await self.downstream.notify(types.ToolListChangedNotification())

    async def _fail(self, ident: RequestId, reason: str, fault: str) -> None:
        self._open.discard(ident)
        error = types.ErrorData(code=types.INTERNAL_ERROR, message=reason, data={wire.GUARD_FAULT: fault})
        await self._deliver(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=ident, error=error)))

    async def _deliver(self, message: SessionMessage) -> None:
        send = self._to_session
        if send is not None:
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await send.send(message)

    def _bad_line(self, problem: Any) -> None:
        self._junk += 1
        if self._junk == 1:
            logger.warning(
                "upstream %s sent a message that is not JSON-RPC (%s); ignoring it and any later ones",
                self.channel.label,
                problem,
            )


def _router(channel: Channel) -> Router | None:
    """The channel when it is a router; its module is loaded only in front of several servers."""
    module = sys.modules.get("mcp_loop_guard.proxy.upstream.router")
    return channel if module is not None and isinstance(channel, module.Router) else None
