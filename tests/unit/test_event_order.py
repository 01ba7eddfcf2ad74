"""The event log replays to the guard's own verdicts: its lines keep the order the loop state saw the calls.

Replay ends each call where its line stands in the file. So a line is written as the state
takes the call's end, not after the store's write (an answer written after a refusal the state
judged later would be a copy still in flight to replay), and a call that ends without an answer
has a line too (replay releases it there, as the guard did).
"""

from __future__ import annotations

import itertools
import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


class JitteryDisk(MemoryStore):
    """A memory store whose writes each take a drawn number of scheduler turns (a disk of uneven speed)."""

    def __init__(self, turns: list[int]) -> None:
        super().__init__()
        self.turns = turns or [0]
        self.writes = 0

    async def save(self, key: str, state: State, ttl: float) -> None:
        turns = self.turns[self.writes % len(self.turns)]
        self.writes += 1
        for _ in range(turns):
            await anyio.lowlevel.checkpoint()
        await super().save(key, state, ttl)


CALLS = [("search", {"q": "x"}), ("search", {"q": "y"}), ("write_file", {"path": "a"}), ("status", {})]
ANSWERS: list[dict[str, Any]] = [
    SAME,
    {"content": [{"type": "text", "text": "other"}]},
    {"content": [{"type": "text", "text": "failed"}], "isError": True},
    {"resultType": "task", "task": {"taskId": "t1", "status": "working"}},
]
Step = tuple[str, int, int]
STEPS = st.one_of(
    st.tuples(st.just("begin"), st.integers(0, len(CALLS) - 1), st.integers(0, 2)),
    st.tuples(st.sampled_from(["answer", "error", "drop"]), st.integers(0, 7), st.integers(0, len(ANSWERS) - 1)),
)


async def _play(steps: list[Step], turns: list[int], log: Path, decided: Plan) -> int:
    """Run the steps against one judge, each in a task of its own, a few turns apart; the calls begun."""
    judge = _judge(decided, JitteryDisk(turns), log)
    begun: list[Pending] = []
    taken: set[int] = set()
    calls = 0

    async def begin(tool: str, arguments: dict[str, Any]) -> None:
        pending = await judge.begin("srv", tool, tool, arguments)
        if isinstance(pending, Pending):
            begun.append(pending)

    async def end(kind: str, pending: Pending, answer: int) -> None:
        if kind == "answer":
            await judge.finish(pending, ANSWERS[answer])
        elif kind == "error":
            await judge.failed(pending, {"code": -32603, "message": "upstream broke"})
        else:
            await judge.dropped(pending)

    async with anyio.create_task_group() as group:
        for kind, index, extra in steps:
            if kind == "begin":
                calls += 1
                group.start_soon(begin, *CALLS[index])
                for _ in range(extra):
                    await anyio.lowlevel.checkpoint()
                continue
            open_ = [n for n in range(len(begun)) if n not in taken]
            if open_:
                chosen = open_[index % len(open_)]
                taken.add(chosen)
                group.start_soon(end, kind, begun[chosen], extra)
        await anyio.lowlevel.checkpoint()
        while len(taken) < len(begun) or calls > len(begun) + _refused(log):
            await anyio.lowlevel.checkpoint()
            for n in range(len(begun)):
                if n not in taken:
                    taken.add(n)
                    group.start_soon(end, "answer", begun[n], 0)
    return calls


def _refused(log: Path) -> int:
    return sum(1 for text in log.read_text().splitlines() if '"outcome"' not in text and '"ended"' not in text)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(STEPS, min_size=1, max_size=40),
    turns=st.lists(st.integers(0, 3), max_size=8),
    mode=st.sampled_from(["enforce", "shadow"]),
)
def test_any_interleaving_with_any_write_speed_replays_to_the_guards_verdicts(
    steps: list[Step], turns: list[int], mode: str
) -> None:
    """Calls begun, answered, failed, dropped in any interleaving, writes of any speed: replay agrees line by line."""
    decided = plan(
        GuardConfig(None, (), FileSettings({})),
        load_settings(FileSettings({}), warn_threshold=2, block_threshold=3, abort_threshold=1000, mode=mode),
    )
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "events.jsonl"
        log.touch()
        calls = anyio.run(_play, steps, turns, log, decided)
        lines, replayed = _logged_and_replayed(log, decided)
    assert len(lines) == calls
    for line, again in zip(lines, replayed, strict=True):
        if again[0] == "unknown":
            assert "outcome" not in line, line
            assert "ended" in line, line
        else:
            assert (line["verdict"], line.get("rule") if line["verdict"] != "allow" else None) == again, line
