"""The fork server behind our SDK fixture servers keeps a server's life tied to its command's process.

The guard sees only the command's process; if it did not stand in for the server faithfully,
tests of the guard's child handling would pass against a server that outlived them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.harness import (
    PREFORK,
    command_process,
    fixture_command,
    guard_command,
    marked_processes,
    prefork_socket,
    server_environment,
)

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


PROBE = """
import atexit, json, os, resource, subprocess, sys
child = subprocess.run([sys.executable, "-c", "import os; print(os.getppid())"], capture_output=True, text=True)
atexit.register(lambda: print("exit handlers ran"))
print(json.dumps({
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "childs_ppid": int(child.stdout),
    "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    "write_through": sys.stdout.write_through,
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "marker": os.environ.get("PROBE_MARKER"),
}))
sys.exit(5)
"""


def _probe(tmp_path: Path, env: dict[str, str], *, nofile: int | None = None) -> tuple[int, int, dict[str, Any], str]:
    """Runs PROBE through the fork server: the command's pid, its status, what the probe saw, and its last line."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    command = [sys.executable, "-S", str(PREFORK), str(prefork_socket()), str(script), "an", "argument"]
    if nofile is not None:
        command = [*fixture_command("with_nofile", str(nofile), "--"), *command]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=tmp_path, env={**os.environ, **env})
    out, _ = process.communicate(timeout=30)
    first, last = out.decode().splitlines()
    return process.pid, process.returncode, json.loads(first), last


def test_a_fork_runs_as_the_commands_own_process_would(tmp_path: Path) -> None:
    """The command's arguments, directory, environment, open-file limit, parent, buffering and ending."""
    command, status, seen, last = _probe(tmp_path, {"PYTHONUNBUFFERED": "1", "PROBE_MARKER": "m"}, nofile=256)
    assert seen["pid"] != command, "run by the fork server"
    assert (status, last) == (5, "exit handlers ran")
    assert (seen["argv"], seen["cwd"], seen["marker"]) == (["an", "argument"], str(tmp_path), "m")
    assert seen["nofile"] == 256
    assert seen["ppid"] == os.getpid(), "the parent of the command, not the fork server"
    assert seen["childs_ppid"] == seen["pid"], "the truth in the fork's own children"
    assert seen["write_through"] is True  # PYTHONUNBUFFERED, as the interpreter would have set it up


def test_a_fork_is_buffered_without_pythonunbuffered(tmp_path: Path) -> None:
    _, _, seen, _ = _probe(tmp_path, {"PYTHONUNBUFFERED": ""})
    assert seen["write_through"] is False


def test_a_command_that_sets_the_interpreter_up_otherwise_runs_itself(tmp_path: Path) -> None:
    """A ``PYTHON*`` variable the fork server did not start with (here: import times on stderr) is not forked."""
    command, status, seen, _ = _probe(tmp_path, {"PYTHONPROFILEIMPORTTIME": "1"})
    assert (seen["pid"], status) == (command, 5)


def test_a_guard_starts_as_a_fork_of_the_guards_fork_server(tmp_path: Path) -> None:
    """What most tests start: the guard in front of a forked fixture server, in the environment tests give servers."""
    process = subprocess.Popen(
        guard_command(fixture_command("counting_server")),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=server_environment("prefork-test", {}),
        cwd=tmp_path,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["result"]["serverInfo"]["name"] == "counting-server"
    guard = command_process(process.pid)
    assert guard.pid != process.pid
    assert guard.parent().cmdline()[-2:] == [str(prefork_socket("guard")), "guard"]
    assert guard.pid in {p.pid for p in marked_processes("prefork-test")}, "the fork is the test's process"
    process.stdin.close()
    assert process.wait(timeout=10) == 0
