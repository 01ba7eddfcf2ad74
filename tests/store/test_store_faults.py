"""A state store that fails, through the real guard: calls keep flowing, one log line says so, it recovers.

Over stdio with SQLite: a state file another process holds locked, one the guard may not
write, and one that is not a database at all. Over HTTP with Redis: the Redis server killed
and started again, failing open (the default) and closed (``LOOP_GUARD_STATE_FAIL=closed``).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import types

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import SqliteStore
from tests.harness import MARKER, Connection, Connector, CountingUpstream, action, texts
from tests.http_harness import Rig, http_get, open_http_session, poll
from tests.redis_harness import RedisServer, set_read_only

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

HOLD_LOCK = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
db.execute("ROLLBACK")
"""
"""Holds the write lock of the file named in argv[1] until stdin closes."""
UNAVAILABLE = "cannot reach its state store"
"""Part of the refusal a guard that fails closed gives while its store is down."""


def guard_lines(connection: Connection) -> list[str]:
    """The guard's own log lines (its upstream's stderr left out)."""
    return [line for line in connection.stderr_text().splitlines() if line.startswith("mcp-loop-guard:")]


def store_lines(lines: list[str]) -> list[str]:
    """The log lines about the state store or its file."""
    return [line for line in lines if "state store" in line or "state file" in line]


async def loop_five(connection: Connection) -> list[types.CallToolResult]:
    """Five identical calls, one after the other."""
    with anyio.fail_after(30):
        return [await connection.session.call_tool("constant", {}) for _ in range(5)]


def assert_detected_as_usual(results: list[types.CallToolResult], counting: CountingUpstream, log: str) -> None:
    """Warned at the 3rd and 4th, refused at the 5th, and only four calls reached the upstream."""
    assert [action(result) for result in results] == [None, None, "warn", "warn", "block"], log
    assert [result.is_error for result in results] == [False, False, False, False, True], log
    assert len(counting.calls("constant")) == 4, log


