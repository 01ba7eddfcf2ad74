"""The suite never writes into the user's own loop state: its guards keep theirs in the run's own folders.

Guards are started many ways: by the harness, by session fixtures before any test's own
directory exists, and by the SDK's stdio client, which hands a server only a few safe
variables (``HOME``, ``PATH``...) plus what it is given, as the benchmarks do.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path

import anyio
import psutil
import pytest
from benchmarks.processes import GuardBuild
from benchmarks.results import GUARD
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.harness import PREFORK, REAL_STATE, CountingUpstream, stored


def test_processes_started_for_the_whole_run_get_its_own_state_home() -> None:
    """The fork servers, started before any test's fixtures, have a temporary XDG_STATE_HOME and no LOOP_GUARD_*."""
    servers = [
        child for child in psutil.Process().children() if str(PREFORK) in child.cmdline() and "serve" in child.cmdline()
    ]
    assert sorted(server.cmdline()[-1] for server in servers) == ["guard", "servers"], servers
    for server in servers:
        environment = server.environ()
        state = Path(environment.get("XDG_STATE_HOME", Path.home() / ".local" / "state"))
        assert state.is_relative_to(tempfile.gettempdir()), state
        assert not state.is_relative_to(REAL_STATE.parent)
        assert [name for name in environment if name.startswith("LOOP_GUARD_")] == []


@pytest.mark.e2e
@pytest.mark.anyio
async def test_a_guard_given_the_sdks_few_variables_keeps_its_state_in_the_test(
    counting: CountingUpstream, state_home: Path
) -> None:
    """A guard started as the benchmarks start it writes its agent under the test's XDG_STATE_HOME, not the real one."""
    key = f"isolation-{uuid.uuid4().hex}"
    build = GuardBuild(GUARD, None)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_loop_guard", "--", *counting.command],
        env={**build.env, **counting.env, "LOOP_GUARD_AGENT_KEY": key},
    )
    with anyio.fail_after(30):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("echo", {"text": "where does my state go"})
        done = await anyio.run_process([sys.executable, "-m", "mcp_loop_guard", "state", "list", "--json"])
    listed = [entry["key"] for entry in json.loads(done.stdout)]
    assert any(key in shown for shown in listed), listed
    assert stored(state_home / "mcp-loop-guard", key)
    assert not stored(REAL_STATE, key)
