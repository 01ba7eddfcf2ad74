"""The event log replays to the guard's own verdicts: its lines keep the order the loop state saw the calls.

Replay ends each call where its line stands in the file. So a line is written as the state
takes the call's end, not after the store's write (an answer written after a refusal the state
judged later would be a copy still in flight to replay), and a call that ends without an answer
has a line too (replay releases it there, as the guard did).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_loop_guard.config import GuardConfig
from mcp_loop_guard.core.state import State
from mcp_loop_guard.plan import Plan, plan
from mcp_loop_guard.proxy.relay.events import EventLog
from mcp_loop_guard.proxy.relay.judge import Judge, Pending, Refusal
from mcp_loop_guard.replay import judge_lines
from mcp_loop_guard.settings import FileSettings, load_settings
from mcp_loop_guard.store.agent import AgentLoop, StoreHealth
from mcp_loop_guard.store.memory import MemoryStore
from mcp_loop_guard.traces import read_trace

pytestmark = pytest.mark.anyio

SAME: dict[str, Any] = {"content": [{"type": "text", "text": "same"}]}


class SlowDisk(MemoryStore):
    """A memory store whose next write, once asked, waits until the test lets it go (a disk that stalls)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall: anyio.Event | None = None
        self.stalled = anyio.Event()

    async def save(self, key: str, state: State, ttl: float) -> None:
        stall, self.stall = self.stall, None
        if stall is not None:
            self.stalled.set()
            await stall.wait()
        await super().save(key, state, ttl)


def _judge(decided: Plan, store: MemoryStore, log: Path, *, contents: bool = False) -> Judge:
    agent = AgentLoop(store, "agent", decided.policies, ttl=600, health=StoreHealth("memory"))
    clock = itertools.count(1000.0, 0.5)
    return Judge(
        agent, decided.policies, label="agent", events=EventLog(log, contents=contents), clock=lambda: next(clock)
    )


def _defaults() -> Plan:
    return plan(GuardConfig(None, (), FileSettings({})), load_settings(FileSettings({})))


def _logged_and_replayed(log: Path, decided: Plan) -> tuple[list[dict[str, Any]], list[tuple[str, str | None]]]:
    """The log's lines, and replay's (verdict, rule) for each, with the guard's settings."""
    lines = [json.loads(text) for text in log.read_text().splitlines()]
    with log.open(encoding="utf-8") as stream:
        replayed = [(item.verdict, item.rule) for item in judge_lines(read_trace(stream, log.name), decided.policies)]
    return lines, replayed


async def _begin(judge: Judge) -> Pending:
    pending = await judge.begin("srv", "search", "search", {"q": "x"})
    assert isinstance(pending, Pending)
    return pending


async def test_an_answer_whose_write_stalls_is_logged_before_the_refusal_judged_after_it(tmp_path: Path) -> None:
    """The 4th copy's answer is judged, its write stalls, the 5th copy is refused: replay says what the guard said."""
    decided = _defaults()
    store, log = SlowDisk(), tmp_path / "events.jsonl"
    judge = _judge(decided, store, log)
    live: list[tuple[str, str | None]] = []
    for _ in range(3):
        await judge.finish(await _begin(judge), SAME)
    fourth = await _begin(judge)
    stall = store.stall = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(judge.finish, fourth, SAME)
        await store.stalled.wait()
        refused = await judge.begin("srv", "search", "search", {"q": "x"})
        assert isinstance(refused, Refusal)
        live.append((refused.verdict.judged.name.lower(), refused.verdict.family and refused.verdict.family.value))
        stall.set()
    lines, replayed = _logged_and_replayed(log, decided)
    assert live == [("block", "identical")]
    assert [(line["seq"], line["verdict"], line.get("rule")) for line in lines] == [
        (1, "allow", None),
        (2, "allow", None),
        (3, "warn", "identical"),
        (4, "warn", "identical"),
        (5, "block", "identical"),
    ]
    assert replayed == [(line["verdict"], line.get("rule")) for line in lines]


async def test_a_copy_dropped_in_flight_is_logged_and_released_where_the_guard_released_it(tmp_path: Path) -> None:
    """Three copies at once, the first cancelled: the third was warned as a burst of three, and replay says so too."""
    decided = _defaults()
    log = tmp_path / "events.jsonl"
    judge = _judge(decided, MemoryStore(), log)
    first, second, third = [await _begin(judge) for _ in range(3)]
    await judge.dropped(first)
    assert await judge.finish(second, SAME) is None
    warned = await judge.finish(third, SAME)
    assert warned is not None
    lines, replayed = _logged_and_replayed(log, decided)
    assert [(line["seq"], line["begun"], "outcome" in line) for line in lines] == [
        (1, 3, False),
        (2, 3, True),
        (3, 3, True),
    ]
    assert [(line["verdict"], line.get("rule"), line.get("count")) for line in lines][-1] == ("warn", "burst", 3)
    assert replayed == [("unknown", None), ("allow", None), ("warn", "burst")]


async def test_interim_answers_replay_as_released_in_both_forms(tmp_path: Path) -> None:
    """A task handle answers an identical call five times: no streak live, and none in replay of either form."""
    decided = _defaults()
    handle = {"resultType": "task", "task": {"taskId": "t1", "status": "working"}}
    for contents in (False, True):
        log = tmp_path / f"events-{contents}.jsonl"
        judge = _judge(decided, MemoryStore(), log, contents=contents)
        for _ in range(5):
            assert await judge.finish(await _begin(judge), handle) is None
        for _ in range(3):
            await judge.finish(await _begin(judge), SAME)
        lines, replayed = _logged_and_replayed(log, decided)
        assert [line["verdict"] for line in lines] == [*["allow"] * 6, "allow", "warn"]
        assert replayed == [*[("unknown", None)] * 5, ("allow", None), ("allow", None), ("warn", "identical")]
