"""One relayed session's share of a stdio child that an HTTP guard's sessions share (see :mod:`.mux`).

To the session's message relay it is the upstream channel: its ``initialize`` is answered
with the child's own answer to the one handshake the child had, its requests go under ids
of the guard's own, and what it subscribes to decides which resource updates reach it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.abc

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.channel import Receiver, UpstreamDownError
from mcp_loop_guard.proxy.upstream.mux import Item, Mux
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.eras import HANDSHAKE_PROTOCOL_VERSIONS
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

__all__ = ["MuxView"]

HANDSHAKE_WAIT = 120.0
"""Seconds a session's ``initialize`` waits for the child's first handshake."""


class MuxView:
    """One relayed session's share of a shared child, as the message relay's upstream channel."""

    initialize: dict[str, Any] | None = None
    initialized: bytes | None = None

    def __init__(
        self,
        label: str,
        receiver: Receiver,
        on_tools: Callable[[list[Any]], None] | None = None,
        current: Callable[[], Mux | None] = lambda: None,
    ) -> None:
        """What is the session's goes to ``receiver`` (the child's death too: its requests in flight fail).

        ``on_tools`` is told the tools the child lists (metrics may name them); ``current()``
        is the child serving now, if any (the view attaches to it when it has none).
        """
        self._label = label
        self.on_tools = on_tools
        self.current = current
        self.receiver = receiver
        self.mux: Mux | None = None
        self.open: dict[RequestId, str] = {}
        """The client's requests waiting for the child: client id -> our id."""
        self.tokens: dict[RequestId, str] = {}
        self.subscribed: set[object] = set()
        self.down = replies.NOT_CONNECTED_YET
        self.restarts = 0

    @property
    def label(self) -> str:
        """How messages name the upstream: its command."""
        return self._label

    def label_for(self, ident: RequestId) -> str:
        """Every request goes to the one child."""
        return self._label

    def down_reason(self) -> str | None:
        """Why no message can go now, or None when the child takes them."""
        return None if self._attached() is not None else self.down

    def _attached(self) -> Mux | None:
        """The child this session uses; attached to the one serving now when it had none."""
        if self.mux is None and (mux := self.current()) is not None and mux.closed is None:
            mux.attach(self)
        return self.mux

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Nothing to run: the shared child is supervised by its slot."""
        task_status.started()

    def learn_tools(self, tools: list[Any]) -> None:
        """The child listed its tools (its stdio carries every message the same way: nothing to route)."""
        if self.on_tools is not None:
            self.on_tools(tools)

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """Nothing to do here: the shared child is replaced by whoever supervises it."""
        return None

    def leave(self) -> None:
        """The session ended: the child forgets this share (its requests in flight included)."""
        if self.mux is not None:
            self.mux.detach(self)

    def end_input(self) -> None:
        """Nothing to end: the child serves other sessions."""

    async def wait_ended(self) -> None:
        """The session's end does not end the child."""

    async def deliver(self, item: Item) -> None:
        """Something of the session's, from the child."""
        if isinstance(item, Message) and item.is_response and item.id is not None and self.mux is not None:
            self.mux.answered(self, item.id)
        await self.receiver.from_upstream(item)

    async def gone(self, reason: str) -> None:
        """The child died under this session."""
        self.down = reason
        self.open.clear()
        self.tokens.clear()
        await self.receiver.upstream_lost(reason)

    async def failed(self, ident: RequestId, reason: str) -> None:
        """The upstream will not answer one of this session's requests."""
        self.tokens.pop(ident, None)
        await self.receiver.upstream_failed(ident, reason)

    async def send_message(self, message: Message) -> None:
        """A client message for the child.

        Raises:
            UpstreamDownError: no child takes messages now.
        """
        mux = self._attached()
        if mux is None:
            raise UpstreamDownError(self.down)
        method = message.method
        if message.is_request:
            if method == "initialize":
                await self._initialize(mux, message)
                return
            if method in ("resources/subscribe", "resources/unsubscribe") and await self._subscription(
                mux, message, method
            ):
                return
            await mux.relay_request(self, message)
        elif message.is_notification:
            if method == "notifications/initialized":
                return  # the child had the primary's
            if method == "notifications/cancelled":
                cancel = self._cancellation(mux, message)
                if cancel is None:
                    return  # nothing of this session's in flight under that id (answered already)
                message = cancel
            await mux.write(message.line())
        else:
            if message.id is not None:
                mux.answered_child(message.id)
            await mux.write(message.line())

    async def _initialize(self, mux: Mux, message: Message) -> None:
        """Answered with the child's own answer to the handshake it already had."""
        with anyio.move_on_after(HANDSHAKE_WAIT):
            await mux.ready.wait()
        ident = message.id
        assert ident is not None
        if mux.identity is None:
            answer = wire.error(ident, wire.INTERNAL_ERROR, replies.upstream(self.label, replies.NO_HANDSHAKE))
            await self.receiver.from_upstream(answer)
            return
        params = message.body.get("params")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        result = dict(mux.identity)
        if isinstance(asked, str) and asked in HANDSHAKE_PROTOCOL_VERSIONS:
            result["protocolVersion"] = asked
        await self.receiver.from_upstream(wire.result(ident, result))

    async def _subscription(self, mux: Mux, message: Message, method: str) -> bool:
        """Track what the session subscribes to; True when the answer was given here."""
        params = message.body.get("params")
        uri = params.get("uri") if isinstance(params, dict) else None
        if method == "resources/subscribe":
            self.subscribed.add(uri)
            return False
        self.subscribed.discard(uri)
        if any(uri in view.subscribed for view in mux.views):
            ident = message.id
            assert ident is not None
            await self.receiver.from_upstream(wire.result(ident, {}))  # another session still wants the updates
            return True
        return False

    def _cancellation(self, mux: Mux, message: Message) -> Message | None:
        """The cancellation under our id for the request; None when the session has none in flight under it.

        Passed on as it came, it could name a request of another session's, or of the SDK's.
        """
        params = message.body.get("params")
        cancelled = params.get("requestId") if isinstance(params, dict) else None
        ours = self.open.get(cancelled) if isinstance(cancelled, str | int) else None
        if ours is None or not isinstance(params, dict):
            return None
        mux.forget(self, cancelled)  # type: ignore[arg-type]
        message.body["params"] = {**params, "requestId": ours}
        return message.changed()

    async def request(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        """A request of the guard's own: the answer's body, or None."""
        mux = self._attached()
        return None if mux is None else await mux.ask(method, params, within=within)
