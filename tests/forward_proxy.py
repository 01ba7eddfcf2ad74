"""A real forward proxy for the tests (proxy.py, BSD-3-Clause): HTTP forwarding and CONNECT tunnels, Basic auth.

Its access log is the witness of what went through it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

USER, PASSWORD = "guard", "s3cret-pass"


@dataclass
class ForwardProxyProcess:
    port: int
    log: Path

    @property
    def url(self) -> str:
        """The proxy's URL with the credentials it asks for."""
        return f"http://{USER}:{PASSWORD}@127.0.0.1:{self.port}"

    def requests(self) -> list[str]:
        """What it served, one ``METHOD host:port/path - STATUS`` per connection, in order."""
        lines = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        parts = [line.split(" - ") for line in lines if "access_log" in line]
        return [" - ".join(part[3:5]) for part in parts if len(part) > 4]


@contextmanager
def running_forward_proxy(directory: Path) -> Iterator[ForwardProxyProcess]:
    """proxy.py on a free loopback port, asking for Basic credentials; stopped at the end."""
    directory.mkdir(parents=True, exist_ok=True)
    port_file, log = directory / "proxy.port", directory / "proxy.log"
    argv = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0", "--port-file", str(port_file)]
    argv += ["--num-workers", "1", "--num-acceptors", "1", "--basic-auth", f"{USER}:{PASSWORD}"]
    argv += ["--log-file", str(log), "--log-level", "INFO"]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                msg = f"proxy.py did not start: {log.read_text() if log.exists() else 'no log'}"
                raise RuntimeError(msg)
            time.sleep(0.05)
        yield ForwardProxyProcess(int(port_file.read_text()), log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
