"""``mcp-loop-guard state list|reset`` on the state real guards leave: names and counts shown, an abort lifted.

The guards run over stdio in front of the counting server, started by this test process,
so they share one agent key; the state file is the default one under the test's own
``XDG_STATE_HOME``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import SqliteStore
from tests.harness import ABORT_EXIT_CODE, Connector, CountingUpstream, action, guard_argv, texts
from tests.http_harness import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PRIVATE_TEXT = "argument-value-4417"
"""An argument value that must never appear in what the state commands print."""


async def state_command(*args: str) -> tuple[int, str, str]:
    """``python -m mcp_loop_guard state ARGS``: exit code, stdout, stderr (the test's XDG_STATE_HOME applies)."""
    with anyio.fail_after(30):
        done = await anyio.run_process([*guard_argv(), "state", *args], check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def listed() -> list[dict[str, Any]]:
    """What ``state list --json`` shows."""
    code, out, err = await state_command("list", "--json")
    assert code == 0, err
    shown: list[dict[str, Any]] = json.loads(out)
    return shown


async def test_state_list_shows_what_a_guard_left_by_name_and_count(
    connect: Connector, counting: CountingUpstream
) -> None:
    """After a guard warned a 3rd identical call: one key, its tool, streak 3, no refusal; no argument value."""
    async with connect(counting.command, env=counting.env) as conn:
        with anyio.fail_after(20):
            await conn.session.call_tool("echo", {"text": PRIVATE_TEXT})
            results = [await conn.session.call_tool("constant", {}) for _ in range(3)]
    assert [action(result) for result in results] == [None, None, "warn"]

    shown = await listed()
    code, table, err = await state_command("list")

    assert len(shown) == 1, shown
    entry = shown[0]
    assert entry["key"].startswith("stdio:"), entry
    assert {k: entry[k] for k in ("lastTool", "streak", "refusals", "inFlight", "lastVerdict")} == {
        "lastTool": "constant",
        "streak": 3,
        "refusals": 0,
        "inFlight": 0,
        "lastVerdict": "warn:identical:constant",
    }
    assert code == 0, err
    row = next(line for line in table.splitlines() if entry["key"] in line)
    assert "constant" in row, table
    assert "warn:identical:constant" in row, table
    for printed in (json.dumps(shown), table, err):
        assert PRIVATE_TEXT not in printed
        assert "always the same" not in printed, "a result must never be shown"


async def _loop_until_aborted(connect: Connector, counting: CountingUpstream) -> list[types.CallToolResult]:
    async with connect.guard_process(counting.command, env=counting.env) as guard:
        with anyio.fail_after(20):
            results = [await guard.session.call_tool("constant", {}) for _ in range(7)]
        with anyio.fail_after(10):
            status = await guard.wait_exit()
    assert status == ABORT_EXIT_CODE, guard.connection.stderr_text()
    return results


async def test_state_reset_lifts_an_abort_for_the_next_guard(connect: Connector, counting: CountingUpstream) -> None:
    """Aborted agent: a new guard refuses the loop at once; after `state reset KEY` the next guard serves it."""
    looped = await _loop_until_aborted(connect, counting)
    assert [result.is_error for result in looped] == [False] * 4 + [True] * 3
    async with connect.guard_process(counting.command, env=counting.env) as guard:
        with anyio.fail_after(20):
            refused = await guard.session.call_tool("constant", {})
    assert refused.is_error
    assert action(refused) in {"block", "abort"}
    assert len(counting.calls("constant")) == 4, "a guard started after the abort must not reach the upstream"

    (entry,) = await listed()
    assert entry["refusals"] >= 3, entry
    code, out, err = await state_command("reset", entry["key"])
    assert (code, out.strip()) == (0, f"reset {entry['key']}"), err
    assert await listed() == []

    async with connect(counting.command, env=counting.env) as conn:
        with anyio.fail_after(20):
            served = await conn.session.call_tool("constant", {})
    assert not served.is_error
    assert action(served) is None
    assert texts(served) == ["always the same"]
    assert len(counting.calls("constant")) == 5


async def test_state_reset_of_an_unknown_key_exits_1_and_bad_usage_exits_2(tmp_path: Path) -> None:
    """No such key or no store to reach: exit 1, one line; no subcommand, a memory or unknown store: exit 2."""
    path = tmp_path / "other.sqlite3"
    store = SqliteStore(path)
    await store.save("agent:kept", State(), ttl=600)
    await store.aclose()
    spec = f"sqlite://{path}"

    missing = await state_command("reset", "agent:nope", "--state", spec)
    kept = await state_command("list", "--json", "--state", spec)
    usage = [await state_command(*args) for args in ([], ["list", "--state", "memory"], ["list", "--state", "ftp://x"])]
    unreachable = await state_command("list", "--state", f"redis://127.0.0.1:{free_port()}/0")

    assert missing[0] == 1, missing
    assert "agent:nope" in missing[2]
    assert [entry["key"] for entry in json.loads(kept[1])] == ["agent:kept"]
    assert [code for code, _, _ in usage] == [2, 2, 2], usage
    assert all(out == "" for _, out, _ in usage), usage
    assert unreachable[0] == 1, unreachable
    assert unreachable[2].startswith("mcp-loop-guard: error: redis (redis://127.0.0.1:"), unreachable
    assert "Traceback" not in unreachable[2], unreachable
