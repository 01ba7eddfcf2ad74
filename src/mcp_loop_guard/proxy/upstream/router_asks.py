"""What a router asks its members on its own: requests awaiting one answer, and listen streams awaiting their end.

Both carry ids of the guard's own (a client never picks those), so the router tells their
answers from the client's; a member that goes away ends what it was asked.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.channel import Channel, UpstreamDownError
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.eras import CACHEABLE_METHODS, SERVER_INFO_META_KEY
from mcp_loop_guard.proxy.wire.messages import Message, RequestId, own_request_id

__all__ = ["SUBSCRIPTION_ID", "Asks", "Listens", "stamped"]

logger = logging.getLogger(__name__)

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
"""The ``_meta`` key stamping each frame of a ``subscriptions/listen`` stream with its request's id."""
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
Answer = Callable[[Message], Awaitable[None]]
"""Answers the client (the router's receiver)."""


def stamped(result: dict[str, Any], info: dict[str, Any], *, modern: bool, method: str = "") -> dict[str, Any]:
    """A result the router wrote, shaped as 2026-07-28 results are when the request was (``info``: who wrote it).

    A merged list may change whenever a server's does: it is never to be cached.
    """
    if modern:
        result.setdefault("resultType", "complete")
        result["_meta"] = {SERVER_INFO_META_KEY: info, **(result.get("_meta") or {})}
        if method in CACHEABLE_METHODS:
            result.setdefault("ttlMs", 0)
            result.setdefault("cacheScope", "private")
    return result


@dataclass
class _Asked:
    member: str
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] | None = None


class Asks:
    """The router's own requests to its members, each awaiting its answer."""

    def __init__(self) -> None:
        """None yet."""
        self._waiting: dict[str, _Asked] = {}

    async def ask(
        self, member: Channel, name: str, method: str, params: dict[str, Any] | None, *, within: float
    ) -> dict[str, Any] | None:
        """Ask ``member`` (named ``name``): its answer's body, or None (it is down, or no answer in time)."""
        ident = own_request_id()
        asked = self._waiting[ident] = _Asked(name)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            body["params"] = params
        try:
            with anyio.move_on_after(within):
                await member.send_message(Message(body))
                await asked.done.wait()
        except UpstreamDownError as down:
            logger.debug("upstream %r was not asked %s: %s", name, method, down)
        finally:
            self._waiting.pop(ident, None)
        return asked.answer

    def answered(self, ident: object, answer: dict[str, Any] | None) -> bool:
        """Take the answer to one of the router's requests (None: it will get none); False when it is not one."""
        asked = self._waiting.get(ident) if isinstance(ident, str) else None
        if asked is None:
            return False
        asked.answer = answer
        asked.done.set()
        return True

    def lost(self, name: str) -> None:
        """A member went away: what it was asked gets no answer."""
        for asked in self._waiting.values():
            if asked.member == name:
                asked.done.set()


@dataclass
class _Listen:
    """A client's ``subscriptions/listen``, open on several members."""

    open: dict[str, str] = field(default_factory=dict)
    """The router's id of each member's stream still open -> the member."""
    acknowledged: bool = False
    listened: bool = False
    error: Any = None


class Listens:
    """The client's 2026-07-28 listen streams, each one stream on every member merged into the client's one.

    The first acknowledgement goes to the client; each member's frames are stamped with the
    client's request id; the client's stream ends (with a result, or the first error) once
    every member's has.
    """

    def __init__(self, answer: Answer, info: dict[str, Any]) -> None:
        """``answer`` sends the client a message; ``info``: the router's ``serverInfo``."""
        self.answer = answer
        self.info = info
        self._streams: dict[str, RequestId] = {}
        self._clients: dict[RequestId, _Listen] = {}

    def __contains__(self, ident: object) -> bool:
        return ident in self._clients

    async def open(self, message: Message, members: dict[str, Channel]) -> None:
        """The client's ``subscriptions/listen``: the same request to every member, under ids of the router's own."""
        ident = message.id
        assert ident is not None
        state = self._clients[ident] = _Listen()
        for name, member in list(members.items()):
            own = own_request_id()
            self._streams[own] = ident
            try:
                await member.send_message(Message({**message.body, "id": own}))
            except UpstreamDownError:
                self._streams.pop(own, None)
                continue
            state.open[own] = name
        if not state.open:
            await self._ended(ident, state)

    async def answered(self, ident: object, answer: dict[str, Any] | None) -> bool:
        """A member's stream ended (``answer``: its result or error; None: the member went away); False if not one."""
        client = self._streams.pop(ident, None) if isinstance(ident, str) else None
        state = self._clients.get(client) if client is not None else None
        if client is None or state is None:
            return client is not None
        state.open.pop(str(ident), None)
        if answer is not None and "result" in answer:
            state.listened = True
        elif answer is not None:
            state.error = state.error or answer.get("error")
        if not state.open:
            await self._ended(client, state)
        return True

    def frame(self, message: Message) -> bool | None:
        """Stamp a member's frame as the client's stream carries it: True; False for a message on no stream.

        None for a frame the client must not get (a second acknowledgement).
        """
        params = message.body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        own = meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        client = self._streams.get(own) if isinstance(own, str) else None
        state = self._clients.get(client) if client is not None else None
        if client is None or state is None or not isinstance(params, dict) or not isinstance(meta, dict):
            return False
        if message.method == ACKNOWLEDGED:
            if state.acknowledged:
                return None
            state.acknowledged = True
        message.body["params"] = {**params, "_meta": {**meta, SUBSCRIPTION_ID: client}}
        message.changed()
        return True

    async def lost(self, name: str) -> None:
        """A member went away: its streams ended."""
        for client, state in list(self._clients.items()):
            for own, member in list(state.open.items()):
                if member == name and client in self._clients:
                    await self.answered(own, None)

    def cancelled(self, ident: RequestId) -> dict[str, str]:
        """The client cancelled its stream: each member stream's id and member, to cancel in turn."""
        state = self._clients.pop(ident, None)
        for own in state.open if state is not None else ():
            self._streams.pop(own, None)
        return dict(state.open) if state is not None else {}

    async def _ended(self, client: RequestId, state: _Listen) -> None:
        self._clients.pop(client, None)
        if state.listened:
            result = stamped({"_meta": {SUBSCRIPTION_ID: client}}, self.info, modern=True)
            await self.answer(wire.result(client, result))
            return
        error = state.error if isinstance(state.error, dict) else {}
        said = str(error.get("message") or replies.NONE_ANSWERED)
        await self.answer(wire.error(client, error.get("code", wire.METHOD_NOT_FOUND), said))
