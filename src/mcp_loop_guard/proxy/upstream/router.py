"""Several upstream servers as one channel: their lists merged, each request routed to the server it is for.

The relay in front of several servers is the same message relay as in front of one; its
upstream is this router, whose members are channels of their own (a child, a share of a
shared child, an HTTP or SSE server). What it does with a client's message:

* ``initialize`` and ``server/discover`` go to every member (each opens its session with the
  client's own handshake, so it adapts to that client) and are answered once, under the
  guard's name, with their capabilities merged (:mod:`.router_lists`);
* the lists (tools, prompts, resources, templates, tasks) are every member's, merged under
  ``server__name``; ``logging/setLevel`` goes to every member that logs; ``ping`` is answered;
* ``tools/call`` and ``prompts/get`` go to the member that listed the name, renamed back;
  resources and completion by URI or prompt; ``tasks/*`` to the member whose call created the
  task; ``subscriptions/listen`` to every member, its streams merged into the client's one;
  any other method to the members in turn, until one knows it;
* every other message crosses as it came: notifications to every member, cancellations to
  the member of the request, a client's answer to the member that asked (the members'
  requests to the client carry ids of the router's own, so two members' ids never meet).

A member that goes away fails only its own requests; the client is told its tools changed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.catalog import AmbiguousError, Names
from mcp_loop_guard.proxy.upstream.channel import Item, UpstreamDownError
from mcp_loop_guard.proxy.upstream.router_lists import (
    LISTS,
)
from mcp_loop_guard.proxy.upstream.router_members import MemberOpener, Members, envelope
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import BadLine, Message, RequestId

__all__ = ["MemberOpener", "Router"]

logger = logging.getLogger(__name__)

LIST_CHANGED = {
    "notifications/tools/list_changed": "tools/list",
    "notifications/prompts/list_changed": "prompts/list",
    "notifications/resources/list_changed": "resources/list",
}
BY_URI = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe"})
BY_TASK = frozenset({"tasks/get", "tasks/result", "tasks/cancel"})
RESOURCE_NOT_FOUND = -32002


class _Unroutable(Exception):  # noqa: N818 - not a failure: the answer the client gets
    """The request names nothing a member listed: the error it is answered with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Router(Members):
    """Several channels as one (see the module's text)."""

    def label_for(self, ident: RequestId) -> str:
        """The member a client request went to."""
        routed = self._routed.get(ident)
        member = self.members.get(routed[0]) if routed is not None else None
        return member.label if member is not None else self.label

    # --- the channel ---------------------------------------------------------------------------

    # --- from the client -----------------------------------------------------------------------

    async def send_message(self, message: Message) -> None:
        """One of the client's messages, to the member (or members) it is for.

        Raises:
            UpstreamDownError: the one member it is for cannot take it.
        """
        if message.is_request:
            await self._request(message)
        elif message.is_notification:
            await self._notification(message)
        else:
            asked = self._asks.pop(message.id, None) if isinstance(message.id, str) else None
            member = self.members.get(asked[0]) if asked is not None else None
            if asked is not None and member is not None:
                await member.send_message(wire.with_id(message, asked[1]))

    async def _request(self, message: Message) -> None:
        method = message.method or ""
        ident = message.id
        assert ident is not None
        params = message.body.get("params")
        params = params if isinstance(params, dict) else {}
        if method == "ping":
            await self.receiver.from_upstream(wire.result(ident, {}))
        elif method in ("initialize", "server/discover"):
            await self._handshake(message, method, params)
        elif method in LISTS or method == "logging/setLevel":
            assert self._tg is not None
            self._tg.start_soon(self._fanned, ident, method, params)
        elif method == "subscriptions/listen":
            await self._listens.open(message, self.members)
        else:
            try:
                name = await self._target(message, method, params)
            except _Unroutable as unroutable:
                await self.receiver.from_upstream(wire.error(ident, unroutable.code, str(unroutable)))
                return
            if name is None:
                assert self._tg is not None
                self._tg.start_soon(self._anyone, ident, method, params)
                return
            self._routed[ident] = (name, method)
            try:
                await self.members[name].send_message(message)
            except UpstreamDownError:
                self._routed.pop(ident, None)
                raise

    async def _target(self, message: Message, method: str, params: dict[str, Any]) -> str | None:
        """The member a request is for (renaming what it names to the member's own name); None: unknown method.

        Raises:
            _Unroutable: it names what no member listed.
        """
        if method in ("tools/call", "prompts/get"):
            kind = self.catalog.tools if method == "tools/call" else self.catalog.prompts
            route = await self._named(kind, "tools/list" if method == "tools/call" else "prompts/list", params)
            return _renamed(message, params, "name", route)
        if method in BY_URI:
            return await self._owner(str(params.get("uri", "")), params)
        if method in BY_TASK:
            found = self._tasks.get(str(params.get("taskId")))
            if found is None:
                raise _Unroutable(wire.INVALID_PARAMS, replies.unknown("task", str(params.get("taskId"))))
            return found
        if method == "completion/complete":
            ref = params.get("ref")
            ref = ref if isinstance(ref, dict) else {}
            if ref.get("type") == "ref/prompt":
                route = await self._named(self.catalog.prompts, "prompts/list", ref)
                return _renamed(message, params, "ref", route, {**ref, "name": route[1]})
            return await self._owner(str(ref.get("uri", "")), params)
        return None

    async def route(self, tool: str, meta: object = None) -> tuple[str, str] | None:
        """(server, its own name) of a tool the client called; None when no member listed it (listed now if needed)."""
        return await self._where(self.catalog.tools, "tools/list", tool, meta)

    async def _where(self, names: Names, method: str, name: str, meta: object) -> tuple[str, str] | None:
        """Where a listed name goes (its list read now if it may be missing), None when nowhere.

        A name of a server that is down now keeps the owner it had: its call gets why the
        server is down, not "unknown", and still reaches nothing.
        """
        found = names.routes.get(name)
        if found is None and any(member not in names.listed for member in self.members):
            await self.catalog.merged(method, self._serving(), self._ask, envelope(meta))
            found = names.routes.get(name)
        owner = self.catalog.owners.get(name) if found is None else None
        member = self.members.get(owner[0]) if owner is not None else None
        if member is not None and owner is not None and (member.down_reason() or not self.usable(owner[0])):
            return owner
        return found

    async def _named(self, names: Names, method: str, params: Mapping[str, Any]) -> tuple[str, str]:
        name = str(params.get("name"))
        route = await self._where(names, method, name, params.get("_meta"))
        if route is None:
            raise _Unroutable(wire.INVALID_PARAMS, replies.unknown(method.split("/", maxsplit=1)[0].rstrip("s"), name))
        return route

    async def _owner(self, uri: str, params: Mapping[str, Any]) -> str:
        resources = self.catalog.resources
        if not resources.complete:  # a URI listed exactly wins over another's template: every list first
            meta = envelope(params.get("_meta"))
            await self.catalog.merged("resources/list", self._serving(), self._ask, meta)
            await self.catalog.merged("resources/templates/list", self._serving(), self._ask, meta)
        with_resources = [name for name, caps in self._serving().items() if caps is None or caps.get("resources")]
        try:
            found = resources.route(uri, with_resources)
        except AmbiguousError as ambiguous:
            raise _Unroutable(wire.INVALID_PARAMS, replies.ambiguous(str(ambiguous))) from None
        if found is None:
            raise _Unroutable(RESOURCE_NOT_FOUND, replies.resource_not_found(uri))
        return found

    async def _notification(self, message: Message) -> None:
        params = message.body.get("params")
        params = params if isinstance(params, dict) else {}
        if message.method == "notifications/cancelled":
            cancelled = params.get("requestId")
            routed = self._routed.pop(cancelled, None) if isinstance(cancelled, str | int) else None
            if routed is not None:
                await self._tell(routed[0], message)
            elif isinstance(cancelled, str | int) and cancelled in self._listens:
                for own, name in self._listens.cancelled(cancelled).items():
                    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": own}}
                    await self._tell(name, Message(cancel))
            return
        if message.method == "notifications/initialized":
            for member in self.members.values():
                member.initialized = message.line()  # replayed to a member that joins later
        for name in [name for name in self.members if name in self.identity]:  # a member without a session: none
            await self._tell(name, message)

    # --- from the members ----------------------------------------------------------------------

    async def heard(self, name: str, item: Item) -> None:
        """One message from a member."""
        if isinstance(item, Oversized | BadLine):
            ident = item.request_id if isinstance(item, Oversized) else item.response_to
            if not self._asked.answered(ident, None):  # too large or malformed: no answer
                await self.receiver.from_upstream(item)
        elif item.is_response:
            await self._answer(item)
        elif item.is_request:
            ours = f"{self._nonce}{next(self._ids)}"
            self._asks[ours] = (name, item.id)  # type: ignore[assignment]
            await self.receiver.from_upstream(wire.with_id(item, ours))
        else:
            await self._member_notification(name, item)

    async def _answer(self, message: Message) -> None:
        ident = message.id
        if await self._listens.answered(ident, message.body) or self._asked.answered(ident, message.body):
            return
        routed = self._routed.pop(ident, None) if ident is not None else None
        result = message.body.get("result")
        if routed is not None and routed[1] == "tools/call" and isinstance(result, dict):
            task = result.get("task")
            if "content" not in result and isinstance(task, dict) and isinstance(task.get("taskId"), str):
                self._tasks[task["taskId"]] = routed[0]
        await self.receiver.from_upstream(message)

    async def _member_notification(self, name: str, message: Message) -> None:
        params = message.body.get("params")
        params = params if isinstance(params, dict) else {}
        method = message.method or ""
        framed = self._listens.frame(message)
        if framed is None:
            return
        if framed:
            pass
        elif method == "notifications/cancelled":
            ours = next((key for key, asked in self._asks.items() if asked == (name, params.get("requestId"))), None)
            if ours is None:
                return
            self._asks.pop(ours)
            message.body["params"] = {**params, "requestId": ours}
            message.changed()
        elif method in LIST_CHANGED:
            self.catalog.forget(name, LIST_CHANGED[method])
        await self.receiver.from_upstream(message)

    async def lost(self, name: str, reason: str) -> None:
        """A member went away: only its requests fail; the client is told its tools changed."""
        for ident, (member, _) in list(self._routed.items()):
            if member == name:
                self._routed.pop(ident, None)
                await self.receiver.upstream_failed(ident, reason)
        self._asked.lost(name)
        await self._listens.lost(name)
        for ours, (member, _) in list(self._asks.items()):
            if member == name:
                del self._asks[ours]
        for task, member in list(self._tasks.items()):
            if member == name:
                del self._tasks[task]
        self.catalog.forget(name)
        await self._changed()

    async def failed(self, name: str, ident: RequestId, reason: str) -> None:
        """A member will not answer one request."""
        if await self._listens.answered(ident, None) or self._asked.answered(ident, None):
            return
        if self._routed.pop(ident, None) is not None:
            await self.receiver.upstream_failed(ident, reason)

    async def restarted(self, name: str) -> None:
        """A member serves again (a restarted child, or one down at the handshake): its lists are read again.

        The client is told they changed.
        """
        self.restarts += 1
        await self._join(name)
        self.catalog.forget(name)
        await self._changed()


def _renamed(message: Message, params: dict[str, Any], key: str, route: tuple[str, str], value: object = None) -> str:
    """Send the request on under the member's own name (``key`` of its params); the member's name."""
    server, name = route
    message.body["params"] = {**params, key: name if value is None else value}
    message.changed()
    return server
