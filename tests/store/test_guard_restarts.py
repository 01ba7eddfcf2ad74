"""Loop state belongs to the agent, not to the guard process: real guards over stdio, restarted and shared.

The agent of a stdio guard is the client process that started it (with the server command
and the working directory), or the ``LOOP_GUARD_AGENT_KEY`` it was given. Here the client
is either this test process or an agent driver subprocess (tests/clients/agent_driver.py)
that starts a new guard for every call, as per-call clients do.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.harness import (
    VERDICT_KEY,
    Connector,
    CountingUpstream,
    action,
    exit_status,
    guard_command,
    server_environment,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

DRIVER = Path(__file__).resolve().parents[1] / "clients" / "agent_driver.py"
DRIVER_LIMIT = 90.0
"""Seconds one driver run may take (a guard and its upstream start for each of its calls)."""


async def drive(calls: int, command: list[str], *, cwd: Path, marker: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """Runs an agent driver (a new parent process) for `calls` identical `constant` calls; what each got back."""
    lines = "".join(json.dumps({"tool": "constant", "arguments": {}}) + "\n" for _ in range(calls))
    with anyio.fail_after(DRIVER_LIMIT):
        done = await anyio.run_process(
            [sys.executable, str(DRIVER), *guard_command(command)],
            input=lines.encode(),
            cwd=cwd,
            env=server_environment(marker, env),
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-5000:]
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


def driven_action(answer: dict[str, Any]) -> str | None:
    """The guard's verdict on an answer the driver printed, None where it added none."""
    found = answer["meta"].get(VERDICT_KEY)
    return None if found is None else str(found["action"])


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The working directory every guard of the test runs in (it is part of the agent's key)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


async def test_a_sigkilled_guard_restarted_by_the_same_client_continues_the_streak(
    connect: Connector, counting: CountingUpstream
) -> None:
    """Two calls, SIGKILL, a new guard: its first call is the 3rd identical one and is warned; the 5th is refused."""
    async with connect.guard_process(counting.command, env=counting.env) as first:
        with anyio.fail_after(20):
            before = [action(await first.session.call_tool("constant", {})) for _ in range(2)]
        os.kill(first.process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            status = await exit_status(first.process)
    assert status == -signal.SIGKILL
    async with connect.guard_process(counting.command, env=counting.env) as second:
        with anyio.fail_after(20):
            results = [await second.session.call_tool("constant", {}) for _ in range(3)]
    assert before == [None, None]
    assert [action(result) for result in results] == ["warn", "warn", "block"]
    assert [result.is_error for result in results] == [False, False, True]
    assert len(counting.calls("constant")) == 4, "the refused 5th call must not reach the upstream"


async def test_a_guard_started_by_another_client_process_starts_fresh(
    connect: Connector, counting: CountingUpstream, process_marker: str, work: Path
) -> None:
    """After this process got a warning at its 3rd identical call, a driver's guard (same command, cwd) is fresh."""
    async with connect(counting.command, env=counting.env, cwd=work) as conn:
        with anyio.fail_after(20):
            own = [action(await conn.session.call_tool("constant", {})) for _ in range(3)]
    other = await drive(2, counting.command, cwd=work, marker=process_marker, env=counting.env)
    assert own == [None, None, "warn"]
    assert [driven_action(answer) for answer in other] == [None, None]
    assert not any(answer["is_error"] for answer in other)
    assert len(counting.calls("constant")) == 5


async def test_one_agent_key_shared_by_two_client_processes_is_one_state(
    counting: CountingUpstream, process_marker: str, work: Path
) -> None:
    """LOOP_GUARD_AGENT_KEY: two driver processes with one key add up; their 3rd call is warned, the 5th refused."""
    env = {**counting.env, "LOOP_GUARD_AGENT_KEY": "project-alpha"}
    first = await drive(2, counting.command, cwd=work, marker=process_marker, env=env)
    second = await drive(3, counting.command, cwd=work, marker=process_marker, env=env)
    answers = first + second
    assert [driven_action(answer) for answer in answers] == [None, None, "warn", "warn", "block"]
    assert [answer["is_error"] for answer in answers] == [False, False, False, False, True]
    assert len(counting.calls("constant")) == 4
