"""Every state store: keep, expire, update atomically across processes, claim keys, survive faults."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import MemoryStore, Owner, SqliteStore, Store, StoreError, open_store
from mcp_loop_guard.store.redis import RedisStore
from tests.redis_harness import RedisServer, set_read_only

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Each kind of store, fresh."""
    opened: Store
    if request.param == "memory":
        opened = MemoryStore()
    elif request.param == "sqlite":
        opened = SqliteStore(tmp_path / "state.sqlite3")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        opened = RedisStore(server.url, timeout=2.0)
    yield opened
    await opened.aclose()


def counted(blocks: int) -> State:
    """A state whose refusal count is ``blocks`` (an easy value to check)."""
    state = State()
    state.blocks = blocks
    return state


async def test_a_saved_state_loads_back_until_it_expires(store: Store) -> None:
    """save then load gives the same state; after its time to live it is gone."""
    await store.save("agent-1", counted(2), ttl=60)
    loaded = await store.load("agent-1")
    assert loaded is not None
    assert loaded.blocks == 2
    assert await store.load("agent-2") is None
    await store.save("short", counted(1), ttl=0.05)
    with anyio.fail_after(5):
        while await store.load("short") is not None:  # noqa: ASYNC110 - expiry sends no event
            await anyio.sleep(0.01)
    assert await store.load("short") is None


async def test_update_folds_the_stored_state_and_keeps_the_result(store: Store) -> None:
    """update() reads, applies the fold, writes, and returns both the state and the fold's value."""

    def bump(state: State) -> int:
        state.blocks += 1
        return state.blocks

    for expected in (1, 2, 3):
        state, value = await store.update("agent", bump, ttl=60)
        assert value == expected
        assert state.blocks == expected
    loaded = await store.load("agent")
    assert loaded is not None
    assert loaded.blocks == 3


async def test_keys_lists_live_agents_and_reset_forgets_one(store: Store) -> None:
    """keys() shows names and counts; reset() unblocks an agent."""
    await store.save("a", counted(3), ttl=60)
    await store.save("b", counted(0), ttl=60)
    listed = {info.key: info.summary() for info in await store.keys()}
    assert set(listed) == {"a", "b"}
    assert listed["a"]["refusals"] == 3
    assert await store.reset("a") is True
    assert await store.reset("a") is False
    assert [info.key for info in await store.keys()] == ["b"]


