"""A router's members, and what it answers itself: the handshake, the lists and the rest it sends to every member.

See :mod:`.router` for what the router does with each message; here are its members (their
channels, run in its task group, added and removed by a config reload) and the requests it
answers for all of them, merged (:mod:`.router_lists`).
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.channel import Channel, Item, Receiver, UpstreamDownError
from mcp_loop_guard.proxy.upstream.router_asks import Asks, Listens, stamped
from mcp_loop_guard.proxy.upstream.router_lists import (
    GUARD_INFO,
    LISTS,
    Catalog,
    merged_capabilities,
    merged_discovery,
    merged_identity,
)
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.eras import PROTOCOL_VERSION_META_KEY
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

__all__ = ["ASK_WAIT", "MemberOpener", "Members", "envelope"]

logger = logging.getLogger(__name__)

MemberOpener = Callable[[ServerSpec, Receiver], Channel]
"""Makes the channel of one member (a child, a share of a shared child, an HTTP or SSE server)."""
ASK_WAIT = 60.0
"""Seconds a member may take to answer the router's own request (its handshake, a list), without a call timeout."""


class _Member:
    """What one member hears, told to the router with the member's name."""

    def __init__(self, router: Members, name: str) -> None:
        self.router, self.name = router, name

    async def from_upstream(self, item: Item) -> None:
        await self.router.heard(self.name, item)

    async def upstream_lost(self, reason: str) -> None:
        await self.router.lost(self.name, reason)

    async def upstream_failed(self, ident: RequestId, reason: str) -> None:
        await self.router.failed(self.name, ident, reason)

    async def upstream_restarted(self) -> None:
        await self.router.restarted(self.name)


