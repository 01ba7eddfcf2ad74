"""The fork server behind our SDK fixture servers keeps a server's life tied to its command's process.

The guard sees only the command's process; if it did not stand in for the server faithfully,
tests of the guard's child handling would pass against a server that outlived them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.harness import PREFORK, fixture_command, prefork_socket

pytestmark = pytest.mark.e2e

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


def _forked_children() -> set[int]:
    """The live forks of this test process's fork server.

    The server is found as this process's own child: its forks run without ``exec``, so they
    carry its command line too, and once process ids wrap around one may come first by pid.
    """
    path = str(prefork_socket())
    (server,) = (p for p in psutil.Process().children() if "serve" in p.cmdline() and path in p.cmdline())
    return {child.pid for child in server.children()}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pids: set[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def started() -> Iterator[tuple[subprocess.Popen[bytes], set[int]]]:
    """The counting server through its command, answering; and the fork it runs in."""
    before = _forked_children()
    command = fixture_command("counting_server")
    assert command[2] == str(PREFORK)
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["result"]["serverInfo"]["name"] == "counting-server"
    forks = _forked_children() - before
    assert len(forks) == 1, forks
    yield process, forks
    process.kill()
    process.wait()


def test_a_killed_command_takes_its_server_along(started: tuple[subprocess.Popen[bytes], set[int]]) -> None:
    process, forks = started
    process.kill()
    assert process.wait(timeout=5) == -signal.SIGKILL
    assert _gone(forks), "the forked server outlived the command that stood for it"


def test_a_signal_reaches_the_server_and_its_death_is_mirrored(
    started: tuple[subprocess.Popen[bytes], set[int]],
) -> None:
    process, forks = started
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == -signal.SIGTERM
    assert _gone(forks)


def test_the_server_exit_status_is_the_commands(started: tuple[subprocess.Popen[bytes], set[int]]) -> None:
    process, forks = started
    assert process.stdin is not None
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "crash", "arguments": {}}}
    process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n' + json.dumps(call).encode() + b"\n")
    process.stdin.flush()
    assert process.wait(timeout=5) == 17  # the counting server's crash status
    assert _gone(forks)


def test_stdin_closed_ends_the_server_as_it_would_end_alone(
    started: tuple[subprocess.Popen[bytes], set[int]],
) -> None:
    process, forks = started
    assert process.stdin is not None
    process.stdin.close()
    assert process.wait(timeout=5) == 0
    assert _gone(forks)


def test_without_a_fork_server_the_command_runs_the_server_itself(tmp_path: Path) -> None:
    command = fixture_command("counting_server")
    command[3] = str(tmp_path / "nobody-listens.sock")
    done = subprocess.run(
        command, input=json.dumps(INITIALIZE).encode() + b"\n", capture_output=True, timeout=30, check=True
    )
    assert json.loads(done.stdout.splitlines()[0])["result"]["serverInfo"]["name"] == "counting-server"
