"""Other MCP proxies to compare with, each in its own virtual environment.

``mcp-proxy`` pins ``mcp<2`` and ``fastmcp`` brings its own dependency tree, so
neither can share the guard's environment. Each gets a venv under
``benchmarks/.venvs/<name>``, created with pip on first use and reused after.
Versions are pinned so that runs on different days compare the same peers.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.processes import BENCH_DIR
from benchmarks.results import FASTMCP, MCP_PROXY

VENVS = BENCH_DIR / ".venvs"


@dataclass(frozen=True, slots=True)
class Peer:
    """A proxy from PyPI and the pinned requirement that installs it."""

    name: str
    requirement: str
    entry: str
    """Executable in the venv's bin folder that the benchmarks run."""

    @property
    def venv(self) -> Path:
        """Where this peer's environment lives."""
        return VENVS / self.name

    @property
    def executable(self) -> Path:
        """The program to run (python for a script, or the peer's console script)."""
        return self.venv / "bin" / self.entry

    @property
    def _stamp(self) -> Path:
        return self.venv / ".benchmark-requirement"

    def installed(self) -> bool:
        """True when the venv holds exactly the pinned requirement."""
        stamp = self._stamp
        return stamp.exists() and stamp.read_text().strip() == self.requirement and self.executable.exists()

    def install(self) -> str | None:
        """Create or update the venv; None on success, else the reason it failed."""
        if self.installed():
            return None
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(self.venv)],
            [str(self.venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
            [str(self.venv / "bin" / "python"), "-m", "pip", "install", "--quiet", self.requirement],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines()
                return f"installing {self.requirement} failed: {lines[-1] if lines else done.returncode}"
        self._stamp.write_text(self.requirement + "\n")
        return None


FASTMCP_PEER = Peer(FASTMCP, "fastmcp==4.2.3", "python")
"""FastMCP 4.x runs on mcp 2.x, like the guard."""
MCP_PROXY_PEER = Peer(MCP_PROXY, "mcp-proxy==0.13.0", "mcp-proxy")
"""mcp-proxy 0.13 requires mcp 1.x."""
PEERS = (FASTMCP_PEER, MCP_PROXY_PEER)

FASTMCP_SCRIPT = BENCH_DIR / "fastmcp_proxy.py"