class Members:
    """A router's members and what it answers for all of them."""

    initialize: dict[str, Any] | None = None
    initialized: bytes | None = None

    def __init__(
        self,
        specs: Sequence[ServerSpec],
        receiver: Receiver,
        opener: MemberOpener,
        *,
        catalog: Catalog,
        call_timeout: float | None = None,
        usable: Callable[[str], bool] | None = None,
    ) -> None:
        """Members made by ``opener``; ``catalog`` keeps the merged names (its owners may be shared guard-wide).

        ``usable(name)``: whether a member is worth asking now (its health probe's word); a
        member that is not is left out of the handshake and the lists until it serves again.
        """
        self.receiver = receiver
        self.usable = usable or _always
        self.opener = opener
        self.catalog = catalog
        self.call_timeout = call_timeout
        self.specs = {spec.name: spec for spec in specs}
        self.members = {spec.name: opener(spec, _Member(self, spec.name)) for spec in specs}
        self.identity: dict[str, dict[str, Any]] = {}
        """Each member's answer to the handshake (or ``server/discover``)."""
        self.restarts = 0
        self._opened = False
        self._asked = Asks()
        self._listens = Listens(receiver.from_upstream, GUARD_INFO)
        # The router's routing, kept here with its members:
        self._routed: dict[RequestId, tuple[str, str]] = {}
        """The client's requests routed to one member: id -> (member, method)."""
        self._tasks: dict[str, str] = {}
        self._asks: dict[str, tuple[str, RequestId]] = {}
        """The members' requests to the client, by the router's id: (member, the member's id)."""
        self._nonce = f"mlg-r{secrets.token_hex(3)}-"
        self._ids = itertools.count(1)
        self._tg: anyio.abc.TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}

    @property
    def label(self) -> str:
        """Every member's name."""
        return ", ".join(member.label for member in self.members.values())

    def timeout_for(self, server: str) -> float | None:
        """A member's call timeout (its own ``callTimeoutSeconds``, else the guard's)."""
        spec = self.specs.get(server)
        return (spec.call_timeout if spec is not None else None) or self.call_timeout

    def down_reason(self) -> str | None:
        """None while any member takes messages; else why none does."""
        reasons = [member.down_reason() for member in self.members.values()]
        return None if not reasons or None in reasons else "; ".join(str(reason) for reason in reasons)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every member until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for name in list(self.members):
                await self._start(name)
            task_status.started()
            await anyio.sleep_forever()

    async def _start(self, name: str) -> None:
        assert self._tg is not None
        scope = self._scopes[name] = anyio.CancelScope()
        member = self.members[name]

        async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with scope:
                await member.run(task_status=task_status)

        await self._tg.start(run)

    def learn_tools(self, tools: list[Any]) -> None:
        """Nothing to learn here: each member learns its own tools when the router lists them."""

    def end_input(self) -> None:
        """The client sent its last message: every member's input ends."""
        for member in self.members.values():
            member.end_input()

    async def wait_ended(self) -> None:
        """Wait for every member's work to end."""
        for member in list(self.members.values()):
            await member.wait_ended()

    async def request(self, method: str, params: Any, *, within: float) -> dict[str, Any] | None:
        """A request of the relay's own: a list, merged (the relay learns the tools' annotations so)."""
        if method not in LISTS:
            return None
        meta = params.get("_meta") if isinstance(params, dict) else None
        result = await self.catalog.merged(method, self._serving(), self._ask, meta)
        return {"jsonrpc": "2.0", "id": None, "result": result}

    async def _tell(self, name: str, message: Message) -> None:
        """A notification to one member; one that cannot take it misses it (nobody waits for it)."""
        member = self.members.get(name)
        try:
            if member is not None:
                await member.send_message(Message(dict(message.body), message.raw))
        except UpstreamDownError as down:
            logger.debug("dropped a %s for upstream %r: %s", message.method, name, down)

    # --- what the router answers itself --------------------------------------------------------

    async def _handshake(self, message: Message, method: str, params: dict[str, Any]) -> None:
        """The client's handshake (or discovery) to every member at once; their answers merged into one."""
        ident = message.id
        assert ident is not None
        if method == "initialize":
            for member in self.members.values():
                member.initialize = message.body
        answers: dict[str, dict[str, Any]] = {}
        names = [name for name in self.members if self.usable(name)] or list(self.members)

        async def ask(name: str) -> None:
            answer = await self._ask(name, method, params or None)
            result = (answer or {}).get("result")
            if isinstance(result, dict):
                answers[name] = result
            else:
                logger.warning("upstream %r did not answer %s: %s", name, method, (answer or {}).get("error"))

        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(ask, name)
        self.identity.update(answers)
        self._opened = True
        if not answers:
            why = "; ".join(filter(None, (m.down_reason() for m in self.members.values()))) or replies.NONE_ANSWERED
            await self.receiver.from_upstream(wire.error(ident, wire.INTERNAL_ERROR, why))
            return
        ordered = {name: answers[name] for name in self.members if name in answers}
        merged = merged_identity(ordered, params.get("protocolVersion"))
        if method == "server/discover":
            merged = stamped(merged_discovery(ordered), GUARD_INFO, modern=True, method=method)
        await self.receiver.from_upstream(wire.result(ident, merged))

    async def _fanned(self, ident: RequestId, method: str, params: dict[str, Any]) -> None:
        """A list, merged, or ``logging/setLevel`` for every member that logs."""
        meta = params.get("_meta")
        if method in LISTS:
            result = await self.catalog.merged(method, self._serving(), self._ask, envelope(meta))
        else:
            for name, caps in self._serving().items():
                if caps is None or caps.get("logging") is not None:
                    await self._ask(name, method, params)
            result = {}
        modern = isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
        await self.receiver.from_upstream(wire.result(ident, stamped(result, GUARD_INFO, modern=modern, method=method)))

    async def _anyone(self, ident: RequestId, method: str, params: dict[str, Any]) -> None:
        """A method the router does not know: the first member that knows it answers."""
        answer: dict[str, Any] | None = None
        for name in list(self.members):
            answer = await self._ask(name, method, params or None)
            error = (answer or {}).get("error")
            if answer is not None and not (isinstance(error, dict) and error.get("code") == wire.METHOD_NOT_FOUND):
                break
        if answer is None:
            answer = wire.error(ident, wire.METHOD_NOT_FOUND, replies.method_not_found(method)).body
        await self.receiver.from_upstream(Message({**answer, "id": ident}))

    def _serving(self) -> dict[str, Mapping[str, Any] | None]:
        """Each member and its capabilities (None while unknown: it is asked for every list)."""
        found: dict[str, Mapping[str, Any] | None] = {}
        for name in self.members:
            if not self.usable(name):
                continue
            identity = self.identity.get(name)
            capabilities = identity.get("capabilities") if identity is not None else None
            found[name] = capabilities if isinstance(capabilities, dict) else None
        return found

    async def _ask(self, name: str, method: str, params: dict[str, Any] | None) -> dict[str, Any] | None:
        """A request of the router's own to one member: its answer's body, or None (down, or no answer in time)."""
        member = self.members.get(name)
        if member is None:
            return None
        answer = await self._asked.ask(member, name, method, params, within=self.timeout_for(name) or ASK_WAIT)
        if answer is not None and method == "tools/list" and isinstance(answer.get("result"), dict):
            member.learn_tools(answer["result"].get("tools") or [])
        return answer

    async def _changed(self) -> None:
        if self._opened:
            for method in ("notifications/tools/list_changed", "notifications/prompts/list_changed"):
                await self.receiver.from_upstream(Message({"jsonrpc": "2.0", "method": method}))

    # --- a config reload -----------------------------------------------------------------------

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """Start, stop or restart members to match ``servers``; None, or why it cannot be done live.

        Going between one server and several would rename every tool (``server__name``).
        """
        if len(servers) < 2:
            return replies.ONE_AND_SEVERAL
        new = {spec.name: spec for spec in servers}
        gone = [name for name, spec in self.specs.items() if new.get(name) != spec]
        come = [spec for name, spec in new.items() if self.specs.get(name) != spec]
        for name in gone:
            self._scopes.pop(name).cancel()
            member = self.members.pop(name)
            del self.specs[name]
            self.identity.pop(name, None)
            await self.lost(name, replies.upstream(member.label, replies.REMOVED))
            for exported, (server, _) in list(self.catalog.owners.items()):
                if server == name:
                    del self.catalog.owners[exported]
        for spec in come:
            self.specs[spec.name] = spec
            member = self.members[spec.name] = self.opener(spec, _Member(self, spec.name))
            member.initialize, member.initialized = self.initialize, self.initialized
            await self._start(spec.name)
            await self._join(spec.name)
        await self._changed()
        return None

    async def _join(self, name: str) -> None:
        """The client's handshake to one member that has not had it (added by a reload, or down until now)."""
        if self.initialize is None or name in self.identity:
            return
        answer = await self._ask(name, "initialize", self.initialize.get("params"))
        if isinstance((answer or {}).get("result"), dict):
            self.identity[name] = answer["result"]  # type: ignore[index]
            if self.initialized is not None:
                await self._tell(name, Message({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def capabilities(self) -> dict[str, Any]:
        """The members' capabilities, merged (what a client of the router is told)."""
        return merged_capabilities(self.identity.values())

    async def lost(self, name: str, reason: str) -> None:
        """A member went away (see :class:`~.router.Router`)."""
        raise NotImplementedError

    async def heard(self, name: str, item: Item) -> None:
        """One message from a member (see :class:`~.router.Router`)."""
        raise NotImplementedError

    async def failed(self, name: str, ident: RequestId, reason: str) -> None:
        """A member will not answer one request."""
        raise NotImplementedError

    async def restarted(self, name: str) -> None:
        """A member serves again."""
        raise NotImplementedError


def _always(name: str) -> bool:
    """Every member is asked (no probe says otherwise)."""
    return True


def envelope(meta: object) -> dict[str, Any] | None:
    """The 2026-07-28 keys of a request's ``_meta``, which the router's own requests carry too."""
    if not isinstance(meta, dict):
        return None
    return {key: value for key, value in meta.items() if key.startswith("io.modelcontextprotocol/")} or None
