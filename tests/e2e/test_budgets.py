"""Call budgets end to end: configured in the environment, a config file and per server; kept in the store."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from tests.harness import Connector, CountingUpstream, guard_argv, texts, verdict
from tests.http_harness import KEY_HEADER, Rig, guard_http_argv, payload_for, raw_call, run_server
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.anyio


async def test_a_stdio_agent_is_refused_past_its_budget_and_never_closed_for_it(
    connect: Connector, counting: CountingUpstream
) -> None:
    """echo=3/3600: three echoes run, the next five are refused with the budget's text; other tools still run."""
    env = {**counting.env, "LOOP_GUARD_BUDGETS": "echo=3/3600"}
    async with connect.guard_process(counting.command, env=env) as guard:
        with anyio.fail_after(30):
            echoes = [await guard.session.call_tool("echo", {"text": f"note {n}"}) for n in range(8)]
            other = await guard.session.call_tool("ticker", {})
    assert [result.is_error for result in echoes] == [False] * 3 + [True] * 5
    refusal = texts(echoes[3])[0]
    assert "budget of 3 calls to `echo` per hour is used up" in refusal
    assert "it resets in 60 minutes" in refusal or "it resets in 59 minutes" in refusal
    meta = verdict(echoes[7])
    assert meta is not None
    assert (meta["action"], meta["family"]) == ("block", "budget")
    assert not other.is_error  # five refusals and the session goes on: budgets are not loops
    assert len(counting.calls("echo")) == 3


async def test_server_and_session_budgets_from_a_config_file_add_up(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Two servers: a session budget over exported names, a server budget over its own names; each counts its own."""
    config = tmp_path / "guard.json"
    server = {"command": counting.command[0], "args": counting.command[1:], "env": counting.env}
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "first": {**server, "loopGuard": {"budgets": [{"tools": "echo", "maxCalls": 2}]}},
                    "second": server,
                },
                "loopGuard": {"budgets": [{"tools": "*__echo", "maxCalls": 3, "perSeconds": 600}]},
            }
        ),
        encoding="utf-8",
    )
    guarded = [*guard_argv(), "--config", str(config)]
    async with connect(guarded, mode="direct") as conn:
        with anyio.fail_after(30):
            first = [await conn.session.call_tool("first__echo", {"text": str(n)}) for n in range(3)]
            second = [await conn.session.call_tool("second__echo", {"text": str(n)}) for n in range(2)]
    assert [result.is_error for result in first] == [False, False, True]
    assert "2 calls to `echo` on server `first` per session" in texts(first[2])[0]
    # The session budget (3 echoes anywhere) counted first's two: second gets one, then the refusal.
    assert [result.is_error for result in second] == [False, True]
    assert "3 calls to `*__echo` per 10 minutes" in texts(second[1])[0]


async def test_replicas_share_one_agents_budget_through_redis(
    rig: Rig, redis_server: RedisServer, counting: CountingUpstream
) -> None:
    """Two stateless replicas, one keyed agent alternating between them: the 4th call is refused wherever it lands."""
    env = {**counting.env, "LOOP_GUARD_STATE": redis_server.url, "LOOP_GUARD_BUDGETS": "3/60"}
    argv = ["--stateless", "--", *counting.command]
    async with AsyncExitStack() as stack:
        guards = [
            await stack.enter_async_context(
                run_server(lambda port: (guard_http_argv(port, argv), env), marker=rig.marker, stderr=rig.log(f"g{n}"))
            )
            for n in range(2)
        ]
        answers = []
        with anyio.fail_after(30):
            for n in range(5):
                response = await raw_call(guards[n % 2].mcp_url, "echo", {"text": str(n)}, {KEY_HEADER: "agent-b"})
                answers.append(payload_for(response, 1)["result"])
            stranger = await raw_call(guards[0].mcp_url, "echo", {"text": "x"}, {KEY_HEADER: "agent-c"})
    assert [answer.get("isError", False) for answer in answers] == [False, False, False, True, True]
    assert "budget of 3 calls to any tool per minute is used up" in answers[3]["content"][0]["text"]
    assert not payload_for(stranger, 1)["result"].get("isError", False)  # budgets are per agent
    assert len(counting.calls("echo")) == 4


async def test_a_bad_budget_stops_the_guard_naming_the_setting() -> None:
    """A cap of 0 is a configuration error, reported before anything is served."""
    process = await anyio.run_process(
        [*guard_argv(), "--budgets", "echo=0", "--", "true"],
        check=False,
    )
    assert process.returncode == 2
    message = process.stderr.decode()
    assert "LOOP_GUARD_BUDGETS[0].maxCalls=0 (from --budgets)" in message
    assert "greater than or equal to 1" in message
