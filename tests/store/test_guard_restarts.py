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
from dataclasses import dataclass
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
    forked_script,
    guard_command,
    server_environment,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

DRIVER = Path(__file__).resolve().parents[1] / "clients" / "agent_driver.py"
DRIVER_LIMIT = 90.0
"""Seconds one driver run may take (a guard and its upstream start for each of its calls)."""


@dataclass
class Driven:
    """What one agent driver run got back, and what it and its guards wrote to stderr."""

    answers: list[dict[str, Any]]
    stderr: str

    def actions(self) -> list[str | None]:
        """The guard's verdict on each answer, None where it added none."""
        return [driven_action(answer) for answer in self.answers]


async def drive(calls: int, command: list[str], *, cwd: Path, marker: str, env: dict[str, str]) -> Driven:
    """Runs an agent driver (a new parent process) for `calls` identical `constant` calls; what each got back."""
    lines = "".join(json.dumps({"tool": "constant", "arguments": {}}) + "\n" for _ in range(calls))
    with anyio.fail_after(DRIVER_LIMIT):
        done = await anyio.run_process(
            forked_script(DRIVER, *guard_command(command)),
            input=lines.encode(),
            cwd=cwd,
            env=server_environment(marker, env),
            check=False,
        )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr[-5000:]
    return Driven([json.loads(line) for line in done.stdout.decode().splitlines()], stderr)


def driven_action(answer: dict[str, Any]) -> str | None:
    """The guard's verdict on an answer the driver printed, None where it added none."""
    found = answer["meta"].get(VERDICT_KEY)
    return None if found is None else str(found["action"])


@pytest.fixture
def env(counting: CountingUpstream) -> dict[str, str]:
    """The guards' environment: the counting server's log."""
    return dict(counting.env)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The working directory every guard of the test runs in (it is part of the agent's key)."""
    path = tmp_path / "work"
    path.mkdir()
    return path


async def test_a_sigkilled_guard_restarted_by_the_same_client_continues_the_streak(
    connect: Connector, counting: CountingUpstream, env: dict[str, str]
) -> None:
    """Two calls, SIGKILL, a new guard: its first call is the 3rd identical one and is warned; the 5th is refused."""
    async with connect.guard_process(counting.command, env=env) as first:
        with anyio.fail_after(20):
            before = [action(await first.session.call_tool("constant", {})) for _ in range(2)]
        os.kill(first.process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            status = await exit_status(first.process)
    assert status == -signal.SIGKILL
    async with connect.guard_process(counting.command, env=env) as second:
        with anyio.fail_after(20):
            results = [await second.session.call_tool("constant", {}) for _ in range(3)]
    assert before == [None, None]
    assert [action(result) for result in results] == ["warn", "warn", "block"]
    assert [result.is_error for result in results] == [False, False, True]
    assert len(counting.calls("constant")) == 4, "the refused 5th call must not reach the upstream"


async def test_a_guard_started_by_another_client_process_starts_fresh(
    connect: Connector, counting: CountingUpstream, env: dict[str, str], process_marker: str, work: Path
) -> None:
    """After this process got a warning at its 3rd identical call, a driver's guard (same command, cwd) is fresh."""
    async with connect(counting.command, env=env, cwd=work) as conn:
        with anyio.fail_after(20):
            own = [action(await conn.session.call_tool("constant", {})) for _ in range(3)]
    other = await drive(2, counting.command, cwd=work, marker=process_marker, env=env)
    assert own == [None, None, "warn"]
    assert other.actions() == [None, None], other.stderr
    assert not any(answer["is_error"] for answer in other.answers)
    assert len(counting.calls("constant")) == 5


async def test_one_agent_key_shared_by_two_client_processes_is_one_state(
    counting: CountingUpstream, env: dict[str, str], process_marker: str, work: Path
) -> None:
    """LOOP_GUARD_AGENT_KEY: two driver processes with one key add up; their 3rd call is warned, the 5th refused."""
    keyed = {**env, "LOOP_GUARD_AGENT_KEY": "project-alpha"}
    first = await drive(2, counting.command, cwd=work, marker=process_marker, env=keyed)
    second = await drive(3, counting.command, cwd=work, marker=process_marker, env=keyed)
    log = f"--- first driver ---\n{first.stderr}\n--- second driver ---\n{second.stderr}"
    assert first.actions() + second.actions() == [None, None, "warn", "warn", "block"], log
    assert [answer["is_error"] for answer in first.answers + second.answers] == [False] * 4 + [True], log
    assert len(counting.calls("constant")) == 4, log
