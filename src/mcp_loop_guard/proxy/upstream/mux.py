"""One stdio child shared by every session of an HTTP guard: the guard's own connection to it, and relayed sessions.

A child has one JSON-RPC connection. The guard opens it with one handshake of its own
(:meth:`Mux.handshake`, so no SDK is loaded for it); the SDK path (2026-07-28 clients)
reaches the child as one more relayed session. Each relayed
session (a :class:`Share`: :class:`~.mux_view.MuxView`) sends its messages through the same
connection as they came, with its request ids and progress tokens
replaced by ids of the guard's own, and gets back what is its own with the client's ids
restored (a result keeps its bytes). A session's ``initialize`` is answered with the
child's own answer to that one handshake, so the child sees one however many clients
come and go.

What the child sends is routed: an answer, progress and a cancellation to whoever asked; a
request (sampling, elicitation, roots) to the one session with requests in flight, refused
when several have (the child gives no way to tell which one asked); any other notification
to everyone (``resources/updated`` only to the sessions that subscribed to that resource).
A request nobody can be asked is refused, and what is nobody's is dropped.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import secrets
from typing import Any, Protocol

import anyio
import anyio.abc

from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.channel import OwnRequests, UpstreamDownError
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import BadLine, Message, RequestId

__all__ = ["Carrier", "HandshakeRefusedError", "Item", "Mux", "Share"]

logger = logging.getLogger(__name__)

Item = Message | BadLine | Oversized
UPDATED = "notifications/resources/updated"


class HandshakeRefusedError(Exception):
    """The child answered the guard's ``initialize`` with an error: what it said."""


class Carrier(Protocol):
    """What a mux's messages travel on: a child's stdio, or a channel (:mod:`.shared_channel`)."""

    @property
    def label(self) -> str:
        """How messages name the upstream."""
        ...

    async def write(self, line: bytes) -> None:
        """One line to the upstream.

        Raises:
            OSError: the upstream stopped reading.
            UpstreamDownError: the upstream cannot take messages now.
        """
        ...


class Share(Protocol):
    """One relayed session's share of the child, as the mux keeps it."""

    mux: Mux | None
    open: dict[RequestId, str]
    """The session's requests waiting for the child: its id -> ours."""
    tokens: dict[RequestId, str]
    """Its requests' progress tokens: its request id -> our token."""
    subscribed: set[object]
    """The resources it subscribed to."""

    async def deliver(self, item: Item) -> None:
        """Something of the session's, from the child."""
        ...

    async def gone(self, reason: str) -> None:
        """The child died under the session."""
        ...

    async def failed(self, ident: RequestId, reason: str) -> None:
        """The upstream will not answer one of the session's requests (``ident``: the client's id)."""
        ...


