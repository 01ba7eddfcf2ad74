"""An upstream that stops answering: with a call timeout (off by default) the call gets an
error result saying so, the upstream request is cancelled, and progress keeps a call alive.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_loop_guard.redaction import program_name
from tests.harness import MARKER, eventually, fixture_command
from tests.reliability.wire import RawConnector, RawGuard, received, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

HANGING = fixture_command("hanging_server")


def _timed_out(answer: dict[str, Any], seconds: str, server: str) -> None:
    """The answer is the guard's isError result for a call timeout of ``seconds``."""
    result = answer.get("result") or {}
    assert result.get("isError") is True, answer
    [text] = result_texts(answer)
    assert text.startswith(MARKER), text
    # The guard names a stdio upstream by its config name (or, for -- COMMAND, its program), never its command line.
    assert f"upstream `{server}` sent" in text, text
    assert "sent no answer or progress" in text, text
    assert f"within {seconds}s (call timeout); the request was cancelled" in text, text


def _upstream_id(log: Path, tool: str) -> object:
    """The id the upstream saw on the one tools/call of this tool."""
    [call] = [m for m in received(log) if m.get("method") == "tools/call" and m["params"]["name"] == tool]
    return call["id"]


def _cancelled(log: Path) -> list[object]:
    """The request ids the upstream was told were cancelled."""
    return [m["params"]["requestId"] for m in received(log) if m.get("method") == "notifications/cancelled"]


async def _timed_call(guard: RawGuard, name: str, arguments: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    started = anyio.current_time()
    answer = await guard.call_tool(name, arguments, within=15)
    return anyio.current_time() - started, answer


async def test_hung_call_times_out_and_is_cancelled_upstream(raw_guard: RawConnector, line_log: Path) -> None:
    """With LOOP_GUARD_CALL_TIMEOUT_SECONDS=1 a call with no answer gets an error after 1 s; the upstream is told."""
    env = {"LOOP_GUARD_CALL_TIMEOUT_SECONDS": "1", "LINE_SERVER_LOG": str(line_log)}
    async with raw_guard(HANGING, env=env) as guard:
        took, answer = await _timed_call(guard, "hang", {})
        with anyio.fail_after(5):
            await eventually(lambda: len(_cancelled(line_log)) == 1)
        with anyio.fail_after(10):
            await guard.assert_serving()

    _timed_out(answer, "1", program_name(HANGING[0]))
    assert 1.0 <= took < 3.0, f"answered after {took:.2f}s"
    assert _cancelled(line_log) == [_upstream_id(line_log, "hang")]


async def test_progress_extends_the_call_timeout(raw_guard: RawConnector, line_log: Path) -> None:
    """Each progress notification restarts the clock: a call reporting progress outlives the timeout and answers;
    once the progress stops, the timeout runs from the last one."""
    env = {"LOOP_GUARD_CALL_TIMEOUT_SECONDS": "1", "LINE_SERVER_LOG": str(line_log)}
    async with raw_guard(HANGING, env=env) as guard:
        timings: dict[str, tuple[float, dict[str, Any]]] = {}

        async def call(name: str) -> None:
            timings[name] = await _timed_call(guard, name, {"ticks": 5, "interval": 0.5})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "tick_then_answer")
            tg.start_soon(call, "tick_then_hang")
        with anyio.fail_after(5):
            await eventually(lambda: len(_cancelled(line_log)) == 1)

    took, answer = timings["tick_then_answer"]
    assert result_texts(answer) == ["done after 5 ticks"], answer
    assert took >= 2.5, f"answered after {took:.2f}s"
    took, answer = timings["tick_then_hang"]
    _timed_out(answer, "1", program_name(HANGING[0]))
    # The last progress comes at 2.5 s; the timeout is 1 s after it, not 1 s after the call.
    assert 3.4 <= took < 6.0, f"timed out after {took:.2f}s"
    assert _cancelled(line_log) == [_upstream_id(line_log, "tick_then_hang")]


async def test_progress_still_reaches_a_client_that_asked_for_it(raw_guard: RawConnector) -> None:
    """With a call timeout on, a client that sent a progress token still gets every progress notification."""
    async with raw_guard(HANGING, env={"LOOP_GUARD_CALL_TIMEOUT_SECONDS": "1"}) as guard:
        request_id = guard.new_id()
        start = len(guard.messages)
        params = {"name": "tick_then_answer", "arguments": {"ticks": 3, "interval": 0.3}, "_meta": {"progressToken": 7}}
        await guard.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        answer = await guard.response(request_id, start=start)

    progress = [m["params"] for m in guard.messages[start:] if m.get("method") == "notifications/progress"]
    assert result_texts(answer) == ["done after 3 ticks"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [(7, 1), (7, 2), (7, 3)]


async def test_call_timeout_per_server_from_the_config_file(
    raw_guard: RawConnector, line_log: Path, tmp_path: Path
) -> None:
    """A server entry's callTimeoutSeconds applies without LOOP_GUARD_CALL_TIMEOUT_SECONDS."""
    entry = {
        "command": HANGING[0],
        "args": HANGING[1:],
        "env": {"LINE_SERVER_LOG": str(line_log)},
        "callTimeoutSeconds": 1.5,
    }
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"stuck": entry}}), encoding="utf-8")
    async with raw_guard([], guard_args=["--config", str(config)]) as guard:
        took, answer = await _timed_call(guard, "hang", {})
        with anyio.fail_after(5):
            await eventually(lambda: len(_cancelled(line_log)) == 1)

    _timed_out(answer, "1.5", "stuck")
    assert 1.5 <= took < 3.5, f"answered after {took:.2f}s"
