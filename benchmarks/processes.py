"""The programs a benchmark talks to: commands, guard revisions, background servers.

Every child writes its stderr to one log file per run, so banners and warnings
from the servers under test never garble the progress bar.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio
import anyio.abc
import psutil

from benchmarks.results import GUARD

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = REPO_ROOT / "benchmarks"
EVERYTHING_BIN = REPO_ROOT / "tests" / "node" / "node_modules" / ".bin" / "mcp-server-everything"
WORKTREE = "worktree"
"""The guard revision installed in this interpreter (the editable work tree)."""


class BenchmarkError(Exception):
    """Something the benchmark needs did not work; the message says what."""


@dataclass(frozen=True)
class Via:
    """One way of reaching an upstream: directly, or through a proxy program."""

    name: str
    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)
    note: str = ""
    url: str | None = None
    """Reached over streamable HTTP at this URL instead of by starting ``argv`` (the direct case of an HTTP server)."""


@dataclass(frozen=True)
class GuardBuild:
    """One revision of the guard: the installed work tree, or a git ref exported to a folder."""

    label: str
    pythonpath: str | None

    @property
    def env(self) -> dict[str, str]:
        """Environment that makes ``python -m mcp_loop_guard`` run this revision.

        ``XDG_STATE_HOME`` is passed on when set: the SDK's stdio client gives a server only a
        few safe variables, and without it a guard keeps its state in the user's own folder.
        """
        state = {"XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]} if "XDG_STATE_HOME" in os.environ else {}
        return state | ({"PYTHONPATH": self.pythonpath} if self.pythonpath else {})

    def command(self, upstream: Sequence[str], *options: str) -> list[str]:
        """The guard in front of ``upstream`` (a stdio command)."""
        return [sys.executable, "-m", "mcp_loop_guard", *options, "--", *upstream]

    def http_command(self, port: int, upstream_url: str) -> list[str]:
        """The guard serving streamable HTTP on ``port`` in front of an HTTP upstream."""
        return [*self._http(port), "--upstream", upstream_url]

    def http_stdio_command(self, port: int, upstream: Sequence[str]) -> list[str]:
        """The guard serving streamable HTTP on ``port`` in front of one stdio server, shared by every session."""
        return [*self._http(port), "--", *upstream]

    def _http(self, port: int) -> list[str]:
        return [sys.executable, "-m", "mcp_loop_guard", "--transport", "http", "--port", str(port)]


def guard_builds(refs: Sequence[str], scratch: Path) -> list[GuardBuild]:
    """Resolve ``--guard`` values: ``worktree`` or any git ref, exported with ``git archive``.

    Raises:
        BenchmarkError: a ref does not name a commit with a ``src`` folder.
    """
    builds: list[GuardBuild] = []
    for ref in refs:
        if ref == WORKTREE:
            builds.append(GuardBuild(GUARD, None))
            continue
        target = scratch / f"guard-{len(builds)}"
        target.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", ref, "src"], capture_output=True, check=False)
        if archive.returncode != 0:
            raise BenchmarkError(f"cannot export guard revision {ref!r}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
        builds.append(GuardBuild(f"{GUARD}@{ref}", str(target / "src")))
    return builds


def everything_command(mode: str = "stdio") -> list[str] | None:
    """``mcp-server-everything MODE`` from tests/node, or None when it is not installed."""
    return [str(EVERYTHING_BIN), mode] if EVERYTHING_BIN.exists() else None


EVERYTHING_MISSING = "server-everything is not installed: run `npm ci --prefix tests/node`"


def fixture_command() -> list[str]:
    """Our own fixture server (echo and large results) over stdio."""
    return [sys.executable, str(BENCH_DIR / "fixture_server.py")]


def guard_http_support(build: GuardBuild) -> str | None:
    """None when this guard revision accepts ``--transport http``, else why not."""
    env = {**os.environ, **build.env}
    shown = subprocess.run(
        [sys.executable, "-m", "mcp_loop_guard", "--help"], capture_output=True, text=True, env=env, check=False
    )
    missing = [flag for flag in ("--transport", "--upstream") if flag not in shown.stdout]
    if missing:
        return f"{build.label} has no HTTP mode yet ({' and '.join(missing)} not in its --help)"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_pids() -> set[int]:
    """Pids of this process's direct children."""
    return {child.pid for child in psutil.Process().children()}


def new_child(before: set[int]) -> psutil.Process | None:
    """The one child started since ``before`` was taken, if exactly one was."""
    fresh = [child for child in psutil.Process().children() if child.pid not in before]
    return fresh[0] if len(fresh) == 1 else None


def cpu_seconds(process: psutil.Process | None) -> float:
    """CPU time of one process, all its threads, not its children; NaN when unknown.

    Read from ``/proc/PID/task/*/schedstat`` (nanoseconds) where it exists: the
    user/system times psutil reports tick at 10 ms, too coarse for a few calls.
    """
    if process is None:
        return float("nan")
    tasks = Path(f"/proc/{process.pid}/task")
    try:
        return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks.iterdir()) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        times = process.cpu_times()
    except psutil.Error:
        return float("nan")
    return float(times.user + times.system)


async def _wait_listening(port: int, process: anyio.abc.Process) -> None:
    while True:
        if process.returncode is not None:
            raise BenchmarkError(f"server exited with status {process.returncode} before listening")
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
        except OSError:
            await anyio.sleep(0.05)
            continue
        await stream.aclose()
        return


@asynccontextmanager
async def background_server(
    argv: Sequence[str], port: int, log: TextIO, env: Mapping[str, str] | None = None, startup_seconds: float = 30.0
) -> AsyncIterator[psutil.Process]:
    """Run an HTTP server until the block ends; yield it once ``port`` accepts connections.

    Raises:
        BenchmarkError: the server exited or did not listen within ``startup_seconds``.
    """
    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        try:
            with anyio.fail_after(startup_seconds):
                await _wait_listening(port, process)
        except TimeoutError as exc:
            command = " ".join(argv)
            raise BenchmarkError(f"`{command}` did not listen on port {port} within {startup_seconds:.0f} s") from exc
        yield psutil.Process(process.pid)
    finally:
        with anyio.CancelScope(shield=True):
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with anyio.move_on_after(5):
                await process.wait()
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.aclose()


def scratch_dir() -> tempfile.TemporaryDirectory[str]:
    """A temporary folder for exported guard revisions and profiles."""
    return tempfile.TemporaryDirectory(prefix="mcp-loop-guard-bench-")
