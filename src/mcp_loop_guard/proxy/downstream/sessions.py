"""Downstream sessions of the aggregating proxy: each with its links to the upstreams and its judge."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import mcp_types as types
from mcp.server.subscriptions import InMemorySubscriptionBus

from mcp_loop_guard.config import ServerSpec
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.relay.sdk_server import SessionDownstream
from mcp_loop_guard.proxy.relay.session_server import AbortHook, GuardedProxy, JudgeOf
from mcp_loop_guard.proxy.relay.stopping import Stopping
from mcp_loop_guard.proxy.upstream.links import Link, OwnLink, SharedLink
from mcp_loop_guard.proxy.upstream.pool import Slot

logger = logging.getLogger(__name__)

SETTLE_SECONDS = 30.0
"""How long a config reload waits for an added upstream's first connection before telling clients."""


@dataclass
class _Parts:
    """What a session's links are made with, to add one when a config reload adds a server."""

    key: int
    tg: anyio.abc.TaskGroup
    stack: AsyncExitStack
    downstream: SessionDownstream
    shared_only: bool
    prestart: bool


@dataclass
class SessionFactory:
    """Everything a new downstream session is made from."""

    plan: Plan
    slots: list[Slot]
    on_dropped: Callable[[str, str], None] | None = None
    on_listed: Callable[[str, list[str]], None] | None = None
    make_slot: Callable[[ServerSpec], Slot] | None = None
    """How a server added by a config reload gets its slot (shared or per session)."""
    owners: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Exported tool and prompt names -> the (server, name) first given them, guard-wide."""
    live: dict[int, GuardedProxy] = field(default_factory=dict)
    """Open sessions, for change notifications and the active-sessions gauge."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _parts: dict[int, _Parts] = field(default_factory=dict)
    _supervisors: dict[str, anyio.CancelScope] = field(default_factory=dict)
    _supervising: anyio.abc.TaskGroup | None = None
    _listener: Callable[[Slot, bool], None] | None = None
    _notifier: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def open(
        self,
        judge_of: JudgeOf,
        on_abort: AbortHook,
        *,
        stopping: Stopping,
        prestart: bool = False,
        shared_only: bool = False,
    ) -> AsyncIterator[GuardedProxy]:
        """A new session, closed (with its own upstream connections) on exit; its calls answered when ``stopping``.

        ``shared_only``: every upstream through its slot's shared connection (requests without
        a session of their own, which can carry no server-to-client traffic, but can listen:
        the upstreams' changes go to their ``subscriptions/listen`` streams).
        """
        key = next(self._ids)
        bus = InMemorySubscriptionBus() if shared_only else None
        downstream = SessionDownstream(self.plan.settings.max_pending_requests, bus=bus)
        links: list[Link] = []
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            parts = _Parts(key, tg, stack, downstream, shared_only, prestart)
            for slot in self.slots:
                links.append(await self._link(slot, parts))
            proxy = GuardedProxy(
                links,
                downstream,
                judge_of,
                on_abort,
                stopping=stopping,
                on_dropped=self.on_dropped,
                on_listed=self.on_listed,
                owners=self.owners,
            )
            self.live[key] = proxy
            self._parts[key] = parts
            stack.callback(self.live.pop, key, None)
            stack.callback(self._parts.pop, key, None)
            yield proxy

    async def _link(self, slot: Slot, parts: _Parts) -> Link:
        """One session's link to one slot, closed with the session."""
        if slot.shared or parts.shared_only:
            shared = SharedLink(slot, parts.key, parts.downstream)
            parts.stack.callback(shared.close)
            return shared
        own = OwnLink(slot, parts.downstream, parts.tg, merged=len(self.slots) > 1)
        parts.stack.push_async_callback(own.aclose)
        if parts.prestart:
            await own.prestart()
        return own

    async def start(self, tg: anyio.abc.TaskGroup, *, settle: float | None = None) -> None:
        """Keep every slot up in ``tg``, its changes told to every session; with ``settle``, wait at
        most that long for each slot's first connection attempt (clients then see its tools)."""
        listener = self.on_slot_change(tg)
        for slot in self.slots:
            slot.on_change(listener)
        await self.supervise(tg)
        if settle is not None:
            for slot in self.slots:
                await slot.wait_settled(settle)

    async def supervise(self, tg: anyio.abc.TaskGroup) -> None:
        """Keep every slot's shared connection (or probe) up in ``tg``; slots added later too."""
        self._supervising = tg
        for slot in self.slots:
            await tg.start(self._supervise, slot)

    async def _supervise(
        self, slot: Slot, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        scope = anyio.CancelScope()
        self._supervisors[slot.name] = scope
        with scope:
            await slot.supervise(task_status=task_status)

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """Start, stop or restart upstreams to match ``servers`` (a config reload); None, or why it cannot.

        Every open session gains the added servers and loses the removed ones, then is told
        its lists changed. Going between one server and several would rename every tool
        (``server__name``), so that needs a restart.
        """
        old = {slot.name: slot for slot in self.slots}
        new = {spec.name: spec for spec in servers}
        if (len(old) > 1) != (len(new) > 1):
            return "going between one upstream and several renames every tool (server__name); restart the guard"
        gone = [name for name, slot in old.items() if name not in new or new[name] != slot.spec]
        come = [spec for name, spec in new.items() if name not in old or old[name].spec != spec]
        if not gone and not come:
            return None
        if come and self.make_slot is None:
            return "this guard cannot start upstreams after start-up"
        for name in gone:
            await self._remove(old[name])
        for spec in come:
            await self._add(spec)
        self._tell_sessions()
        return None

    async def _remove(self, slot: Slot) -> None:
        self.slots.remove(slot)
        for proxy in list(self.live.values()):
            link = proxy.drop_link(slot.name)
            if isinstance(link, OwnLink):
                await link.aclose()
            elif isinstance(link, SharedLink):
                link.close()
        for name, (server, _) in list(self.owners.items()):
            if server == slot.name:
                del self.owners[name]
        scope = self._supervisors.pop(slot.name, None)
        if scope is not None:
            scope.cancel()

    async def _add(self, spec: ServerSpec) -> None:
        assert self.make_slot is not None
        slot = self.make_slot(spec)
        if self._listener is not None:
            slot.on_change(self._listener)
        self.slots.append(slot)
        if self._supervising is not None:
            await self._supervising.start(self._supervise, slot)
            await slot.wait_settled(SETTLE_SECONDS)  # clients told of the change then see its tools
        for key, proxy in list(self.live.items()):
            parts = self._parts.get(key)
            if parts is not None:
                await proxy.add_link(await self._link(slot, parts))

    def _tell_sessions(self) -> None:
        if self._notifier is None:
            return
        for proxy in list(self.live.values()):
            for note in (types.ToolListChangedNotification(), types.PromptListChangedNotification()):
                self._notifier.start_soon(_notify_quietly, proxy.downstream, note)

    def on_slot_change(self, tg: anyio.abc.TaskGroup) -> Callable[[Slot, bool], None]:
        """A slot listener telling every session its lists changed (a server went or came, or has other tools)."""
        self._notifier = tg

        def changed(slot: Slot, tools_changed: bool) -> None:
            if len(self.slots) == 1 and not tools_changed:
                return
            logger.info(
                "upstream %r is %s; telling %d session(s) the lists changed", slot.name, slot.status, len(self.live)
            )
            self._tell_sessions()

        self._listener = changed
        return changed


async def _notify_quietly(downstream: SessionDownstream, notification: types.ServerNotification) -> None:
    try:
        await downstream.notify(notification)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        logger.debug("could not tell a closing session that its lists changed")