class Mux:
    """The child's stdio, shared by any number of relayed views; the guard opens it with :meth:`handshake`."""

    def __init__(self, child: Carrier, *, max_bytes: int) -> None:
        """Nothing relayed until views attach."""
        self.child = child
        self.max_bytes = max_bytes
        self.views: set[Share] = set()
        self.identity: dict[str, Any] | None = None
        """The child's answer to its one ``initialize`` (its result, as it sent it)."""
        self.ready = anyio.Event()
        self.closed: str | None = None
        self.done = anyio.Event()
        """Set when the child is gone (:attr:`closed` says why)."""
        self._nonce = f"mlg-{secrets.token_hex(3)}-"
        self._ids = itertools.count(1)
        self._routes: dict[str, tuple[Share, RequestId]] = {}
        """Our id of a relayed request -> its view and the client's id."""
        self._tokens: dict[str, tuple[Share, object]] = {}
        """Our progress token -> its view and the client's token."""
        self._asked: dict[RequestId, Share] = {}
        """The child's requests routed to a view, until answered."""
        self._own = OwnRequests()

    # --- the child's output ------------------------------------------------------------------

    async def take(self, line: bytes | Oversized) -> None:
        """One line the child wrote."""
        item = line if isinstance(line, Oversized) else wire.parse(line)
        if item is not None:
            await self.route(item)

    async def route(self, item: Item) -> None:
        """One message from the upstream, to whoever it is for."""
        if isinstance(item, Oversized):
            await self._answer(item.request_id, item)
        elif isinstance(item, BadLine):
            await self._answer(item.response_to, item)
        elif item.is_response:
            await self._answer(item.id, item)
        elif item.is_request:
            await self._child_request(item)
        else:
            await self._notification(item)

    async def _answer(self, ident: RequestId | None, item: Item) -> None:
        if isinstance(item, Message) and self._own.answered(item):
            return
        if ident in self._own:
            self._own.give_up(ident)  # its answer was too large or malformed
            return
        if isinstance(ident, str) and ident.startswith(self._nonce):
            route = self._routes.pop(ident, None)
            if route is not None:
                view, client_id = route
                view.open.pop(client_id, None)
                if isinstance(item, Message):
                    item = wire.with_id(item, client_id)
                elif isinstance(item, Oversized):
                    item = Oversized(item.size, client_id)
                else:
                    item = BadLine(item.problem, item.reply, client_id)
                await self._deliver(view, item)

    async def _child_request(self, message: Message) -> None:
        asking = [view for view in self.views if view.open]
        if len(asking) == 1:
            ident = message.id
            assert ident is not None
            self._asked[ident] = asking[0]
            await self._deliver(asking[0], message)
            return
        refusal = wire.error(message.id, wire.INVALID_REQUEST, replies.cannot_route(bool(asking)))
        with contextlib.suppress(UpstreamDownError):  # gone: read on to the end of what it wrote (its tools, its exit)
            await self.write(refusal.line())

    async def _notification(self, message: Message) -> None:
        method = message.method
        params = message.body.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "notifications/progress":
            token = params.get("progressToken")
            route = self._tokens.get(token) if isinstance(token, str) else None
            if route is not None:
                view, client_token = route
                message.body["params"] = {**params, "progressToken": client_token}
                await self._deliver(view, message.changed())
            return
        if method == "notifications/cancelled":
            asked = self._asked.pop(params.get("requestId"), None)  # type: ignore[arg-type]
            if asked is not None:
                await self._deliver(asked, message)
            return
        uri = params.get("uri")
        for view in list(self.views):
            if method != UPDATED or uri in view.subscribed:
                await self._deliver(view, message)

    async def _deliver(self, view: Share, item: Item) -> None:
        """One session's message; a failure in that session is its own and never stops the child's reader."""
        try:
            await view.deliver(item)
        except Exception:
            logger.exception("a session could not take a message from upstream `%s`; dropped", self.child.label)

    # --- into the child ----------------------------------------------------------------------

    async def write(self, line: bytes) -> None:
        """One line to the child, in order with every other writer's.

        Raises:
            UpstreamDownError: the child is gone or stopped reading.
        """
        if self.closed is not None:
            raise UpstreamDownError(self.closed)
        try:
            await self.child.write(line)
        except OSError as error:
            stopped = replies.upstream(f"`{self.child.label}`", replies.stopped_reading(error.strerror or error))
            raise UpstreamDownError(stopped) from None

    async def failed(self, ours: RequestId, reason: str) -> None:
        """The carrier will not answer a request sent under our id: the view it belongs to is told."""
        route = self._routes.pop(ours, None) if isinstance(ours, str) else None
        if route is not None:
            view, client_id = route
            view.open.pop(client_id, None)
            await view.failed(client_id, reason)
        elif ours in self._own:
            self._own.give_up(ours)

    def new_id(self) -> str:
        """An id of our own, unique on this child."""
        return f"{self._nonce}{next(self._ids)}"

    async def relay_request(self, view: Share, message: Message) -> None:
        """A view's request, under an id (and progress token) of ours."""
        client_id = message.id
        assert client_id is not None
        ours = self.new_id()
        params = message.body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(params, dict) and isinstance(meta, dict) and "progressToken" in meta:
            token = self.new_id()
            self._tokens[token] = (view, meta["progressToken"])
            view.tokens[client_id] = token
            message.body["params"] = {**params, "_meta": {**meta, "progressToken": token}}
            message.changed()
        self._routes[ours] = (view, client_id)
        view.open[client_id] = ours
        try:
            await self.write(wire.with_id(message, ours).line())
        except UpstreamDownError:
            self.forget(view, client_id)
            raise

    def forget(self, view: Share, client_id: RequestId) -> None:
        """A view's request is over without the child's answer (cancelled, failed)."""
        ours = view.open.pop(client_id, None)
        if ours is not None:
            self._routes.pop(ours, None)
        token = view.tokens.pop(client_id, None)
        if token is not None:
            self._tokens.pop(token, None)

    def answered(self, view: Share, client_id: RequestId) -> None:
        """The child answered a view's request: its progress token is done too."""
        token = view.tokens.pop(client_id, None)
        if token is not None:
            self._tokens.pop(token, None)

    def answered_child(self, ident: RequestId) -> None:
        """A view answered one of the child's requests."""
        self._asked.pop(ident, None)

    async def ask(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        """A request of the guard's own (a view learning the tools): the answer's body, or None."""

        async def write(message: Message) -> None:
            await self.write(message.line())

        try:
            return await self._own.ask(method, params, write, within=within)
        except UpstreamDownError:
            return None

    async def handshake(self, params: dict[str, Any], *, within: float) -> dict[str, Any]:
        """Open the child with an ``initialize`` of the guard's own, then ``initialized``: its result.

        Raises:
            TimeoutError: no answer within ``within`` seconds.
            HandshakeRefusedError: the child answered with an error (or no result).
            UpstreamDownError: the child is gone.
        """
        if self.closed is not None:
            raise UpstreamDownError(self.closed)
        answer = await self.ask("initialize", params, within=within)
        if answer is None:
            if self.closed is not None:
                raise UpstreamDownError(self.closed)
            raise TimeoutError
        result = answer.get("result")
        if not isinstance(result, dict):
            error = answer.get("error")
            said = error.get("message") if isinstance(error, dict) else None
            raise HandshakeRefusedError(str(said or "it answered without a result"))
        await self.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.identity = result
        self.ready.set()
        return result

    # --- life --------------------------------------------------------------------------------

    def attach(self, view: Share) -> None:
        """A relayed session uses this child from now on."""
        self.views.add(view)
        view.mux = self

    def detach(self, view: Share) -> None:
        """A relayed session ended."""
        self.views.discard(view)
        for client_id in list(view.open):
            self.forget(view, client_id)
        if view.mux is self:
            view.mux = None

    async def close(self, reason: str, within: float = 10.0) -> None:
        """The child is gone: every view's requests in flight get ``reason`` (``within`` seconds, shielded)."""
        if self.closed is not None:
            return
        self.closed = reason
        self.done.set()
        self._own.give_up()
        with anyio.move_on_after(within, shield=True):  # even while the child's scope ends
            for view in list(self.views):
                self.detach(view)
                await view.gone(reason)