@asynccontextmanager
async def locked(path: Path) -> AsyncIterator[anyio.abc.Process]:
    """Another process holding ``BEGIN EXCLUSIVE`` on the file, until the block ends."""
    process = await anyio.open_process([sys.executable, "-c", HOLD_LOCK, str(path)], stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        with anyio.fail_after(10):
            assert (await process.stdout.receive()).startswith(b"locked")
        yield process
    finally:
        with anyio.CancelScope(shield=True):
            assert process.stdin is not None
            await process.stdin.aclose()
            with anyio.fail_after(10):
                await process.wait()
            await process.aclose()


async def make_state_file(path: Path) -> None:
    """A state file with one unrelated agent in it, as an earlier guard leaves it."""
    store = SqliteStore(path)
    await store.save("stdio:earlier:0", State(), ttl=600)
    await store.aclose()


async def test_a_locked_state_file_fails_open_with_one_log_line(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Another process holds the file's write lock: every call is served, detection goes on, one line tells."""
    path = tmp_path / "locked.sqlite3"
    await make_state_file(path)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}"}
    async with locked(path), connect(counting.command, env=env) as conn:
        results = await loop_five(conn)
        lines = guard_lines(conn)
    log = "\n".join(lines)
    assert_detected_as_usual(results, counting, log)
    assert len(store_lines(lines)) == 1, log
    assert "locked" in store_lines(lines)[0], log


async def test_a_locked_state_file_with_fail_closed_refuses_until_the_file_takes_writes(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """LOOP_GUARD_STATE_FAIL=closed on SQLite: the call whose write fails is served, the next ones refused; then served.

    The guard cannot make its live file here (a file is where its folder would be), so the
    agent's state is written to the state file after each call, and the store's failure shows
    at that write.
    """
    path = tmp_path / "closed.sqlite3"
    await make_state_file(path)
    (tmp_path / "closed.sqlite3-live").write_text("not a folder")
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}", "LOOP_GUARD_STATE_FAIL": "closed"}
    async with connect(counting.command, env=env) as conn:
        with anyio.fail_after(30):
            async with locked(path):
                while_locked = [await conn.session.call_tool("echo", {"text": str(n)}) for n in range(3)]
            after = await conn.session.call_tool("echo", {"text": "after"})
        lines = guard_lines(conn)
    assert [result.is_error for result in while_locked] == [False, True, True]
    assert UNAVAILABLE in while_locked[1].content[0].text  # type: ignore[union-attr]
    assert not after.is_error
    assert len(counting.calls("echo")) == 2, "refused calls must not reach the upstream"
    assert any("cannot create a live file" in line for line in lines), "\n".join(lines)


async def test_a_state_file_locked_after_the_guard_took_its_key_costs_no_call(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Failing closed: a claimed key is written to its live file, which no lock on the state file stops.

    The state stays durable meanwhile: a new guard after this one exits continues the streak.
    """
    path = tmp_path / "closed.sqlite3"
    await make_state_file(path)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}", "LOOP_GUARD_STATE_FAIL": "closed"}
    async with connect(counting.command, env=env) as conn:
        with anyio.fail_after(30):
            async with locked(path):
                while_locked = [await conn.session.call_tool("constant", {}) for _ in range(2)]
        lines = guard_lines(conn)
    assert [result.is_error for result in while_locked] == [False, False]
    assert not store_lines(lines), "\n".join(lines)
    async with connect(counting.command, env=env) as again:
        with anyio.fail_after(30):
            third = await again.session.call_tool("constant", {})
    assert action(third) == "warn", "the streak written while the file was locked must reach the next guard"


async def test_a_read_only_state_file_fails_open_with_one_log_line(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """A state file the guard may not write: every call is served, detection goes on, one line tells."""
    directory = tmp_path / "ro"
    directory.mkdir()
    path = directory / "state.sqlite3"
    await make_state_file(path)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}"}
    set_read_only(path, read_only=True)
    try:
        async with connect(counting.command, env=env) as conn:
            results = await loop_five(conn)
            lines = guard_lines(conn)
    finally:
        set_read_only(path, read_only=False)
    log = "\n".join(lines)
    assert_detected_as_usual(results, counting, log)
    assert len(store_lines(lines)) == 1, log
    assert "readonly" in store_lines(lines)[0], log


async def test_a_corrupt_state_file_is_set_aside_and_a_fresh_one_used(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Garbage in the state file at start: it is moved to .corrupt-<time>, one line tells, state is kept anew."""
    directory = tmp_path / "state"
    directory.mkdir()
    path = directory / "state.sqlite3"
    garbage = b"\x00\xffnot a database at all\n" * 500
    path.write_bytes(garbage)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}"}
    async with connect(counting.command, env=env) as conn:
        results = await loop_five(conn)
        lines = guard_lines(conn)
    log = "\n".join(lines)
    assert_detected_as_usual(results, counting, log)
    assert len(store_lines(lines)) == 1, log
    aside = sorted(directory.glob("state.sqlite3.corrupt-*"))
    assert [file.read_bytes() for file in aside] == [garbage], log
    assert aside[0].name in store_lines(lines)[0], log
    with sqlite3.connect(path) as db:
        kept = db.execute("SELECT key FROM agents").fetchall()
    assert [key for (key,) in kept if key.startswith("stdio:")], "the fresh file keeps the agent's state"


async def readiness(url: str) -> tuple[int, dict[str, Any]]:
    """``/readyz``: its status code and body."""
    response = await http_get(url)
    body: dict[str, Any] = response.json()
    return response.status_code, body


def store_status(answer: tuple[int, dict[str, Any]]) -> str:
    """The store's status in a ``/readyz`` answer."""
    return str(answer[1]["store"]["status"])


async def test_redis_killed_under_an_http_guard_fails_open_and_detection_resumes(
    rig: Rig, redis_server: RedisServer, counting: CountingUpstream
) -> None:
    """Redis killed: calls still pass, /readyz says degraded with 200; Redis back: loops are detected again."""
    env = {**counting.env, "LOOP_GUARD_STATE": redis_server.url}
    async with rig.guard(["--", *counting.command], env=env) as guard:
        readyz = guard.url("/readyz")
        async with open_http_session(guard.mcp_url) as http:
            session = http.session
            with anyio.fail_after(30):
                before = [action(await session.call_tool("constant", {})) for _ in range(2)]
                assert store_status(await readiness(readyz)) == "ok"
                redis_server.stop()
                during = [await session.call_tool("constant", {}) for _ in range(2)]
                down = await readiness(readyz)
                redis_server.start()
                after = [action(await session.call_tool("constant", {})) for _ in range(3)]
                up = await poll(lambda: readiness(readyz), lambda answer: store_status(answer) == "ok")
        log = guard.stderr_tail()
    assert before == [None, None], log
    assert [result.is_error for result in during] == [False, False], log
    assert len(counting.calls("constant")) == 7, log
    assert down[0] == 200, down
    assert down[1]["ready"] is True, down
    assert store_status(down) == "degraded", down
    # Redis came back empty: the streak starts over there, and its 3rd identical call is warned again.
    assert after == [None, None, "warn"], log
    assert up[0] == 200, up
    unavailable = [line for line in log.splitlines() if "state store is unavailable" in line]
    assert len(unavailable) == 1, log


async def test_redis_killed_under_a_guard_failing_closed_refuses_calls_until_it_is_back(
    rig: Rig, redis_server: RedisServer, counting: CountingUpstream
) -> None:
    """LOOP_GUARD_STATE_FAIL=closed: while Redis is down a call is refused, saying the store is unavailable."""
    env = {**counting.env, "LOOP_GUARD_STATE": redis_server.url, "LOOP_GUARD_STATE_FAIL": "closed"}
    async with rig.guard(["--", *counting.command], env=env) as guard:
        readyz = guard.url("/readyz")
        async with open_http_session(guard.mcp_url) as http:
            session = http.session
            with anyio.fail_after(30):
                first = await session.call_tool("echo", {"text": "one"})
                redis_server.stop()
                refused = await session.call_tool("echo", {"text": "two"})
                down = await readiness(readyz)
                redis_server.start()
                again = await session.call_tool("echo", {"text": "three"})
        log = guard.stderr_tail()
    assert texts(first) == ["one"], log
    assert refused.is_error, log
    assert texts(refused)[0].startswith(MARKER), log
    assert UNAVAILABLE in texts(refused)[0], log
    assert [call["arguments"]["text"] for call in counting.calls("echo")] == ["one", "three"], log
    assert (down[0], store_status(down)) == (200, "degraded"), down
    assert (again.is_error, texts(again)) == (False, ["three"]), log
