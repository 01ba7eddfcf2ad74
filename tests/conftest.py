"""Shared fixtures: the anyio backend, the third-party servers, and sessions over real stdio."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    BIN_DIR,
    NODE_DIR,
    Callbacks,
    Connection,
    GuardProcess,
    Mode,
    counted_calls,
    fixture_command,
    guard_command,
    kill_marked,
    open_guard_process,
    open_stdio_session,
)


@pytest.fixture
def anyio_backend() -> str:
    """Runs every anyio test on asyncio."""
    return "asyncio"


def _executable(path: Path, how: str) -> list[str]:
    if not path.exists():
        pytest.fail(f"{path} is missing: {how} (scripts/test.sh does it)")
    return [str(path)]


@pytest.fixture(scope="session")
def time_server() -> list[str]:
    """The argv of mcp-server-time (PyPI), installed next to this interpreter."""
    command = _executable(BIN_DIR / "mcp-server-time", "pip install -e '.[test]'")
    return [*command, "--local-timezone", "UTC"]


@pytest.fixture(scope="session")
def git_server() -> list[str]:
    """The argv of mcp-server-git (PyPI), installed next to this interpreter."""
    return _executable(BIN_DIR / "mcp-server-git", "pip install -e '.[test]'")


@pytest.fixture(scope="session")
def everything_server() -> list[str]:
    """The argv of @modelcontextprotocol/server-everything (npm) over stdio."""
    command = _executable(NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything", "npm ci in tests/node")
    return [*command, "stdio"]


@dataclass(frozen=True)
class CountingUpstream:
    """Our counting fixture server and the log of the tools/call it received."""

    command: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """The tools/call that reached this server so far, optionally of one tool."""
        return counted_calls(self.log, tool)


@pytest.fixture
def counting(tmp_path: Path) -> CountingUpstream:
    """A counting server that logs each tools/call to a file of the test's own."""
    log = tmp_path / "counting-server.jsonl"
    return CountingUpstream(command=fixture_command("counting_server"), log=log, env={"COUNTING_SERVER_LOG": str(log)})


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    """A git repository with one commit and a clean work tree."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)

    git("init", "--quiet", "--initial-branch=main")
    git("config", "user.email", "e2e@example.com")
    git("config", "user.name", "E2E")
    git("config", "commit.gpgsign", "false")
    (repo / "README.txt").write_text("hello\n", encoding="utf-8")
    git("add", "README.txt")
    git("commit", "--quiet", "-m", "initial")
    return repo


@pytest.fixture
def process_marker() -> Iterator[str]:
    """A token in the environment of every process the test starts; leftovers are killed after it."""
    marker = uuid.uuid4().hex
    yield marker
    kill_marked(marker)


class Connector:
    """Opens client sessions to a server command, directly or through the guard."""

    def __init__(self, directory: Path, marker: str) -> None:
        self.directory = directory
        self.marker = marker
        self.stderr_files: list[Path] = []

    def _stderr(self, label: str) -> Path:
        path = self.directory / f"stderr-{len(self.stderr_files)}-{label}.log"
        self.stderr_files.append(path)
        return path

    def __call__(
        self,
        command: Sequence[str],
        *,
        mode: Mode = "guarded",
        guard_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        callbacks: Callbacks | None = None,
    ) -> AbstractAsyncContextManager[Connection]:
        """An async context manager yielding an initialized session with the server.

        In "guarded" mode the server runs as the guard's upstream:
        ``python -m mcp_loop_guard *guard_args -- *command``.
        """
        argv = guard_command(command, guard_args) if mode == "guarded" else list(command)
        return open_stdio_session(
            argv, marker=self.marker, stderr=self._stderr(mode), env=env, cwd=cwd, callbacks=callbacks
        )

    def guard_process(
        self,
        command: Sequence[str],
        *,
        guard_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        callbacks: Callbacks | None = None,
    ) -> AbstractAsyncContextManager[GuardProcess]:
        """Starts the guard as a child process the test can observe (exit status, children)."""
        return open_guard_process(
            command,
            marker=self.marker,
            stderr=self._stderr("process"),
            guard_args=guard_args,
            env=env,
            callbacks=callbacks,
        )

    def report(self) -> None:
        """Copies what the servers wrote to stderr into the test's captured output."""
        for path in self.stderr_files:
            if path.exists() and (text := path.read_text(encoding="utf-8", errors="replace")):
                print(f"--- {path.name} ---\n{text}", file=sys.stderr)


@pytest.fixture
def connect(tmp_path: Path, process_marker: str) -> Iterator[Connector]:
    """Opens sessions to servers over stdio; their stderr is shown when the test fails."""
    connector = Connector(tmp_path, process_marker)
    yield connector
    connector.report()
