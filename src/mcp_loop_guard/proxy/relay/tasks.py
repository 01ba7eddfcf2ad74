"""Task-augmented tool calls (``tasks/*``, 2025-11-25): the tool's result arrives later, on ``tasks/result``.

A ``tools/call`` that carries ``task`` is answered at once with a task handle; the tool's
real result is what the client later fetches with ``tasks/result``. The guard judges the call
when it is asked (a refused call never creates a task) and holds its ticket under the task's
id until that result passes, so a task run again and again with the same outcome is a loop
like any other, warned on the result the model reads. Held calls are bounded: when a client
leaves too many tasks unfetched, the oldest is let go unjudged.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp_loop_guard.proxy.relay.judge import Judge, Pending
from mcp_loop_guard.proxy.wire.messages import Message

logger = logging.getLogger(__name__)

MAX_HELD = 256
"""Tasks whose result the client has not fetched yet, per session."""


def created_task(result: dict[str, Any]) -> str | None:
    """The id of the task a ``tools/call`` answer created; None for a tool's own result."""
    task = result.get("task")
    if "content" in result or not isinstance(task, dict):
        return None
    ident = task.get("taskId")
    return ident if isinstance(ident, str) else None


def wrong_shape(result: dict[str, Any]) -> bool:
    """A tools/call result whose content is not a list (interim results and task handles carry none)."""
    if result.get("resultType") not in (None, "complete") or created_task(result) is not None:
        return False
    return not isinstance(result.get("content"), list)


class HeldTasks:
    """The judged calls of one session waiting for their task's result."""

    def __init__(self, judge: Judge, limit: int = MAX_HELD) -> None:
        self.judge = judge
        self.limit = limit
        self._held: dict[str, Pending] = {}

    def __contains__(self, ident: object) -> bool:
        return ident in self._held

    async def hold(self, ident: str, pending: Pending) -> None:
        """Keep a call until its task's result is fetched."""
        if len(self._held) >= self.limit and ident not in self._held:
            oldest = next(iter(self._held))
            logger.info("more than %d tasks unfetched; the oldest is no longer judged", self.limit)
            await self.drop(oldest)
        self._held[ident] = pending

    def take(self, ident: str) -> Pending | None:
        """The call whose result this is, once: a second ``tasks/result`` is relayed unjudged."""
        return self._held.pop(ident, None)

    async def answered(self, message: Message, task: str, *, cancelled: bool) -> None:
        """A held task's result (judged like the call's own answer) or its cancellation."""
        result = message.body.get("result")
        if cancelled:
            if isinstance(result, dict):
                await self.drop(task)
            return
        pending = self.take(task)
        if pending is None:
            return
        if isinstance(result, dict) and not wrong_shape(result):
            changed = await self.judge.finish(pending, result)
            if changed is not None:
                message.body["result"] = changed
                message.changed()
        elif isinstance(result, dict):
            await self.judge.dropped(pending)
        else:
            await self.judge.failed(pending, message.body.get("error") or {})

    async def drop(self, ident: str) -> None:
        """The task ended without a result the model reads (cancelled, upstream gone): nothing moves."""
        pending = self._held.pop(ident, None)
        if pending is not None:
            await self.judge.dropped(pending)

    async def drop_all(self) -> None:
        """The upstream that ran the tasks is gone."""
        for ident in list(self._held):
            await self.drop(ident)
