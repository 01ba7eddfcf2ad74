"""Downstream sessions of the aggregating proxy: each with its links to the upstreams and its judge."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import mcp_types as types

from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.sdk_server import SessionDownstream
from mcp_loop_guard.proxy.relay.session_server import AbortHook, GuardedProxy, JudgeOf
from mcp_loop_guard.proxy.upstream.links import Link, OwnLink, SharedLink
from mcp_loop_guard.proxy.upstream.pool import Slot

logger = logging.getLogger(__name__)


@dataclass
class SessionFactory:
    """Everything a new downstream session is made from."""

    plan: Plan
    slots: list[Slot]
    on_dropped: Callable[[str, str], None] | None = None
    on_listed: Callable[[str, list[str]], None] | None = None
    owners: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Exported tool and prompt names -> the (server, name) first given them, guard-wide."""
    live: dict[int, GuardedProxy] = field(default_factory=dict)
    """Open sessions, for change notifications and the active-sessions gauge."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    @asynccontextmanager
    async def open(
        self, judge_of: JudgeOf, on_abort: AbortHook, *, prestart: bool = False, shared_only: bool = False
    ) -> AsyncIterator[GuardedProxy]:
        """A new session, closed (with its own upstream connections) on exit.

        ``shared_only``: every upstream through its slot's shared connection (requests without
        a session of their own, which can carry no server-to-client traffic).
        """
        key = next(self._ids)
        downstream = SessionDownstream(self.plan.settings.max_pending_requests)
        links: list[Link] = []
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            for slot in self.slots:
                if slot.shared or shared_only:
                    shared = SharedLink(slot, key, downstream)
                    stack.callback(shared.close)
                    links.append(shared)
                else:
                    own = OwnLink(slot, downstream, tg, merged=len(self.slots) > 1)
                    stack.push_async_callback(own.aclose)
                    if prestart:
                        await own.prestart()
                    links.append(own)
            proxy = GuardedProxy(
                links,
                downstream,
                judge_of,
                on_abort,
                on_dropped=self.on_dropped,
                on_listed=self.on_listed,
                owners=self.owners,
            )
            self.live[key] = proxy
            stack.callback(self.live.pop, key, None)
            yield proxy

    def on_slot_change(self, tg: anyio.abc.TaskGroup) -> Callable[[Slot, bool], None]:
        """A slot listener telling every session its lists changed (a server went or came, or has other tools)."""

        def changed(slot: Slot, tools_changed: bool) -> None:
            if len(self.slots) == 1 and not tools_changed:
                return
            logger.info(
                "upstream %r is %s; telling %d session(s) the lists changed", slot.name, slot.status, len(self.live)
            )
            for proxy in list(self.live.values()):
                for note in (types.ToolListChangedNotification(), types.PromptListChangedNotification()):
                    tg.start_soon(_notify_quietly, proxy.downstream, note)

        return changed


async def _notify_quietly(downstream: SessionDownstream, notification: types.ServerNotification) -> None:
    try:
        await downstream.notify(notification)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        logger.debug("could not tell a closing session that its lists changed")


def fixed_judge(judge: Judge) -> JudgeOf:
    """A session's own judge, whatever the request."""

    async def judge_of(ctx: object) -> Judge:
        return judge

    return judge_of
