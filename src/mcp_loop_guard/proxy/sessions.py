"""Downstream sessions: each with its own loop state and its own links to the upstreams."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import mcp_types as types

from mcp_loop_guard.core.detector import LoopDetector
from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy.catalog import SEPARATOR
from mcp_loop_guard.proxy.links import Link, OwnLink, SharedLink
from mcp_loop_guard.proxy.pool import Slot
from mcp_loop_guard.proxy.server import AbortHook, CallObserver, GuardedProxy, SessionDownstream

logger = logging.getLogger(__name__)


@dataclass
class SessionFactory:
    """Everything a new downstream session is made from."""

    slots: list[Slot]
    policy: Policy
    server_policies: Mapping[str, Policy] = field(default_factory=dict)
    observe: CallObserver | None = None
    log_contents: bool = False
    live: dict[int, GuardedProxy] = field(default_factory=dict)
    """Open sessions, for change notifications and the active-sessions gauge."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def policy_for(self, tool: str) -> Policy:
        """The policy of the server that owns an exported tool name."""
        if len(self.slots) == 1:
            return self.server_policies.get(self.slots[0].name, self.policy)
        server = tool.split(SEPARATOR, 1)[0]
        return self.server_policies.get(server, self.policy)

    @asynccontextmanager
    async def open(self, on_abort: AbortHook, *, prestart: bool = False) -> AsyncIterator[GuardedProxy]:
        """A new session, closed (with its own upstream connections) on exit."""
        key = next(self._ids)
        downstream = SessionDownstream()
        links: list[Link] = []
        async with AsyncExitStack() as stack:
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            for slot in self.slots:
                if slot.shared:
                    shared = SharedLink(slot, key, downstream)
                    stack.callback(shared.close)
                    links.append(shared)
                else:
                    own = OwnLink(slot, downstream, tg, merged=len(self.slots) > 1)
                    stack.push_async_callback(own.aclose)
                    if prestart:
                        await own.prestart()
                    links.append(own)
            policy_for = self.policy_for if self.server_policies else None
            detector = LoopDetector(self.policy, policy_for)
            proxy = GuardedProxy(links, detector, self.policy, on_abort, downstream, self.observe)
            proxy.log_contents = self.log_contents
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


class AbortLatch:
    """Remembers that a session must end, and after which reply; ``then`` runs at once."""

    def __init__(self, then: Callable[[], object] | None = None) -> None:
        self.verdict: Verdict | None = None
        self.request_id: types.RequestId | None = None
        self.then = then

    def __call__(self, request_id: types.RequestId | None, verdict: Verdict) -> None:
        self.verdict, self.request_id = verdict, request_id
        if self.then is not None:
            self.then()
