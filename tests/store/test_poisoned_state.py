"""A record in the state store that is not a loop state, through the real guard: an absent record, or a store failure.

Someone who can write the store plants a record (a state with a list where an object goes, an
infinite count, bytes that are not even text, a Redis key of another type). A stdio guard of
that agent still starts and judges from a fresh state, ``state list`` shows the others, the
admin API and the agent's own requests are answered, and one log line names the key, never
what the record holds. A Redis key holding another type than a string is a store failure,
handled as the guard is set to: calls pass (fail open) or are refused (fail closed).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import SqliteStore
from mcp_loop_guard.store.live import LiveFiles
from tests.harness import Connector, CountingUpstream, action
from tests.http_harness import KEY_HEADER, Rig, ServerProcess, http_get, payload_for, payload_verdict, raw_call
from tests.redis_harness import RedisServer
from tests.store.test_state_cli import state_command

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PLANTED = "planted-contents-5521"
"""Text inside every planted record: it must never reach a log line."""
POISONS = {
    "effects-a-list": {"v": 1, "h": [], "r": [], "l": PLANTED, "x": []},
    "budgets-a-list": {"v": 1, "h": [], "r": [], "l": PLANTED, "u": []},
    "infinite-refusals": {"v": 1, "h": [], "r": [], "l": PLANTED, "b": 1e999},
}
"""Records that are almost loop states: the shapes that used to crash whoever read them."""
FAR = 4_000_000_000.0
"""An expiry long after the test."""
AGENT = "poisoned"
"""The agent key the stdio guards are given (``LOOP_GUARD_AGENT_KEY``): stored as ``agent:poisoned``."""
ADMIN = {"LOOP_GUARD_ADMIN_TOKEN": "admin-secret"}
UNAVAILABLE = "cannot reach its state store"


def planted_text(record: dict[str, Any]) -> str:
    """A record as a text, infinities written as JSON parsers read them (``1e999``)."""
    return json.dumps(record).replace("Infinity", "1e999")


async def plant_rows(path: Path, rows: dict[str, object]) -> None:
    """A state file with one good agent (``good``) and ``rows`` written as they are, bypassing every check."""
    store = SqliteStore(path)
    good = State()
    good.blocks = 1
    await store.save("good", good, ttl=600)
    await store.aclose()
    with sqlite3.connect(path) as db:
        planted = [(key, value, FAR) for key, value in rows.items()]
        db.executemany("INSERT INTO agents (key, state, expires) VALUES (?, ?, ?)", planted)


def guard_lines(text: str) -> list[str]:
    """The guard's own log lines."""
    return [line for line in text.splitlines() if line.startswith("mcp-loop-guard:")]


def assert_one_line_names_the_key(log: str, key: str) -> None:
    """Exactly one log line says the key's record is unreadable; none shows what the record held, no traceback."""
    named = [line for line in guard_lines(log) if "unreadable" in line]
    assert len(named) == 1, log
    assert key in named[0], log
    assert PLANTED not in log, log
    assert "Traceback" not in log, log


@pytest.mark.parametrize("poison", sorted(POISONS))
async def test_a_poisoned_row_of_a_stdio_agent_is_an_absent_one(
    connect: Connector, counting: CountingUpstream, tmp_path: Path, poison: str
) -> None:
    """The guard starts and judges the agent afresh (warned at the 3rd call, refused at the 5th); one line says so."""
    path = tmp_path / "state.sqlite3"
    await plant_rows(path, {f"agent:{AGENT}": planted_text(POISONS[poison])})
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}", "LOOP_GUARD_AGENT_KEY": AGENT}
    async with connect(counting.command, env=env) as conn:
        with anyio.fail_after(30):
            results = [action(await conn.session.call_tool("constant", {})) for _ in range(5)]
        log = conn.stderr_text()
    assert results == [None, None, "warn", "warn", "block"], log
    assert_one_line_names_the_key(log, f"agent:{AGENT}")


