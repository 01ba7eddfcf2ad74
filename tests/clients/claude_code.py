"""Runs Claude Code's CLI headless (``claude -p``) against a fake model API, with one MCP server.

The CLI is pinned in tests/clients/package.json (``npm ci --prefix tests/clients``). Each
run gets a home directory and a project directory of its own under the test's temporary
directory, so it reads no user settings, memory or CLAUDE.md and leaves nothing behind.
Telemetry, error reporting, the auto-updater and other non-essential traffic are turned
off; the only server it talks to is the fake API on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.clients.fake_anthropic import FakeAnthropicAPI
from tests.harness import MARKER_ENV, exit_status, node_environment

CLIENTS_DIR = Path(__file__).resolve().parent
CLAUDE_PACKAGE = CLIENTS_DIR / "node_modules" / "@anthropic-ai" / "claude-code"
CLAUDE_CLI = CLAUDE_PACKAGE / "cli.js"
CLAUDE_RUN_LIMIT = 300.0
"""Seconds one ``claude -p`` run may take (20 calls take about 10 here, most of it guards starting)."""
FAKE_API_KEY = "sk-ant-test-0000"
"""Claude Code wants a key in the Anthropic format; the fake API does not check it."""


@dataclass(frozen=True)
class ClaudeRun:
    """One finished ``claude -p`` run."""

    pid: int
    """The pid of the ``claude`` process (node running cli.js)."""
    returncode: int
    stdout: str
    stderr: str
    debug_log: Path
    """Claude Code's own debug log (``--debug-file``): MCP connections, calls and errors."""

    def result(self) -> dict[str, Any]:
        """The result object ``--output-format json`` printed."""
        try:
            found = json.loads(self.stdout)
        except ValueError:
            pytest.fail(f"claude printed no JSON result:\n{self.describe()}")
        assert isinstance(found, dict), self.describe()
        return found

    def debug_lines(self, containing: str) -> list[str]:
        """The lines of the debug log that contain a text."""
        if not self.debug_log.exists():
            return []
        text = self.debug_log.read_text(encoding="utf-8", errors="replace")
        return [line for line in text.splitlines() if containing in line]

    def server_starts(self, server: str) -> int:
        """How many times Claude Code started (or restarted) the named MCP server."""
        return len(self.debug_lines(f'MCP server "{server}": Starting connection'))

    def describe(self) -> str:
        """Exit status, output and the MCP lines of the debug log, for assertion messages."""
        mcp_lines = "\n".join(self.debug_lines("MCP server"))
        return (
            f"claude exited with {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}\n"
            f"--- MCP lines of {self.debug_log.name} ---\n{mcp_lines}"
        )


class ClaudeCode:
    """Runs the pinned Claude Code CLI for one test, everything in the test's directory."""

    def __init__(self, directory: Path, marker: str, node: str) -> None:
        self.directory = directory
        self.marker = marker
        self.node = node
        self.home = directory / "claude-home"
        self.project = directory / "claude-project"
        self.runs: list[ClaudeRun] = []
        for path in (self.home, self.project):
            path.mkdir(exist_ok=True)

    def mcp_config(self, server: str, command: Sequence[str], env: Mapping[str, str]) -> Path:
        """Writes an ``mcpServers`` file with one stdio server; returns its path."""
        entry = {
            "type": "stdio",
            "command": command[0],
            "args": list(command[1:]),
            "env": {MARKER_ENV: self.marker, "PYTHONUNBUFFERED": "1", **env},
        }
        path = self.directory / f"mcp-{server}.json"
        path.write_text(json.dumps({"mcpServers": {server: entry}}, indent=2), encoding="utf-8")
        return path

    def environment(self, api_url: str) -> dict[str, str]:
        """The CLI's whole environment: the fake API, a home of its own, nothing sent elsewhere."""
        return {
            "PATH": f"{Path(self.node).parent}:/usr/bin:/bin",
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_STATE_HOME": str(self.home / ".local" / "state"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": api_url,
            "ANTHROPIC_API_KEY": FAKE_API_KEY,
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
            MARKER_ENV: self.marker,
            **node_environment(),
        }

    async def run(self, prompt: str, *, api_url: str, mcp_config: Path, allowed_tools: Sequence[str]) -> ClaudeRun:
        """``claude -p PROMPT`` with only the servers of mcp_config, the allowed tools needing no prompt.

        The CLI runs in a process group of its own; if it outlives CLAUDE_RUN_LIMIT the
        group is killed and the test fails with what it printed.
        """
        number = len(self.runs)
        debug_log = self.directory / f"claude-debug-{number}.log"
        argv = [
            self.node,
            str(CLAUDE_CLI),
            "-p",
            prompt,
            "--output-format",
            "json",
            "--mcp-config",
            str(mcp_config),
            "--strict-mcp-config",
            "--allowedTools",
            ",".join(allowed_tools),
            "--debug-file",
            str(debug_log),
        ]
        stdout_path = self.directory / f"claude-stdout-{number}.txt"
        stderr_path = self.directory / f"claude-stderr-{number}.txt"
        with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
            process = await anyio.open_process(
                argv,
                cwd=self.project,
                env=self.environment(api_url),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        timed_out = False
        try:
            with anyio.move_on_after(CLAUDE_RUN_LIMIT):
                await exit_status(process)
            timed_out = process.returncode is None
        finally:
            if process.returncode is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                with anyio.move_on_after(10):
                    await exit_status(process)
            await process.aclose()
        run = ClaudeRun(
            pid=process.pid,
            returncode=process.returncode if process.returncode is not None else -int(signal.SIGKILL),
            stdout=stdout_path.read_text(encoding="utf-8", errors="replace"),
            stderr=stderr_path.read_text(encoding="utf-8", errors="replace"),
            debug_log=debug_log,
        )
        self.runs.append(run)
        if timed_out:
            pytest.fail(f"claude ran over {CLAUDE_RUN_LIMIT} s and was killed\n{run.describe()}")
        return run

    async def run_served(
        self, prompt: str, api: FakeAnthropicAPI, *, mcp_config: Path, allowed_tools: Sequence[str]
    ) -> ClaudeRun:
        """:meth:`run`, once more when Claude Code never offered the model the server's tools.

        In ``-p`` mode Claude Code waits a few seconds at most for its MCP servers, then starts
        the conversation without those that are not connected yet. On a loaded machine an SDK
        server (about a second of CPU importing the SDK) can miss that wait; the run then has
        no main conversation at all, so no tool call reached the guard and the run says nothing
        about it: it is made again, once, and its first attempt stays in the report.
        """
        run = await self.run(prompt, api_url=api.url, mcp_config=mcp_config, allowed_tools=allowed_tools)
        if api.main_requests() == 0:
            print(f"the MCP server was not connected in time; running claude again\n{run.describe()}", file=sys.stderr)
            run = await self.run(prompt, api_url=api.url, mcp_config=mcp_config, allowed_tools=allowed_tools)
        return run

    def report(self) -> None:
        """Shows every run's output and MCP debug lines in the test's captured output."""
        for run in self.runs:
            print(run.describe(), file=sys.stderr)
