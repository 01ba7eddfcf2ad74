"""The MCP Inspector's CLI (a real MCP client, npm) lists and calls tools through the guard over stdio and HTTP.

Each ``--cli`` run is one client session: it connects, sends one request (or, with
``--load``, the same call again and again), prints the result as JSON and exits. So
identical one-shot calls over HTTP are separate sessions with separate loop states; only
``--load`` repeats a call inside one session, and ``--stateless`` with a shared
``X-Loop-Guard-Key`` header judges separate runs together.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.harness import MARKER, MARKER_ENV, VERDICT_KEY, guard_argv, guard_command
from tests.interop.conftest import Inspector, InspectorRun
from tests.interop.processes import Processes, Served

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ECHO = ("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "message=hi")
ECHO_RESULT = {"content": [{"type": "text", "text": "Echo: hi"}]}
LOAD_SIX = ("--load", "--load-requests", "6", "--load-concurrency", "1")
"""Six identical calls, one after the other, in one session."""
KEY_HEADER = "X-Loop-Guard-Key"


def stdio_target(command: Sequence[str]) -> list[str]:
    """The Inspector's trailing target: everything after its first ``--`` is the server's argv."""
    return ["--", *command]


def guard_http(processes: Processes, *args: str) -> AbstractAsyncContextManager[Served]:
    """The guard serving streamable HTTP at /mcp in front of the upstream ARGS name; ready when /readyz answers 200."""
    return processes.serve(
        "guard",
        lambda port: [
            *guard_argv(),
            "--transport",
            "http",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *args,
        ],
        ready_path="/readyz",
    )


def tool_names(run: InspectorRun) -> list[str]:
    """The tool names of a tools/list result, in order."""
    return [tool["name"] for tool in run.result()["tools"]]


def verdict_of(result: dict[str, Any]) -> dict[str, Any] | None:
    """The guard's verdict in a result's ``_meta``, or None."""
    found = (result.get("_meta") or {}).get(VERDICT_KEY)
    return dict(found) if isinstance(found, dict) else None


def load_summary(run: InspectorRun) -> dict[str, Any]:
    """The counts of a ``--load`` run."""
    result = run.result()
    return {key: result[key] for key in ("requests", "ok", "toolErrors", "errors")}


# --- stdio -----------------------------------------------------------------------------------


async def test_tools_listed_over_stdio_as_without_guard(
    inspector: Inspector, everything_server: list[str], processes: Processes
) -> None:
    """Over stdio the Inspector lists, through the guard, exactly the tools it lists from the server directly."""
    direct = await inspector(*inspector.server_env(), "--method", "tools/list", *stdio_target(everything_server))
    guarded = await inspector(
        *inspector.server_env(), "--method", "tools/list", *stdio_target(guard_command(everything_server))
    )
    assert (direct.returncode, guarded.returncode) == (0, 0), guarded
    assert "echo" in tool_names(direct)
    assert guarded.result() == direct.result()


async def test_tool_called_over_stdio_from_config_file(
    inspector: Inspector, everything_server: list[str], processes: Processes, tmp_path: Path
) -> None:
    """The Inspector calls a tool through the guard named in its mcpServers config file and prints the result."""
    command = guard_command(everything_server)
    config = tmp_path / "inspector.json"
    entry = {"command": command[0], "args": command[1:], "env": {MARKER_ENV: inspector.marker}}
    config.write_text(json.dumps({"mcpServers": {"guarded-everything": entry}}), encoding="utf-8")
    run = await inspector(
        "--config",
        str(config),
        "--server",
        "guarded-everything",
        "--method",
        "tools/call",
        "--tool-name",
        "get-sum",
        "--tool-arg",
        "a=2",
        "b=3",
    )
    assert run.returncode == 0, run
    assert run.result() == {"content": [{"type": "text", "text": "The sum of 2 and 3 is 5."}]}


async def test_repeated_calls_in_one_run_refused_over_stdio(
    inspector: Inspector, everything_server: list[str], processes: Processes
) -> None:
    """Six identical calls in one Inspector session over stdio: four answered, the fifth and sixth refused."""
    run = await inspector(*inspector.server_env(), *ECHO, *LOAD_SIX, *stdio_target(guard_command(everything_server)))
    assert run.returncode == 0, run
    assert load_summary(run) == {"requests": 6, "ok": 4, "toolErrors": 2, "errors": 0}
    # The guard's log lines reach the Inspector's stderr with the server's own output.
    assert run.stderr.count("warn tool 'echo'") == 2, run.stderr
    assert run.stderr.count("block tool 'echo'") == 2, run.stderr


# --- streamable HTTP -------------------------------------------------------------------------


async def test_tools_listed_over_http_as_without_guard(
    inspector: Inspector, everything_server: list[str], processes: Processes
) -> None:
    """Over streamable HTTP the Inspector lists, through the guard, exactly the tools the HTTP server lists it."""
    everything_http = [*everything_server[:-1], "streamableHttp"]
    async with processes.serve(
        "everything-http",
        lambda port: everything_http,
        env_for_port=lambda port: {"PORT": str(port)},
        ready_path="/mcp",
        accept=lambda status: True,
    ) as everything:
        direct = await inspector(everything.url("/mcp"), "--method", "tools/list")
        async with guard_http(processes, "--upstream", everything.url("/mcp")) as guard:
            guarded = await inspector(guard.url("/mcp"), "--method", "tools/list")
    assert (direct.returncode, guarded.returncode) == (0, 0), guarded
    assert "echo" in tool_names(direct)
    assert guarded.result() == direct.result()


async def test_one_shot_calls_over_http_each_answered(
    inspector: Inspector, everything_server: list[str], processes: Processes
) -> None:
    """Five identical one-shot calls over HTTP each get the plain result: every Inspector run is its own session."""
    async with guard_http(processes, "--", *everything_server) as guard:
        runs = [await inspector(guard.url("/mcp"), *ECHO) for _ in range(5)]
    assert [run.returncode for run in runs] == [0] * 5, runs
    assert [run.result() for run in runs] == [ECHO_RESULT] * 5


async def test_repeated_calls_in_one_run_refused_over_http(
    inspector: Inspector, everything_server: list[str], processes: Processes
) -> None:
    """Six identical calls in one Inspector session over HTTP: four answered, the fifth and sixth refused."""
    async with guard_http(processes, "--", *everything_server) as guard:
        run = await inspector(guard.url("/mcp"), *ECHO, *LOAD_SIX)
        guard_log = guard.output()
    assert run.returncode == 0, run
    assert load_summary(run) == {"requests": 6, "ok": 4, "toolErrors": 2, "errors": 0}
    assert guard_log.count("block tool 'echo'") == 2, guard_log


async def test_one_shot_calls_sharing_key_judged_together_when_stateless(
    inspector: Inspector, everything_server: list[str], processes: Processes
) -> None:
    """With --stateless, one-shot runs sending one X-Loop-Guard-Key share a loop state: warned at 3, refused at 5."""
    async with guard_http(processes, "--stateless", "--", *everything_server) as guard:
        runs = [
            await inspector(guard.url("/mcp"), "--header", f"{KEY_HEADER}: inspector-agent", *ECHO) for _ in range(5)
        ]
    assert [run.payload().get("error") for run in runs[:4]] == [None] * 4, runs
    results = [run.result() for run in runs]
    assert results[:2] == [ECHO_RESULT] * 2
    assert [(verdict_of(result) or {}).get("action") for result in results] == [None, None, "warn", "warn", "block"]
    assert results[2]["content"][0] == ECHO_RESULT["content"][0]
    assert results[2]["content"][1]["text"].startswith(MARKER)
    assert results[4].get("isError") is True
