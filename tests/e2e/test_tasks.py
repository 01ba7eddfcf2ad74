"""Task-augmented tool calls (``tasks/*``) cross the stdio guard, and a task run again and again is judged.

server-everything's ``simulate-research-query`` only runs as a task: ``tools/call`` answers
with a task handle, the client polls ``tasks/get`` and fetches the report with
``tasks/result``. The raw client speaks the wire as a task-aware client does. In front of
several servers the same holds, under the tool's exported name: the guard routes each task's
requests to the server whose call created it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.harness import MARKER, VERDICT_KEY
from tests.http_harness import time_entry, write_config
from tests.reliability.wire import RawConnector, RawGuard, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TOOL = "simulate-research-query"


@pytest.fixture
def raw_guard(tmp_path: Path, process_marker: str) -> Iterator[RawConnector]:
    connector = RawConnector(tmp_path, process_marker)
    yield connector
    connector.report()


async def _start(guard: RawGuard, topic: str, tool: str = TOOL) -> dict[str, Any]:
    """Asks for the research as a task; the guard's answer."""
    params = {"name": tool, "arguments": {"topic": topic}, "task": {"ttl": 60000}}
    return await guard.request("tools/call", params)


async def _finished(guard: RawGuard, task_id: str) -> dict[str, Any]:
    """Polls the task until it completes, then fetches its result."""
    with anyio.fail_after(30):
        while True:
            status = await guard.request("tasks/get", {"taskId": task_id})
            assert "result" in status, status
            if status["result"]["status"] == "completed":
                break
            assert status["result"]["status"] == "working", status
            await anyio.sleep(0.25)
    return await guard.request("tasks/result", {"taskId": task_id}, within=20)


async def _run(guard: RawGuard, topic: str) -> dict[str, Any]:
    created = await _start(guard, topic)
    task = created["result"]["task"]
    assert task["status"] == "working", created
    return await _finished(guard, task["taskId"])


async def test_task_lifecycle_crosses_the_guard(raw_guard: RawConnector, everything_server: list[str]) -> None:
    """The tasks capability, the task handle, tasks/get, tasks/list and tasks/result all pass as they came."""
    async with raw_guard(everything_server, initialize=False) as guard:
        hello = await guard.initialize()
        assert "call" in hello["result"]["capabilities"]["tasks"]["requests"]["tools"]
        listed = await guard.request("tools/list", {})
        (tool,) = [found for found in listed["result"]["tools"] if found["name"] == TOOL]
        assert tool["execution"]["taskSupport"] == "required"

        created = await _start(guard, "loop detection")
        assert "content" not in created["result"], created  # a handle, not a failed call
        task_id = created["result"]["task"]["taskId"]
        tasks = await guard.request("tasks/list", {})
        assert task_id in [task["taskId"] for task in tasks["result"]["tasks"]]

        report = await _finished(guard, task_id)
        (text,) = result_texts(report)
        assert text.startswith("# Research Report: loop detection")
        assert MARKER not in text
        assert VERDICT_KEY not in (report["result"].get("_meta") or {})


async def test_a_task_repeated_with_the_same_result_is_warned_then_refused(
    raw_guard: RawConnector, everything_server: list[str]
) -> None:
    """Each task's result is judged when fetched; a refused call never reaches the upstream as a task."""
    env = {"LOOP_GUARD_WARN_THRESHOLD": "2", "LOOP_GUARD_BLOCK_THRESHOLD": "3"}
    async with raw_guard(everything_server, env=env) as guard:
        first = await _run(guard, "retries")
        assert MARKER not in result_texts(first)[0]

        second = await _run(guard, "retries")
        report, warning = result_texts(second)
        assert report == result_texts(first)[0]
        assert warning.startswith(MARKER)
        assert second["result"]["_meta"][VERDICT_KEY]["action"] == "warn"

        other = await _run(guard, "something else")  # new arguments: not a loop, and the streak starts over
        assert len(result_texts(other)) == 1

        for _ in range(2):
            await _run(guard, "retries")
        refused = await _start(guard, "retries")
        assert "task" not in refused["result"]
        assert refused["result"]["isError"] is True
        assert result_texts(refused)[0].startswith(MARKER)
        tasks = await guard.request("tasks/list", {})
        assert len(tasks["result"]["tasks"]) == 5  # the refused call created none


async def test_a_cancelled_task_moves_nothing(raw_guard: RawConnector, everything_server: list[str]) -> None:
    """A task cancelled before its result is not a repeat: the next identical task's result is not warned."""
    env = {"LOOP_GUARD_WARN_THRESHOLD": "2", "LOOP_GUARD_BLOCK_THRESHOLD": "3"}
    async with raw_guard(everything_server, env=env) as guard:
        created = await _start(guard, "cancelled")
        cancelled = await guard.request("tasks/cancel", {"taskId": created["result"]["task"]["taskId"]})
        assert cancelled["result"]["status"] == "cancelled", cancelled
        completed = await _run(guard, "cancelled")
        assert len(result_texts(completed)) == 1, completed
        assert "_meta" not in completed["result"] or VERDICT_KEY not in completed["result"]["_meta"]


async def test_a_blocking_task_result_outlives_the_call_timeout(
    raw_guard: RawConnector, everything_server: list[str]
) -> None:
    """``tasks/result`` asked at once waits for the whole task (4 s here), past a 2 s call timeout.

    (The call timeout bounds the handshake too: two seconds leave room for the server starting on a busy machine.)
    """
    async with raw_guard(everything_server, guard_args=["--call-timeout-seconds", "2"]) as guard:
        created = await _start(guard, "patience")
        report = await guard.request("tasks/result", {"taskId": created["result"]["task"]["taskId"]}, within=30)
    assert "result" in report, report
    assert result_texts(report)[0].startswith("# Research Report: patience")


async def test_tasks_cross_a_guard_of_several_servers(
    raw_guard: RawConnector, everything_server: list[str], tmp_path: Path
) -> None:
    """With several servers, tasks/get, tasks/list and tasks/result reach the server whose call created the task."""
    config = write_config(
        tmp_path / "mcp.json",
        {"everything": {"command": everything_server[0], "args": everything_server[1:]}, "time": time_entry()},
    )
    async with raw_guard([], guard_args=["--config", str(config)], initialize=False) as guard:
        hello = await guard.initialize()
        assert "call" in hello["result"]["capabilities"]["tasks"]["requests"]["tools"]
        assert hello["result"]["serverInfo"]["name"] == "mcp-loop-guard"
        listed = await guard.request("tools/list", {})
        names = {tool["name"] for tool in listed["result"]["tools"]}
        assert {f"everything__{TOOL}", "time__get_current_time"} <= names

        created = await _start(guard, "routing", f"everything__{TOOL}")
        assert "content" not in created["result"], created
        task_id = created["result"]["task"]["taskId"]
        tasks = await guard.request("tasks/list", {})
        assert task_id in [task["taskId"] for task in tasks["result"]["tasks"]]
        report = await _finished(guard, task_id)
        (text,) = result_texts(report)
        assert text.startswith("# Research Report: routing")
        unknown = await guard.request("tasks/get", {"taskId": "no-such-task"})
        assert unknown["error"]["code"] == -32602