async def test_two_live_guards_claim_two_keys_and_a_dead_ones_key_is_taken_over(store: Store) -> None:
    """Concurrent owners get base, base#2; a key whose owner exited goes to the next guard."""
    me = Owner.this_process(lease=0)
    sibling = await anyio.open_process([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = Owner(socket.gethostname(), sibling.pid, _started(sibling.pid), 0)
        assert await store.claim("stdio:x", other, ttl=60) == ("stdio:x", False)
        assert await store.claim("stdio:x", me, ttl=60) == ("stdio:x#2", False)
    finally:
        sibling.kill()
        await sibling.wait()
    third = Owner(socket.gethostname(), os.getpid(), Owner.this_process(0).started, 0)
    assert await store.claim("stdio:x", third, ttl=60) == ("stdio:x", True)
    await store.release("stdio:x", third)
    assert await store.claim("stdio:x", third, ttl=60) == ("stdio:x", False)


async def test_a_reused_pid_is_not_the_same_owner(store: Store) -> None:
    """An owner record with our PID but another start time is a dead process: its key is free."""
    ghost = Owner(socket.gethostname(), os.getpid(), 12345.0, 0)
    await store.claim("stdio:y", ghost, ttl=60)
    assert await store.claim("stdio:y", Owner.this_process(0), ttl=60) == ("stdio:y", True)


@contextmanager
def _unreaped_child() -> Iterator[tuple[int, float]]:
    """A child process that has exited and is not waited for yet (a zombie): its pid and start time."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = _started(child.pid)
    assert child.stdin is not None
    child.stdin.close()  # it reads EOF and exits
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has exited; it stays a zombie
    try:
        yield child.pid, started
    finally:
        child.wait(10)


async def test_an_owner_that_exited_but_is_not_yet_reaped_is_not_alive(store: Store) -> None:
    """A guard killed and not yet waited for by its client (a zombie): its key is free."""
    with _unreaped_child() as (pid, started):
        await store.claim("stdio:z", Owner(socket.gethostname(), pid, started, 0), ttl=60)
        assert await store.claim("stdio:z", Owner.this_process(0), ttl=60) == ("stdio:z", True)


async def test_an_owner_on_another_host_is_alive_while_its_lease_runs(store: Store) -> None:
    """From another host only the lease can be checked."""
    import time

    remote = Owner("other-host.example", 4242, 1.0, lease=time.time() + 30)
    await store.claim("agent:shared", remote, ttl=60)
    assert (await store.claim("agent:shared", Owner.this_process(0), ttl=60))[0] == "agent:shared#2"
    expired = Owner("other-host.example", 4343, 1.0, lease=time.time() - 1)
    await store.claim("agent:old", expired, ttl=60)
    assert await store.claim("agent:old", Owner.this_process(0), ttl=60) == ("agent:old", True)


def _started(pid: int) -> float:
    from mcp_loop_guard.store.base import process_start_time

    started = process_start_time(pid)
    assert started is not None
    return started


WORKER = textwrap.dedent(
    """
    import sys, anyio
    from mcp_loop_guard.store import open_store

    def bump(state):
        state.blocks += 1

    async def main():
        store = open_store(sys.argv[1], timeout=5.0)
        for _ in range(int(sys.argv[2])):
            await store.update("contended", bump, ttl=600)
        await store.aclose()

    anyio.run(main)
    """
)


async def _run_worker(spec: str) -> None:
    with anyio.fail_after(120):
        done = await anyio.run_process([sys.executable, "-c", WORKER, spec, "100"], check=False)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_concurrent_updates_from_many_processes_never_lose_a_count(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four processes folding 100 events each into one key: the state has all 400."""
    if kind == "sqlite":
        spec = f"sqlite://{tmp_path / 'shared.sqlite3'}"
    else:
        spec = request.getfixturevalue("redis_server").url
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(_run_worker, spec)
    store = open_store(spec, timeout=5.0)
    state = await store.load("contended")
    await store.aclose()
    assert state is not None
    assert state.blocks == 400


async def test_a_corrupt_sqlite_file_is_set_aside_and_a_new_one_started(tmp_path: Path) -> None:
    """A file that is not a database is moved beside, with the store working on a fresh file."""
    path = tmp_path / "state.sqlite3"
    path.write_bytes(b"this is not a database, just text that someone wrote here" * 100)
    store = SqliteStore(path)
    await store.save("k", counted(1), ttl=60)
    loaded = await store.load("k")
    assert loaded is not None
    assert loaded.blocks == 1
    aside = [name for name in os.listdir(tmp_path) if ".corrupt-" in name]
    assert len(aside) == 1
    await store.aclose()


async def test_a_read_only_sqlite_file_raises_store_errors_not_crashes(tmp_path: Path) -> None:
    """A file the guard may not change: writes fail as StoreError, reads still work."""
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "state.sqlite3"
    first = SqliteStore(path)
    await first.save("k", counted(1), ttl=60)
    await first.aclose()
    for name in ("state.sqlite3-wal", "state.sqlite3-shm"):
        (directory / name).unlink(missing_ok=True)
    set_read_only(path, read_only=True)
    try:
        store = SqliteStore(path)
        with pytest.raises(StoreError, match="readonly"):
            await store.save("k", State(), ttl=60)
        loaded = await store.load("k")
        assert loaded is not None
        assert loaded.blocks == 1
        await store.aclose()
    finally:
        set_read_only(path, read_only=False)


async def test_a_locked_sqlite_file_is_waited_on_for_the_timeout_only(tmp_path: Path) -> None:
    """Another process holding the write lock: a write fails as StoreError after the busy timeout."""
    import sqlite3

    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path, timeout=0.1)
    await store.save("k", counted(1), ttl=60)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with anyio.fail_after(5), pytest.raises(StoreError, match="locked"):
            await store.save("k", counted(2), ttl=60)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    await store.save("k", counted(3), ttl=60)
    await store.aclose()


async def test_redis_down_is_a_store_error_within_the_timeout_and_comes_back(redis_server: RedisServer) -> None:
    """A dead Redis fails each operation fast; once it is back, the same store object works again."""
    store = RedisStore(redis_server.url, timeout=0.2)
    await store.save("k", counted(1), ttl=60)
    redis_server.stop()
    with anyio.fail_after(5):
        with pytest.raises(StoreError):
            await store.load("k")
        with pytest.raises(StoreError):
            await store.keys()
    redis_server.start()
    await store.save("k", counted(2), ttl=60)
    loaded = await store.load("k")
    assert loaded is not None
    assert loaded.blocks == 2
    await store.aclose()
