"""Servers on local ports for the interoperability tests: started, awaited and stopped with checks.

Every process carries the test's marker in its environment (tests.harness), so the test
can prove afterwards that nothing it started is left running.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import psutil

from tests.harness import describe, marked_processes, server_environment
from tests.http_harness import PortTakenError, wait_answering

LOCALHOST = "127.0.0.1"
STOP_LIMIT = 10.0
"""Seconds a server may take to exit after SIGTERM before its process group is killed."""
GONE_LIMIT = 10.0
"""Seconds every process of a test may take to be gone once the test has stopped them."""

Launch = Callable[[int], Sequence[str]]
"""Given a free port: the argv of a server that listens on it."""


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOCALHOST, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Served:
    """A server a test started on a local port, its output in a file."""

    name: str
    process: anyio.abc.Process
    port: int
    log: Path

    def url(self, path: str) -> str:
        """``http://127.0.0.1:<port><path>``."""
        return f"http://{LOCALHOST}:{self.port}{path}"

    def output(self) -> str:
        """What the server (and the children sharing its stderr) wrote so far."""
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


@dataclass
class Processes:
    """Starts one test's servers and checks, at the end, that each stopped on SIGTERM and nothing is left."""

    directory: Path
    marker: str
    logs: list[Path] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)
    """Servers that ignored SIGTERM for STOP_LIMIT seconds and had to be killed."""

    def log(self, label: str) -> Path:
        """A new file for one process's output."""
        path = self.directory / f"{len(self.logs)}-{label}.log"
        self.logs.append(path)
        return path

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a process of this test: the marker and env on the SDK's safe defaults."""
        return server_environment(self.marker, env)

    @asynccontextmanager
    async def serve(
        self,
        name: str,
        launch: Launch,
        *,
        ready_path: str,
        accept: Callable[[int], bool] = lambda status: status == 200,
        env: Mapping[str, str] | None = None,
        env_for_port: Callable[[int], Mapping[str, str]] | None = None,
        attempts: int = 3,
    ) -> AsyncIterator[Served]:
        """Runs a server on a free port until its ready_path answers an accepted status; stops it on exit.

        env is added to the server's environment, and so is env_for_port(port) for servers
        told their port by a variable.
        """
        for attempt in range(1, attempts + 1):
            port = free_port()
            log = self.log(name)
            with log.open("w", encoding="utf-8") as errlog:
                process = await anyio.open_process(
                    list(launch(port)),
                    stdin=subprocess.DEVNULL,
                    stdout=errlog,
                    stderr=errlog,
                    env=self.environment({**(env or {}), **(env_for_port(port) if env_for_port else {})}),
                    start_new_session=True,
                )
            served = Served(name, process, port, log)
            try:
                await wait_answering(served.url(ready_path), served.process, served.output, accept)
            except PortTakenError:
                await self.stop(served)
                if attempt == attempts:
                    raise
                continue
            except BaseException:
                await self.stop(served)
                raise
            try:
                yield served
            finally:
                await self.stop(served)
            return

    async def stop(self, served: Served) -> None:
        """SIGTERM, then SIGKILL to the process group after STOP_LIMIT (recorded in ``killed``)."""
        with anyio.CancelScope(shield=True):
            process = served.process
            if process.returncode is None:
                with suppress(ProcessLookupError):
                    process.terminate()
                with anyio.move_on_after(STOP_LIMIT):
                    await process.wait()
            if process.returncode is None:
                self.killed.append(served.name)
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                with anyio.move_on_after(5):
                    await process.wait()
            await process.aclose()

    def survivors(self, within: float = GONE_LIMIT) -> list[psutil.Process]:
        """This test's processes still alive after waiting up to `within` seconds."""
        deadline = time.monotonic() + within
        while (alive := marked_processes(self.marker)) and time.monotonic() < deadline:
            psutil.wait_procs(alive, timeout=0.1)
        return marked_processes(self.marker)

    def check_cleanup(self) -> None:
        """Fails when a server had to be killed or a process of the test outlived it."""
        left = self.survivors()
        assert not self.killed, f"killed after ignoring SIGTERM for {STOP_LIMIT} s: {self.killed}"
        assert left == [], f"left running: {describe(left)}"

    def report(self) -> None:
        """Copies every process's output into the test's captured output."""
        for path in self.logs:
            if path.exists() and (text := path.read_text(encoding="utf-8", errors="replace")):
                print(f"--- {path.name} ---\n{text}", file=sys.stderr)
