"""SQLite's live files: a claimed key written by one system call per event, and never lost when its guard dies."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import Owner, SqliteStore
from mcp_loop_guard.store.base import write_state
from mcp_loop_guard.store.live import LiveFiles, Record, decode, encode

pytestmark = pytest.mark.anyio

DIES_HOLDING = textwrap.dedent(
    """
    import os, sys, anyio
    from mcp_loop_guard.core.state import State
    from mcp_loop_guard.store import Owner, SqliteStore

    async def main():
        store = SqliteStore(__import__("pathlib").Path(sys.argv[1]))
        key, _ = await store.claim(sys.argv[2], Owner.this_process(lease=0), ttl=600)
        for blocks in range(1, int(sys.argv[3]) + 1):
            state = State()
            state.blocks = blocks
            await store.save(key, state, ttl=600)
        os._exit(0)  # no release, no close: as a SIGKILL leaves it

    anyio.run(main)
    """
)


async def die_holding(path: Path, key: str, events: int) -> None:
    """Another process claims ``key``, writes ``events`` states (the last with ``blocks == events``) and dies."""
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-c", DIES_HOLDING, str(path), key, str(events)], check=False)
    assert done.returncode == 0, done.stderr.decode()


def blocks(state: State | None) -> int | None:
    return state.blocks if state is not None else None


def counted(n: int) -> State:
    state = State()
    state.blocks = n
    return state


async def row(path: Path, key: str) -> int | None:
    """The row's state as another process reads it (no claim, no live file)."""
    reader = SqliteStore(path)
    try:
        return blocks(await reader.load(key))
    finally:
        await reader.aclose()


async def test_a_claimed_key_is_written_to_its_live_file_and_to_its_row_at_release(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path)
    me = Owner.this_process(lease=0)
    key, _ = await store.claim("stdio:a", me, ttl=600)
    await store.save(key, counted(2), ttl=600)
    live = LiveFiles(tmp_path / "state.sqlite3-live")
    record = live.read(key)
    assert record is not None
    assert record.state == write_state(counted(2))
    assert await row(path, key) is None, "while held, the row is not written per event"
    await store.release(key, me)
    assert await row(path, key) == 2
    assert not live.path(key).exists(), "released: the row holds the state, the file goes"
    await store.aclose()


async def test_the_state_of_a_guard_that_died_holding_its_key_reaches_the_next_claim(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    await die_holding(path, "stdio:b", events=4)
    store = SqliteStore(path)
    key, took_over = await store.claim("stdio:b", Owner.this_process(lease=0), ttl=600)
    assert (key, took_over) == ("stdio:b", True)
    assert blocks(await store.load(key)) == 4, "every event the dead guard wrote, up to the last"
    await store.aclose()
    assert await row(path, key) == 4


async def test_a_record_cut_short_is_ignored_and_the_row_stands(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    await die_holding(path, "stdio:c", events=3)
    live = LiveFiles(tmp_path / "state.sqlite3-live")
    whole = live.path("stdio:c").read_bytes()
    writer = SqliteStore(path)
    await writer.save("stdio:c", counted(1), ttl=600)  # an older row, as a release before would have left
    await writer.aclose()
    live.path("stdio:c").write_bytes(whole[:-5])
    store = SqliteStore(path)
    key, _ = await store.claim("stdio:c", Owner.this_process(lease=0), ttl=600)
    assert blocks(await store.load(key)) == 1
    await store.aclose()


async def test_any_claim_folds_the_files_of_dead_guards_once_a_purge_is_due(tmp_path: Path) -> None:
    """A dead guard's agent that never comes back is still listed right, and its file does not stay."""
    path = tmp_path / "state.sqlite3"
    await die_holding(path, "stdio:gone", events=5)
    live = LiveFiles(tmp_path / "state.sqlite3-live")
    assert live.path("stdio:gone").exists()
    store = SqliteStore(path)
    await store.claim("stdio:other", Owner.this_process(lease=0), ttl=600)
    assert not live.path("stdio:gone").exists()
    assert await row(path, "stdio:gone") == 5
    await store.aclose()


async def test_state_list_shows_a_running_guards_live_state_and_reset_forgets_it(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    guard = SqliteStore(path)
    key, _ = await guard.claim("stdio:d", Owner.this_process(lease=0), ttl=600)
    await guard.save(key, counted(3), ttl=600)
    operator = SqliteStore(path)
    [info] = await operator.keys()
    assert (info.key, blocks(info.state), info.owner is not None) == (key, 3, True)
    assert await operator.reset(key)
    assert await operator.keys() == []
    assert not await operator.reset(key)
    await operator.aclose()
    await guard.aclose()


async def test_without_a_live_folder_a_claimed_key_is_written_to_its_row(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    (tmp_path / "state.sqlite3-live").write_text("a file where the folder would be")
    store = SqliteStore(path)
    key, _ = await store.claim("stdio:e", Owner.this_process(lease=0), ttl=600)
    await store.save(key, counted(2), ttl=600)
    assert await row(path, key) == 2
    await store.aclose()


@given(
    key=st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1),
    expires=st.floats(allow_nan=False),
    state=st.text(st.characters(blacklist_categories=("Cs",))),
)
def test_a_record_reads_back_whole_and_never_when_cut(key: str, expires: float, state: str) -> None:
    record = Record(key, expires, state)
    data = encode(record)
    assert decode(data) == record
    assert decode(data + b"stale bytes of a longer record") == record
    for cut in range(len(data)):
        assert decode(data[:cut]) is None


def test_a_file_number_is_not_inherited_by_the_upstream(tmp_path: Path) -> None:
    live = LiveFiles(tmp_path / "live").open("stdio:f")
    try:
        assert not os.get_inheritable(live.fd)
    finally:
        live.close(remove=True)


@settings(max_examples=50, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1),
    states=st.lists(st.text(st.characters(blacklist_categories=("Cs",))), min_size=1, max_size=4),
)
def test_a_live_file_holds_what_encode_writes_and_the_last_record_for_its_row(
    tmp_path: Path, key: str, states: list[str]
) -> None:
    """The live file's own fast path writes the bytes of :func:`encode`, a shorter record over a longer one too."""
    live = LiveFiles(tmp_path / "live").open(key)
    try:
        assert live.last is None
        for expires, state in enumerate(states):
            live.write(float(expires), state.encode())
            record = Record(key, float(expires), state)
            assert live.path.read_bytes()[: len(encode(record))] == encode(record)
            assert LiveFiles(live.path.parent).read(key) == record
            assert live.last == record
    finally:
        live.close(remove=True)