async def test_a_poisoned_live_file_is_an_absent_one(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """A live file whose record is whole but holds no state (and never expires): the agent starts afresh."""
    path = tmp_path / "state.sqlite3"
    await plant_rows(path, {})
    live = LiveFiles(tmp_path / "state.sqlite3-live")
    held = live.open(f"agent:{AGENT}")
    held.write(FAR, planted_text(POISONS["effects-a-list"]).encode())
    held.close(remove=False)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{path}", "LOOP_GUARD_AGENT_KEY": AGENT}
    async with connect(counting.command, env=env) as conn:
        with anyio.fail_after(30):
            results = [action(await conn.session.call_tool("constant", {})) for _ in range(3)]
        log = conn.stderr_text()
    assert results == [None, None, "warn"], log
    assert_one_line_names_the_key(log, f"agent:{AGENT}")


async def test_state_list_shows_every_agent_with_poisoned_ones_unreadable(tmp_path: Path) -> None:
    """Poisoned rows, a row whose expiry is text and an owner row of garbage: the list shows all; reset works."""
    path = tmp_path / "state.sqlite3"
    rows: dict[str, object] = {name: planted_text(record) for name, record in POISONS.items()}
    rows["not-text"] = 42
    await plant_rows(path, rows)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO agents (key, state, expires) VALUES ('text-expiry', '{}', 'never')")
        db.execute("INSERT INTO owners VALUES ('good', 'host', 'not a pid', 1e999, 'x')")
    code, out, err = await state_command("list", "--json", "--state", f"sqlite://{path}")
    assert code == 0, err
    shown = {entry["key"]: entry for entry in json.loads(out)}
    assert sorted(shown) == sorted([*rows, "good", "text-expiry"]), out
    assert shown["good"]["refusals"] == 1, out
    assert "owner" not in shown["good"], "an owner row that does not read is nobody's"
    assert all(shown[key].get("unreadable") for key in [*rows, "text-expiry"]), out
    assert PLANTED not in out + err
    code, table, err = await state_command("list", "--state", f"sqlite://{path}")
    assert code == 0, err
    assert "(unreadable)" in table
    code, _, err = await state_command("reset", "infinite-refusals", "--state", f"sqlite://{path}")
    assert code == 0, err


async def keyed(guard: ServerProcess, key: str | None) -> str | None:
    """One ``constant`` call without a session, keyed by ``key`` (or by the client's address); its verdict."""
    with anyio.fail_after(20):
        response = await raw_call(guard.mcp_url, "constant", {}, {KEY_HEADER: key} if key else {})
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    message = payload_for(response, 1)
    assert "result" in message, message
    return payload_verdict(message)


async def test_poisoned_rows_of_http_agents_are_absent_ones(
    rig: Rig, counting: CountingUpstream, tmp_path: Path
) -> None:
    """An HTTP guard: a poisoned key's requests and the poisoned address key's are answered, /admin/agents too."""
    path = tmp_path / "state.sqlite3"
    await plant_rows(
        path,
        {
            f"key:-/{AGENT}": planted_text(POISONS["effects-a-list"]),
            "client:-/127.0.0.1": planted_text(POISONS["infinite-refusals"]),
        },
    )
    env = {**counting.env, **ADMIN, "LOOP_GUARD_STATE": f"sqlite://{path}"}
    async with rig.guard(["--stateless", "--", *counting.command], env=env) as guard:
        by_key = [await keyed(guard, AGENT) for _ in range(3)]
        by_address = [await keyed(guard, None) for _ in range(3)]
        with anyio.fail_after(20):
            listed = await http_get(guard.url("/admin/agents"), {"Authorization": "Bearer admin-secret"})
            ready = await http_get(guard.url("/readyz"))
        log = guard.stderr_text()
    assert by_key == [None, None, "warn"], log
    assert by_address == [None, None, "warn"], log
    assert listed.status_code == 200, listed.text
    keys = {agent["key"] for agent in listed.json()["agents"]}
    assert {f"key:-/{AGENT}", "client:-/127.0.0.1", "good"} <= keys, listed.text
    assert ready.json()["store"]["status"] == "ok", ready.text
    assert PLANTED not in log + listed.text, log
    unreadable = [line for line in guard_lines(log) if "unreadable" in line]
    assert len(unreadable) == 2, log


def plant_in_redis(server: RedisServer) -> None:
    """Bytes that are not text under one key, a hash under another, a good state under a third."""
    client = redis.Redis(port=server.port)
    try:
        client.set(f"mcp-loop-guard:s:key:-/{AGENT}", b"\xff\xfe" + PLANTED.encode())
        client.hset("mcp-loop-guard:s:key:-/hash", "planted", PLANTED)
        client.set("mcp-loop-guard:o:key:-/hash", b"[1, 1e999, 1, 1]")
        client.set("mcp-loop-guard:s:good", State().dumps())
    finally:
        client.close()


async def test_redis_garbage_is_an_absent_record_and_a_wrong_type_a_store_failure(
    rig: Rig, redis_server: RedisServer, counting: CountingUpstream
) -> None:
    """Failing open: bytes that are not text are an absent state; a hash fails the store (the call passes, degraded)."""
    plant_in_redis(redis_server)
    env = {**counting.env, "LOOP_GUARD_STATE": redis_server.url}
    async with rig.guard(["--stateless", "--", *counting.command], env=env) as guard:
        garbage = [await keyed(guard, AGENT) for _ in range(3)]
        wrong_type = await keyed(guard, "hash")
        with anyio.fail_after(20):
            ready = await http_get(guard.url("/readyz"))
        log = guard.stderr_text()
    assert garbage == [None, None, "warn"], log
    assert wrong_type is None, log
    assert ready.json()["store"]["status"] == "degraded", ready.text
    assert len(counting.calls("constant")) == 4, log
    assert_one_line_names_the_key(log, f"key:-/{AGENT}")
    code, out, err = await state_command("list", "--json", "--state", redis_server.url)
    assert code == 0, err
    shown = {entry["key"]: entry for entry in json.loads(out)}
    assert sorted(shown) == sorted([f"key:-/{AGENT}", "key:-/hash", "good"]), out
    assert shown["key:-/hash"].get("unreadable"), out
    assert PLANTED not in out + err


async def test_a_redis_key_of_the_wrong_type_fails_closed_when_so_set(
    rig: Rig, redis_server: RedisServer, counting: CountingUpstream
) -> None:
    """LOOP_GUARD_STATE_FAIL=closed: the agent whose key holds a hash is refused (the store is unavailable to it)."""
    plant_in_redis(redis_server)
    env = {**counting.env, "LOOP_GUARD_STATE": redis_server.url, "LOOP_GUARD_STATE_FAIL": "closed"}
    async with rig.guard(["--stateless", "--", *counting.command], env=env) as guard:
        with anyio.fail_after(20):
            response = await raw_call(guard.mcp_url, "constant", {}, {KEY_HEADER: "hash"})
        other = await keyed(guard, "another")
        log = guard.stderr_text()
    result = payload_for(response, 1)["result"]
    assert result["isError"] is True, result
    assert UNAVAILABLE in result["content"][0]["text"], result
    assert other is None, log
    assert len(counting.calls("constant")) == 1, "the refused call must not reach the upstream"
