"""An owned agent key's state written behind the calls: off their path, coalesced, never lost at exit."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mcp_loop_guard.core.detector import Outcome, call_of
from mcp_loop_guard.core.model import Action
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import AgentLoop, SqliteStore, StoreHealth

pytestmark = pytest.mark.anyio

KEY = "agent-under-test"


class CountingSqlite(SqliteStore):
    """A real SQLite store that counts its writes."""

    writes = 0

    async def save(self, key: str, state: State, ttl: float) -> None:
        self.writes += 1
        await super().save(key, state, ttl)


async def _stored(path: Path) -> State:
    """The state as another process would read it from the file."""
    reader = SqliteStore(path)
    try:
        state = await reader.load(KEY)
    finally:
        await reader.aclose()
    assert state is not None
    return state


async def _call(agent: AgentLoop, arguments: dict[str, object], result: str) -> Action:
    """One call through the agent: begin, then finish with ``result``; the verdict's action."""
    ticket, verdict = await agent.begin(call_of("search", arguments, None), Policy(), time.time())
    if ticket is None:
        return verdict.action
    return (await agent.finish(ticket, Outcome(result), time.time())).action


async def test_a_burst_of_calls_costs_fewer_writes_than_calls_and_the_last_state_is_written(tmp_path: Path) -> None:
    """Calls in quick succession coalesce into a few writes; soon after the burst the file holds the latest state."""
    path = tmp_path / "state.sqlite3"
    store = CountingSqlite(path)
    agent = AgentLoop(store, KEY, Policy(), ttl=600, health=StoreHealth("sqlite"))
    calls = 40
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.write_behind)
        await anyio.lowlevel.checkpoint()
        for index in range(calls):
            assert await _call(agent, {"q": index}, f"result {index}") is Action.ALLOW
            await anyio.lowlevel.checkpoint()  # let the writer run between calls, as the relay does while it waits
        assert store.writes < calls
        with anyio.fail_after(5):
            while (await _stored(path)).wire() != agent.state.wire():  # noqa: ASYNC110 - another reader of the file
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    await store.aclose()


async def test_a_refusal_is_in_the_file_before_the_refused_call_returns(tmp_path: Path) -> None:
    """The guard may be killed right after it refuses: the refusal count must already be written."""
    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path)
    agent = AgentLoop(store, KEY, Policy(), ttl=600, health=StoreHealth("sqlite"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.write_behind)
        actions = [await _call(agent, {"q": "same"}, "same result") for _ in range(Policy().block_threshold)]
        assert actions[-1] is Action.BLOCK
        assert (await _stored(path)).blocks == 1  # read at once: no await gave the writer a turn
        tg.cancel_scope.cancel()
    await store.aclose()


async def test_flush_writes_what_the_writer_had_not_yet(tmp_path: Path) -> None:
    """Without a writer (or with one that has not run yet) the exit flush leaves the file current."""
    path = tmp_path / "state.sqlite3"
    store = CountingSqlite(path)
    agent = AgentLoop(store, KEY, Policy(), ttl=600, health=StoreHealth("sqlite"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.write_behind)
        await anyio.lowlevel.checkpoint()
        for index in range(3):
            await _call(agent, {"q": index}, "r")
        tg.cancel_scope.cancel()  # exit before the writer's turn
    await agent.flush(time.time())
    assert (await _stored(path)).wire() == agent.state.wire()
    await store.aclose()
