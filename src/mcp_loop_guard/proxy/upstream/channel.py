"""An upstream as the message relay sees it, whatever carries the messages: a channel, and who receives from it.

A :class:`Channel` is a child's stdio (:mod:`.stdio`), a share of a child the sessions of an
HTTP guard share (:mod:`.mux_view`), a streamable HTTP server (:mod:`.http_lines`), a legacy
SSE server (:mod:`.sse_lines`), or several of them as one (:mod:`.router`). What a channel
hears goes to its :class:`Receiver`: the relay, or the router it is a member of.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio
import anyio.abc

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import BadLine, Message, RequestId, own_request_id

__all__ = ["Channel", "Incoming", "OwnRequests", "Receiver", "UpstreamDownError"]

Item = Message | BadLine | Oversized
Incoming = Callable[[Item], Awaitable[None]]
"""Where the upstream's messages go (the relay's ``from_upstream``)."""


class UpstreamDownError(Exception):
    """The upstream cannot take a message now; the text says why (exit status, backoff, unreachable)."""


class Receiver(Protocol):
    """Who hears what a channel's upstream says, and what becomes of it (the relay, or a router)."""

    async def from_upstream(self, item: Item) -> None:
        """One message (or an oversized or broken one) from the upstream."""
        ...

    async def upstream_lost(self, reason: str) -> None:
        """The upstream went away: every request in flight on the channel gets ``reason``."""
        ...

    async def upstream_failed(self, ident: RequestId, reason: str) -> None:
        """The upstream will not answer one request (it broke off or refused it)."""
        ...

    async def upstream_restarted(self) -> None:
        """A new upstream (a restarted child, a reopened session) serves the client's session from now on."""
        ...


class Channel(Protocol):
    """One upstream as a channel of JSON-RPC messages, carrying the client's session across its restarts."""

    initialize: dict[str, Any] | None
    """The client's initialize request, replayed when the upstream's session must be opened again."""
    initialized: bytes | None
    """The client's notifications/initialized line, replayed with it."""
    restarts: int

    @property
    def label(self) -> str:
        """How messages name the upstream (its command, or its URL without secrets)."""
        ...

    def label_for(self, ident: RequestId) -> str:
        """How messages name the upstream a client request went to (a router's member; else :attr:`label`)."""
        ...

    def down_reason(self) -> str | None:
        """Why the upstream cannot take messages now, or None when it can."""
        ...

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the upstream until cancelled."""
        ...

    async def send_message(self, message: Message) -> None:
        """Pass one message on, in order with the ones before it.

        Raises:
            UpstreamDownError: the upstream cannot take it (the message is lost; a request is the caller's to fail).
        """
        ...

    async def request(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        """A request of the guard's own: the answer's body, or None (no answer in time, or the upstream is down)."""
        ...

    def learn_tools(self, tools: list[Any]) -> None:
        """The tools the upstream listed (a transport may need their schemas to route calls)."""
        ...

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """A config reload: take ``servers`` from now on; None, or why it cannot be done without a restart."""
        ...

    def end_input(self) -> None:
        """The client sent its last message."""
        ...

    async def wait_ended(self) -> None:
        """Wait until the work the upstream was given is done (the child exited, the answers came)."""
        ...


class OwnRequests:
    """The requests a channel sends for the guard itself, each waiting for its answer (never the client's)."""

    def __init__(self) -> None:
        """None waiting."""
        self._waiting: dict[str, tuple[anyio.Event, list[dict[str, Any]]]] = {}

    def __contains__(self, ident: object) -> bool:
        return ident in self._waiting

    def answered(self, message: Message) -> bool:
        """Take an answer to one of them; False when it is not theirs."""
        ident = message.body.get("id")
        waiting = self._waiting.get(ident) if isinstance(ident, str) and message.is_response else None
        if waiting is None:
            return False
        waiting[1].append(message.body)
        waiting[0].set()
        return True

    def give_up(self, ident: object = None) -> None:
        """Stop waiting: for one request (no answer will come), or for all of them (the upstream went away)."""
        for key, (done, _) in self._waiting.items():
            if ident is None or key == ident:
                done.set()

    async def ask(
        self, method: str, params: Any, send: Callable[[Message], Awaitable[None]], *, within: float
    ) -> dict[str, Any] | None:
        """Send a request with an id of the guard's own and wait for its answer's body; None without one in time.

        Raises:
            UpstreamDownError: ``send`` could not send it.
        """
        ident = own_request_id()
        done, answers = anyio.Event(), list[dict[str, Any]]()
        self._waiting[ident] = (done, answers)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            body["params"] = params
        try:
            with anyio.move_on_after(within):
                await send(Message(body))
                await done.wait()
        finally:
            self._waiting.pop(ident, None)
        return answers[0] if answers else None
