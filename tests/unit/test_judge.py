"""The judge: interim answers (a task handle, input_required) are not the call's outcome and move no streak."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_loop_guard.core.model import Action
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy.relay.judge import Judge, Pending, Refusal
from mcp_loop_guard.store.agent import AgentLoop, StoreHealth
from mcp_loop_guard.store.memory import MemoryStore

pytestmark = pytest.mark.anyio

POLICY = Policy(warn_threshold=2, block_threshold=3)
DONE: dict[str, Any] = {"content": [{"type": "text", "text": "done"}]}
INTERIM: dict[str, dict[str, Any]] = {
    "input_required": {"resultType": "input_required", "inputRequests": {"a": {"method": "sampling/createMessage"}}},
    "task handle (2026-07-28)": {"resultType": "task", "task": {"taskId": "t1", "status": "working"}},
}


def _judge() -> Judge:
    agent = AgentLoop(MemoryStore(), "agent", POLICY, ttl=60, health=StoreHealth("memory"))
    return Judge(agent, lambda server, tool: POLICY, label="agent", clock=lambda: 1000.0)


async def _call(judge: Judge, result: dict[str, Any]) -> dict[str, Any] | Refusal | None:
    pending = await judge.begin("srv", "research", "research", {"topic": "x"})
    if isinstance(pending, Refusal):
        return pending
    assert isinstance(pending, Pending)
    return await judge.finish(pending, result)


@pytest.mark.parametrize("interim", list(INTERIM))
async def test_interim_answers_move_no_streak(interim: str) -> None:
    """However many interim answers an identical call gets, only complete results count toward a loop."""
    judge = _judge()
    for _ in range(5):
        assert await _call(judge, INTERIM[interim]) is None  # relayed unchanged, never refused
    assert await _call(judge, DONE) is None
    warned = await _call(judge, DONE)
    assert isinstance(warned, dict)
    assert warned["content"][-1]["text"].startswith("[loop-guard]")
    refused = await _call(judge, DONE)
    assert isinstance(refused, Refusal)
    assert refused.verdict.action is Action.BLOCK


async def test_an_explicit_complete_result_counts() -> None:
    """``resultType: complete`` (2026-07-28) is a final result like one without the tag."""
    judge = _judge()
    complete = {**DONE, "resultType": "complete"}
    assert await _call(judge, complete) is None
    warned = await _call(judge, complete)
    assert isinstance(warned, dict)
