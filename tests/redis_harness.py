"""A real redis-server (or valkey-server) on a free port, started by the test that needs it; files made read-only."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class RedisServer:
    """A redis-server process of the test's own."""

    process: subprocess.Popen[bytes]
    port: int
    directory: Path

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        """Kill it (as a crash would)."""
        self.process.kill()
        self.process.wait(10)

    def start(self) -> None:
        """Start it again on the same port, empty."""
        self.process = _spawn(self.port, self.directory)


def set_read_only(path: Path, *, read_only: bool) -> None:
    """chmod for a normal user; root ignores file modes, so it gets the immutable attribute instead."""
    if os.geteuid() != 0:
        path.chmod((0o555 if path.is_dir() else 0o444) if read_only else 0o755)
        return
    done = subprocess.run(
        ["chattr", "+i" if read_only else "-i", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"chattr failed ({done.stderr.strip()}): cannot make a file read-only for root"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _spawn(port: int, directory: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        pytest.fail("redis-server is missing: scripts/test.sh installs it (apt-get install redis-server)")
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.02)
    process.kill()
    pytest.fail("redis-server did not start listening within 10 s")


@contextmanager
def running_redis(directory: Path) -> Iterator[RedisServer]:
    """A fresh redis-server keeping its files in ``directory``; killed at the end."""
    directory.mkdir()
    port = _free_port()
    server = RedisServer(_spawn(port, directory), port, directory)
    try:
        yield server
    finally:
        server.process.kill()
        server.process.wait(10)
