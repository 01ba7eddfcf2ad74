"""Shared fixtures: the anyio backend, the third-party servers, and sessions over real stdio.

Importing this file gives the whole run a state directory of its own (``XDG_STATE_HOME``, in a
temporary folder removed at exit) and drops the user's ``LOOP_GUARD_*`` settings, before any
process starts: every guard the suite runs, also from session fixtures and benchmarks, keeps
its loop state there, never in the user's own state file. Each test then gets a directory of
its own on top (``state_home``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import (
    BIN_DIR,
    NODE_DIR,
    PREFORK,
    PREFORK_SOCKET_VARIABLE,
    Connector,
    CountingUpstream,
    everything_command,
    fixture_command,
    kill_marked,
    prefork_socket,
    pypi_server_command,
)
from tests.http_harness import Rig
from tests.redis_harness import RedisServer, running_redis

RUN_HOME = Path(tempfile.mkdtemp(prefix="mcp-loop-guard-tests-"))
"""This run's stand-in for the user's data folders."""
os.environ["XDG_STATE_HOME"] = str(RUN_HOME / "state")
for _name in [name for name in os.environ if name.upper().startswith("LOOP_GUARD_")]:
    del os.environ[_name]
atexit.register(shutil.rmtree, RUN_HOME, ignore_errors=True)


LONG_FIRST = (
    "tests/e2e/test_tasks.py",
    "tests/test_benchmarks_smoke.py",
    "tests/clients/test_claude_code.py",
    "tests/e2e/test_corpus_record.py",
    "tests/store/test_state_wire.py",
    "tests/e2e/test_http_stateless_relay.py",
    "tests/e2e/test_time_server.py",
    "tests/reliability/test_upstream_flood.py",
    "tests/e2e/test_docs_commands.py",
)
"""Test files with the longest tests (10 to 20 s each, mostly waiting on servers), in the order they run first."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs the files of LONG_FIRST before the rest, each file's tests still together and in their order.

    Workers take tests from the front of the list and idle ones take over the end of a busy one's
    share; a 20 s test taken last would end the run alone while the other workers wait.
    """
    rank = {path: place for place, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(LONG_FIRST)))


@pytest.fixture(scope="session", autouse=True)
def prefork_server() -> Iterator[None]:
    """This test process's fork servers: our SDK fixture servers and the guards start as forks (see fork_server.py).

    Importing the SDK costs each fixture server about a second of CPU, and the guard's imports
    0.3-0.5 s; a fork of a process that did it once costs milliseconds, and the suite starts a
    few hundred of each.
    """
    os.environ.pop(PREFORK_SOCKET_VARIABLE, None)  # this process's own, not one a process above it runs
    os.environ[PREFORK_SOCKET_VARIABLE] = str(prefork_socket())  # for the processes a test starts that start servers
    servers = []
    for kind in ("servers", "guard"):
        path = prefork_socket(kind)
        path.unlink(missing_ok=True)
        command = [sys.executable, str(PREFORK), "serve", str(path), kind]
        servers.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    for process in servers:
        assert process.stdout is not None
        if process.stdout.readline() != b"ready\n":  # the commands then run as they are, only slower
            print(f"a fork server did not start ({process.args}); its commands run as they are", file=sys.stderr)
    yield
    for process in servers:
        assert process.stdin is not None
        process.stdin.close()
    for process in servers:
        process.wait(timeout=10)


@pytest.fixture
def anyio_backend() -> str:
    """Runs every anyio test on asyncio."""
    return "asyncio"


@pytest.fixture(autouse=True)
def stop_signals_kept() -> Iterator[None]:
    """A test that runs the guard's CLI in this process leaves stop signals ignored, as the guard leaves them once
    its exit status is decided; every process a later test starts would inherit that and outlive a SIGTERM."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    yield
    for signum, handler in saved.items():
        if handler is not None and signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's guards keep their loop state in a directory of the test's own."""
    directory = tmp_path / "state-home"
    monkeypatch.setenv("XDG_STATE_HOME", str(directory))
    return directory


def _executable(path: Path, how: str) -> list[str]:
    if not path.exists():
        pytest.fail(f"{path} is missing: {how} (scripts/test.sh does it)")
    return [str(path)]


@pytest.fixture(scope="session")
def time_server() -> list[str]:
    """The argv of mcp-server-time (PyPI), installed next to this interpreter (run as a fork, see fork_server.py)."""
    _executable(BIN_DIR / "mcp-server-time", "pip install -e '.[test]'")
    return pypi_server_command("mcp-server-time", "--local-timezone", "UTC")


@pytest.fixture(scope="session")
def git_server() -> list[str]:
    """The argv of mcp-server-git (PyPI), installed next to this interpreter (started as a fork, see fork_server.py)."""
    _executable(BIN_DIR / "mcp-server-git", "pip install -e '.[test]'")
    return pypi_server_command("mcp-server-git")


@pytest.fixture(scope="session")
def everything_server() -> list[str]:
    """The argv of @modelcontextprotocol/server-everything (npm) over stdio."""
    _executable(NODE_DIR / "node_modules" / ".bin" / "mcp-server-everything", "npm ci in tests/node")
    return everything_command("stdio")


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


@pytest.fixture
def connect(tmp_path: Path, process_marker: str) -> Iterator[Connector]:
    """Opens sessions to servers over stdio; their stderr is shown when the test fails."""
    connector = Connector(tmp_path, process_marker)
    yield connector
    connector.report()


@pytest.fixture
def rig(tmp_path: Path, process_marker: str) -> Iterator[Rig]:
    """The test's servers over HTTP; their output is shown when it fails."""
    rig = Rig(tmp_path, process_marker)
    yield rig
    rig.report()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server on a free port for one test."""
    with running_redis(tmp_path / "redis") as server:
        yield server
