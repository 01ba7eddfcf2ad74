"""One channel that every ``--stateless`` request shares: a router of several servers, or a legacy SSE server.

A request without a session is relayed through a share of it made for that request alone
(a :class:`~.mux_view.MuxView` of its :class:`~.mux.Mux`, ids rewritten, as each session's
share of a shared child), so the servers see one client, with one handshake (the guard's),
and a task a call created is found again by a later request. The channel keeps itself up:
a router's members and a legacy SSE server's stream come back on their own, the handshake
given again; the guard's handshake is retried with backoff until it is answered.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from mcp_loop_guard.core import replies
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.upstream.backoff import HANDSHAKE_TIMEOUT, Backoff
from mcp_loop_guard.proxy.upstream.channel import Channel, Item, Receiver, UpstreamDownError
from mcp_loop_guard.proxy.upstream.channels import Opener
from mcp_loop_guard.proxy.upstream.mux import HandshakeRefusedError, Mux
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.upstream.shared_child import HANDSHAKE
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.upstream.router import Router

__all__ = ["SharedChannel"]

logger = logging.getLogger(__name__)

FIRST_WAIT = 10.0
"""Seconds a request waits for the guard's first handshake with the channel (without a call timeout)."""


class SharedChannel:
    """A channel shared through a mux: its carrier (to the channel) and its receiver (from it)."""

    def __init__(self, reach: Opener, limits: Limits, *, backoff: Backoff | None = None) -> None:
        """``reach`` makes the channel, with this object as its receiver."""
        self.channel: Channel = reach(self)
        self.limits = limits
        self.mux = Mux(self, max_bytes=limits.max_message_bytes)
        self._backoff = backoff or Backoff(initial=0.1, cap=2.0)
        self.down = replies.NOT_CONNECTED_YET
        self.facts = ToolFacts()
        """What any request's relay learnt of the tools, for every request's (a call lists nothing first)."""
        self.first_try = anyio.Event()
        """Set once the guard's first handshake was answered or failed (:attr:`down` says which)."""

    @property
    def label(self) -> str:
        """How messages name the server(s)."""
        return self.channel.label

    @property
    def router(self) -> Router | None:
        """The channel when it is a router (its module is loaded only in front of several servers)."""
        module = sys.modules.get("mcp_loop_guard.proxy.upstream.router")
        return self.channel if module is not None and isinstance(self.channel, module.Router) else None

    def serving(self) -> Mux | None:
        """The mux, once the guard's handshake was answered."""
        return self.mux if self.mux.identity is not None else None

    def share(self, receiver: Receiver) -> MuxView:
        """A share of the channel for one request (it attaches once the channel serves)."""
        view = _Share(self, receiver)
        view.down = self.down
        return view

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the channel and open it with the guard's handshake (again, after a backoff, until answered)."""
        async with anyio.create_task_group() as tg:
            await tg.start(self.channel.run)
            task_status.started()
            within = self.limits.call_timeout or HANDSHAKE_TIMEOUT
            failures = 0
            while self.mux.identity is None:
                try:
                    await self.mux.handshake(HANDSHAKE, within=within)
                except (TimeoutError, HandshakeRefusedError, UpstreamDownError) as exc:
                    failures += 1
                    self.down = replies.upstream(self.label, str(exc) or replies.NO_HANDSHAKE)
                    self.first_try.set()
                    logger.log(logging.WARNING if failures == 1 else logging.DEBUG, "%s; trying again", self.down)
                    await anyio.sleep(self._backoff.delay(failures))
            self.down = ""
            self.first_try.set()
            await anyio.sleep_forever()

    # --- the mux's carrier ---------------------------------------------------------------------

    async def write(self, line: bytes) -> None:
        """One line of the mux's, to the channel.

        Raises:
            UpstreamDownError: the channel cannot take it now.
        """
        message = wire.parse(line)
        if not isinstance(message, Message):
            return
        if message.method == "initialize":
            self.channel.initialize = message.body  # given again to a server that comes back
        elif message.method == "notifications/initialized":
            self.channel.initialized = line
        await self.channel.send_message(message)

    # --- the channel's receiver ----------------------------------------------------------------

    async def from_upstream(self, item: Item) -> None:
        """What the server(s) said, to the share it is for (or to every share)."""
        if isinstance(item, Message) and item.method == "notifications/tools/list_changed":
            self.facts.forget()  # heard even when no request is in flight to hear it
        await self.mux.route(item)

    async def upstream_lost(self, reason: str) -> None:
        """The server went away: every share's requests in flight get ``reason``."""
        for view in list(self.mux.views):
            for ours in list(view.open.values()):
                await self.mux.failed(ours, reason)

    async def upstream_failed(self, ident: RequestId, reason: str) -> None:
        """The server will not answer one request (sent under an id of the mux's)."""
        await self.mux.failed(ident, reason)

    async def upstream_restarted(self) -> None:
        """The channel gave the server the guard's handshake again: nothing to tell requests of their own."""


class _Share(MuxView):
    """One request's share of the shared channel; a router names the server each request went to."""

    def __init__(self, shared: SharedChannel, receiver: Receiver) -> None:
        super().__init__(shared.label, receiver, None, shared.serving)
        self.shared = shared

    async def send_message(self, message: Message) -> None:
        """A request that comes during the guard's first handshake waits a little for it; once one failed, it fails
        at once with why (the handshake is tried again meanwhile), even one that was waiting for it."""
        if self.mux is None and not self.shared.first_try.is_set():
            with anyio.move_on_after(self.shared.limits.call_timeout or FIRST_WAIT):
                await self.shared.first_try.wait()
        self.down = self.shared.down or self.down
        await super().send_message(message)

    def label_for(self, ident: RequestId) -> str:
        """The server the request went to: a router's member, else the one server."""
        ours = self.open.get(ident)
        router = self.shared.router
        return router.label_for(ours) if router is not None and ours is not None else self.label
