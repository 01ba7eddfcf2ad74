"""Independent agents with the same server command keep independent loop state.

Two agent processes that start the same guard command (same arguments, same working
directory) must not add up each other's calls, and neither must two guards one process
keeps open at the same time (sub-agents working in parallel).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import ClientSession, types

from tests.harness import (
    VERDICT_KEY,
    Connector,
    CountingUpstream,
    action,
    forked_script,
    guard_command,
    server_environment,
    stop_process,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

DRIVER = Path(__file__).resolve().parent / "agent_driver.py"
ANSWER_LIMIT = 40.0
"""Seconds an agent process may take for one call, a guard and its upstream starting included."""


@dataclass
class AgentProcess:
    """A running agent_driver.py: asks it for one call at a time, each through a new guard of its own."""

    name: str
    process: anyio.abc.Process
    lines: BufferedByteReceiveStream

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """One tool call through a new guard started by this agent; what it got back."""
        assert self.process.stdin is not None
        await self.process.stdin.send((json.dumps({"tool": tool, "arguments": arguments or {}}) + "\n").encode())
        with anyio.fail_after(ANSWER_LIMIT):
            line = await self.lines.receive_until(b"\n", 1 << 20)
        answer: dict[str, Any] = json.loads(line)
        return answer


def _verdict(answer: dict[str, Any]) -> str | None:
    found = answer["meta"].get(VERDICT_KEY)
    return None if found is None else str(found["action"])


@asynccontextmanager
async def _agents(
    names: list[str], command: list[str], *, marker: str, env: dict[str, str], directory: Path
) -> AsyncIterator[list[AgentProcess]]:
    """Starts one agent process per name, all in the same working directory, each with its stderr in a file."""
    work = directory / "agents-cwd"
    work.mkdir()
    async with AsyncExitStack() as stack:
        agents: list[AgentProcess] = []
        for name in names:
            errlog = stack.enter_context((directory / f"agent-{name}.stderr.log").open("w", encoding="utf-8"))
            process = await anyio.open_process(
                forked_script(DRIVER, *command),
                cwd=work,
                env=server_environment(marker, env),
                stdout=subprocess.PIPE,
                stderr=errlog,
                start_new_session=True,
            )
            stack.push_async_callback(stop_process, process)
            assert process.stdout is not None
            agents.append(AgentProcess(name, process, BufferedByteReceiveStream(process.stdout)))
        yield agents


async def test_two_agent_processes_keep_their_own_state(
    counting: CountingUpstream, guard_env: dict[str, str], process_marker: str, tmp_path: Path
) -> None:
    """Two agents alternating identical calls through the same guard command: each is warned at its own 3rd only."""
    command = guard_command(counting.command)
    try:
        async with _agents(["a", "b"], command, marker=process_marker, env=guard_env, directory=tmp_path) as (a, b):
            order = [a, b, a, b, a, b]
            answers = [(agent.name, await agent.call("constant")) for agent in order]
    finally:
        for name in ("a", "b"):
            log = tmp_path / f"agent-{name}.stderr.log"
            print(f"--- agent {name} stderr ---\n{log.read_text(errors='replace')}", file=sys.stderr)
    verdicts = [(name, _verdict(answer)) for name, answer in answers]
    assert verdicts[:4] == [("a", None), ("b", None), ("a", None), ("b", None)], "warned for the other agent's calls"
    assert verdicts[4:] == [("a", "warn"), ("b", "warn")], "each agent's own 3rd identical call is warned"
    assert not any(answer["is_error"] for _, answer in answers)
    assert len(counting.calls("constant")) == 6


async def _call(session: ClientSession, tool: str) -> types.CallToolResult:
    with anyio.fail_after(20):
        return await session.call_tool(tool, {})


async def test_parallel_guards_under_one_parent_keep_their_own_state(
    connect: Connector, counting: CountingUpstream, guard_env: dict[str, str]
) -> None:
    """Two guards open at once in one process (parallel sub-agents), alternating identical calls: no false loop."""
    async with (
        connect(counting.command, env=guard_env) as first,
        connect(counting.command, env=guard_env) as second,
    ):
        results: list[tuple[str, types.CallToolResult]] = []
        for _ in range(3):
            results.append(("first", await _call(first.session, "constant")))
            results.append(("second", await _call(second.session, "constant")))
    verdicts = [(name, action(result)) for name, result in results]
    assert verdicts[:4] == [("first", None), ("second", None), ("first", None), ("second", None)]
    assert verdicts[4:] == [("first", "warn"), ("second", "warn")]
    assert not any(result.is_error for _, result in results)
    assert len(counting.calls("constant")) == 6
