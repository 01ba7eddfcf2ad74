"""A state file another process holds locked, under an HTTP guard serving many agents: the guard itself never stalls.

No SQLite call waits on the event loop: a write is tried there only told not to wait, and
one refused for the lock waits in a worker thread (up to the store's timeout, then the guard
fails open), holding up the call that made it, never the event loop: ``/healthz`` answers at
once. And after a write failed, the agents' writes pause for a moment
(their state stays in memory), so the agents sharing one upstream, whose answers wait behind
each other's judging, are not held up by a wait per call.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import SqliteStore
from tests.harness import CountingUpstream
from tests.http_harness import KEY_HEADER, Rig, ServerProcess, http_get, payload_for, raw_call
from tests.store.test_store_faults import locked, make_state_file

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

STORE_WAIT = 1.0
"""The store's timeout (``LOOP_GUARD_STATE_TIMEOUT_SECONDS``): how long one write waits on the lock."""
AGENTS = 4
CALLS = 8
"""Calls each agent makes, one after the other, while the file is locked."""
PROBE_LIMIT = STORE_WAIT
"""How long one ``/healthz`` may take: less than one write waiting on the lock, had it held up the event loop."""
CALLS_LIMIT = AGENTS * CALLS * STORE_WAIT / 2
"""How long all the calls may take: had half of them waited on the lock, one after the other, they would not be done."""


async def calls_of(guard: ServerProcess, agent: str, done: list[str]) -> None:
    """``CALLS`` echo calls of one agent (keyed by the header); each answered call's text goes to ``done``."""
    for n in range(CALLS):
        response = await raw_call(guard.mcp_url, "echo", {"text": f"{agent}-{n}"}, {KEY_HEADER: agent})
        assert response.status_code == 200, response.text
        result = payload_for(response, 1)["result"]
        assert result["isError"] is False, result
        done.append(result["content"][0]["text"])


async def test_a_locked_state_file_stalls_neither_healthz_nor_other_agents(
    rig: Rig, counting: CountingUpstream, tmp_path: Path
) -> None:
    """While another process holds the lock, all the agents' calls are answered in time and /healthz stays quick."""
    path = tmp_path / "state.sqlite3"
    await make_state_file(path)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}", "LOOP_GUARD_STATE_TIMEOUT_SECONDS": str(STORE_WAIT)}
    done: list[str] = []
    probes: list[int] = []
    async with rig.guard(["--stateless", "--", *counting.command], env=env) as guard, locked(path):
        finished = anyio.Event()

        async def agents() -> None:
            async with anyio.create_task_group() as tg:
                for agent in range(AGENTS):
                    tg.start_soon(calls_of, guard, f"agent-{agent}", done)
            finished.set()

        async def probe() -> None:
            while not finished.is_set():
                with anyio.fail_after(PROBE_LIMIT):
                    probes.append((await http_get(guard.url("/healthz"))).status_code)
                await anyio.sleep(0.05)

        with anyio.fail_after(CALLS_LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(agents)
                tg.start_soon(probe)
        with anyio.fail_after(10):
            ready = (await http_get(guard.url("/readyz"))).json()
        log = guard.stderr_tail()
    assert sorted(done) == sorted(f"agent-{a}-{n}" for a in range(AGENTS) for n in range(CALLS)), log
    assert len(counting.calls("echo")) == AGENTS * CALLS, log
    assert probes, "no /healthz probe ran while the agents called"
    assert set(probes) == {200}, probes
    assert ready["store"]["status"] == "degraded", ready
    unavailable = [line for line in log.splitlines() if "state store is unavailable" in line]
    assert len(unavailable) == 1, log


async def test_a_write_refused_for_the_lock_waits_for_it_off_the_event_loop(tmp_path: Path) -> None:
    """A lock held for a moment: the write, refused at once on the event loop, waits in a thread and lands."""
    path = tmp_path / "state.sqlite3"
    await make_state_file(path)
    store = SqliteStore(path, timeout=WAIT)
    ticks = 0
    try:
        async with anyio.create_task_group() as tg, locked(path):
            tg.start_soon(store.save, "agent", State(), 600)
            with anyio.fail_after(WAIT / 2):  # the event loop goes on while the write waits on the lock
                for _ in range(6):
                    await anyio.sleep(0.05)
                    ticks += 1
            assert await anyio.to_thread.run_sync(_row_count, path) == 1  # not written while locked
        assert ticks == 6
        assert await store.load("agent") is not None
    finally:
        await store.aclose()


WAIT = 10.0
"""The store's timeout in the test above: a write waiting that long on the event loop would stop its ticks."""


def _row_count(path: Path) -> int:
    """The agents' rows in the file, as another connection reads them (a reader is not held up by a writer's lock)."""
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM agents").fetchone()[0])
