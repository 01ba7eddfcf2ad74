"""Fixtures of the client tests: real MCP clients (Claude Code, pydantic-ai) driving the guard.

How Claude Code 2.1.112 (the pinned CLI) runs a stdio MCP server, as measured here with
``ps -o pid,ppid,pgid,args``, ``strace -f -e trace=kill,execve`` on the CLI, its
``--debug-file`` log, and a probe server logging its own pid, parent, group, stdin EOF
and every signal it got:

- It spawns the configured command itself: the guard is a direct child of the ``claude``
  process (node running cli.js; its process title is ``claude``), with no shell or other
  process in between. The guard stays in the CLI's process group and session (no
  ``setsid``); stdin, stdout and stderr are Unix socket pairs, not ptys.
- It connects at startup (initialize, then tools/list) and calls tools one at a time.
- When the guard aborts (answers the third refusal, then exits with status 3), Claude
  Code notices when the process ends ("connection closed ... Cleared connection cache for
  reconnection"). A call sent in the moment between the answer and the exit gets the
  text ``MCP error -32000: Connection closed`` as an error result; which call that is
  depends on timing (with this fake model, the 8th call of a loop usually is). The next
  tool call starts a new guard process, again a direct child of the same ``claude``
  process, and runs the call on it: fresh state today, so a loop of 20 identical calls
  reaches the upstream 12 times through 3 guards (20 of 40 through 5 guards).
- The server's environment is the CLI's own (all of it, ``ANTHROPIC_API_KEY`` included)
  plus the config's ``env``; its working directory is the CLI's.
- How it stops the server at its own exit depends on the config entry. With
  ``"type": "stdio"`` (what ``claude mcp add`` writes, and what these tests use) it sends
  SIGINT, then SIGTERM if the process is still there 100 ms later, then SIGKILL 400 ms after
  that, each with ``kill(pid)``: to the guard alone, never to a group. The guard, which
  stops its upstream with a grace of its own, is usually still stopping then and gets the
  SIGKILL. Without ``type`` it closes the server's stdin, sends SIGTERM 2 s later if the
  process is still there and SIGKILL 2 s after that, again to that process only; the guard
  exits on stdin EOF well within that. On SIGINT or SIGTERM to ``claude`` itself (no
  ``type``) it closes stdin, sends SIGTERM 2 s later, and exits before the SIGKILL step.
  Whatever a guard must keep across a restart has to be on disk before its exit begins.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients.claude_code import CLAUDE_CLI, ClaudeCode
from tests.harness import NODE_22, CountingUpstream


@pytest.fixture
def state_home(tmp_path: Path) -> Path:
    """An XDG_STATE_HOME of the test's own, so no guard reads or writes the real home's state."""
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def guard_env(counting: CountingUpstream, state_home: Path) -> dict[str, str]:
    """The environment every guard of the test gets: the counting server's log and the test's state home."""
    return {**counting.env, "XDG_STATE_HOME": str(state_home)}


@pytest.fixture
def claude_code(tmp_path: Path, process_marker: str) -> Iterator[ClaudeCode]:
    """The pinned Claude Code CLI; each run's output and MCP log lines are shown when the test fails."""
    if not CLAUDE_CLI.exists():
        pytest.fail(f"{CLAUDE_CLI} is missing: run `npm ci --prefix tests/clients` (scripts/test.sh does it)")
    node = str(NODE_22) if NODE_22.exists() else shutil.which("node")  # 22: with its compile cache
    if node is None:
        pytest.fail("node is not on PATH: Claude Code's CLI needs Node.js 18 or newer")
    runner = ClaudeCode(tmp_path, process_marker, node)
    yield runner
    runner.report()
