"""Stopping the HTTP guard with signals: a second SIGINT, and a call in flight at SIGTERM.

An operator pressing Ctrl-C twice must not get a traceback, and an agent whose call is
running when the guard is told to stop must get an answer (an error) on its stream, not
a reset connection.
"""

from __future__ import annotations

import json
import signal
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest

from tests.harness import describe, eventually, fixture_command, read_json_lines
from tests.http_harness import (
    MCP_POST_HEADERS,
    Rig,
    ServerProcess,
    http_client,
    raw_session,
    tool_call_body,
    wait_gone,
)
from tests.reliability.wire import received

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

STUBBORN = ["--", *fixture_command("hanging_server", "--stubborn")]
"""An upstream that ignores stdin EOF and SIGTERM: stopping it takes the guard its full grace periods."""
HANG = tool_call_body("hang", {}, request_id=3)


async def start_hanging_call(guard: ServerProcess, line_log: Path, tg: anyio.abc.TaskGroup) -> None:
    """Opens a session and starts a tools/call of ``hang`` that the upstream never answers; returns once it arrived."""
    headers = await raw_session(guard.mcp_url)

    async def call() -> None:
        with suppress(httpx2.TransportError):
            async with http_client(timeout=httpx2.Timeout(10, read=60)) as client:
                await client.post(guard.mcp_url, content=json.dumps(HANG), headers=MCP_POST_HEADERS | headers)

    tg.start_soon(call)
    with anyio.fail_after(10):
        await eventually(lambda: any(message.get("method") == "tools/call" for message in received(line_log)))


async def test_second_sigint_exits_without_traceback(rig: Rig, line_log: Path) -> None:
    """SIGINT, then another 0.1 s later (an impatient Ctrl-C), with a call in flight: status 130, no traceback."""
    async with rig.guard(STUBBORN, env={"LINE_SERVER_LOG": str(line_log)}) as guard, anyio.create_task_group() as tg:
        await start_hanging_call(guard, line_log, tg)
        family = guard.descendants()
        guard.signal(signal.SIGINT)
        await anyio.sleep(0.1)  # the second press comes while the first is being handled: the point of the test
        guard.signal(signal.SIGINT)
        status = await guard.wait_exit(15)
        tg.cancel_scope.cancel()
    left = await wait_gone(family, 5)

    assert "Traceback" not in guard.stderr_text(), guard.stderr_tail()
    assert status == 128 + signal.SIGINT, guard.stderr_tail()
    assert left == [], describe(left)


async def test_sigint_while_stopping_upstreams_exits_without_traceback(rig: Rig, line_log: Path) -> None:
    """A second SIGINT while the guard is stopping a stubborn upstream (after serving ended): 130, no traceback."""
    async with rig.guard(STUBBORN, env={"LINE_SERVER_LOG": str(line_log)}) as guard, anyio.create_task_group() as tg:
        await start_hanging_call(guard, line_log, tg)
        family = guard.descendants()
        guard.signal(signal.SIGINT)
        with anyio.fail_after(10):
            await eventually(lambda: any(entry.get("event") == "stdin closed" for entry in read_json_lines(line_log)))
        assert guard.process.returncode is None, "the guard exited before the stubborn upstream was stopped"
        guard.signal(signal.SIGINT)
        status = await guard.wait_exit(15)
        tg.cancel_scope.cancel()
    left = await wait_gone(family, 5)

    assert "Traceback" not in guard.stderr_text(), guard.stderr_tail()
    assert status == 128 + signal.SIGINT, guard.stderr_tail()
    assert left == [], describe(left)


@pytest.mark.parametrize("stateless", [False, True], ids=["a session's", "a --stateless request's"])
async def test_call_in_flight_at_sigterm_gets_an_error_on_its_stream(rig: Rig, line_log: Path, stateless: bool) -> None:
    """A tools/call still running at SIGTERM gets an error result or JSON-RPC error on its stream; exit status 143."""
    command = fixture_command("erroring_server")
    env = {"LINE_SERVER_LOG": str(line_log)}
    body = tool_call_body("slow", {"seconds": 60}, request_id=7)
    messages: list[dict[str, Any]] = []
    broken: list[str] = []
    answered = anyio.Event()

    async def call(client: httpx2.AsyncClient, headers: dict[str, str]) -> None:
        try:
            async with client.stream(
                "POST", guard.mcp_url, content=json.dumps(body), headers=MCP_POST_HEADERS | headers
            ) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:") and line.removeprefix("data:").strip():
                        messages.append(json.loads(line.removeprefix("data:")))
        except httpx2.TransportError as exc:
            broken.append(f"{type(exc).__name__}: {exc}")
        answered.set()

    async with rig.guard([*(["--stateless"] if stateless else []), "--", *command], env=env) as guard:
        headers = {"Mcp-Protocol-Version": "2025-11-25"} if stateless else await raw_session(guard.mcp_url)
        async with http_client(timeout=httpx2.Timeout(10, read=90)) as client, anyio.create_task_group() as tg:
            tg.start_soon(call, client, headers)
            with anyio.fail_after(10):
                await eventually(lambda: any(message.get("method") == "tools/call" for message in received(line_log)))
            guard.signal(signal.SIGTERM)
            with anyio.fail_after(15):
                await answered.wait()
        status = await guard.wait_exit(10)

    answers = [message for message in messages if message.get("id") == 7]
    assert broken == [], f"the stream was cut instead of answered: {broken}; got {messages}"
    assert len(answers) == 1, messages
    answer = answers[0]
    assert "error" in answer or answer.get("result", {}).get("isError") is True, answer
    assert status == 128 + signal.SIGTERM, guard.stderr_tail()
