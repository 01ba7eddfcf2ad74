"""Which agent a stdio guard serves: the client process that started it, and the server it runs.

MCP clients restart a server they lost (Claude Code, Pi do it at the next call) and some
frameworks start one per call; the agent is the client, not the connection. So the key is
derived from the client process (its PID and start time, so a reused PID is another agent),
the upstream's command line and its working directory. Launchers between the client and the
guard (``npx``, ``uvx``, shells...) are looked through: they are new processes every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp_loop_guard.store.base import process_start_time

__all__ = ["ClientProcess", "client_process", "stdio_agent_base"]

LAUNCHERS = frozenset(
    {
        "sh", "bash", "dash", "zsh", "fish", "ksh", "env", "timeout", "nohup", "setsid", "stdbuf", "nice",
        "uv", "uvx", "pipx", "npx", "npm", "pnpm", "pnpx", "bunx", "yarn", "corepack",
        "tini", "catatonit", "dumb-init", "cmd.exe", "powershell", "pwsh",
    }
)  # fmt: skip
"""Programs that only start another one: the agent is whoever started them."""
_NODE_LAUNCHERS = re.compile(r"(npx|npm|pnpm|yarn|corepack)(-cli)?(\.c?js)?$")
_MAX_HOPS = 8


@dataclass(frozen=True, slots=True)
class ClientProcess:
    """The process taken to be the agent."""

    pid: int
    started: float
    name: str


def _proc(pid: int) -> tuple[int, str, list[str]] | None:
    """(parent pid, command name, argv) from /proc, or None where /proc cannot tell."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]), name, [arg.decode(errors="replace") for arg in argv if arg]


def _is_launcher(name: str, argv: list[str]) -> bool:
    program = os.path.basename(argv[0]) if argv else name
    if name in LAUNCHERS or program in LAUNCHERS:
        return True
    if name == "node" or program.startswith("node"):
        script = next((arg for arg in argv[1:] if not arg.startswith("-")), "")
        return bool(_NODE_LAUNCHERS.search(os.path.basename(script)))
    return False


def client_process() -> ClientProcess:
    """The guard's client: its parent, or the first ancestor that is not a launcher."""
    pid = os.getppid()
    info = _proc(pid)
    if info is None:
        return ClientProcess(pid, _started_elsewhere(pid), "")
    first = ClientProcess(pid, process_start_time(pid) or 0.0, info[1])
    for _ in range(_MAX_HOPS):
        parent, name, argv = info
        if not _is_launcher(name, argv):
            return ClientProcess(pid, process_start_time(pid) or 0.0, name)
        if parent <= 1:
            break
        pid = parent
        next_info = _proc(pid)
        if next_info is None:
            break
        info = next_info
    return first


def _started_elsewhere(pid: int) -> float:
    """A process's start time without /proc (macOS, BSD): from ps, as a number, or 0 when unknown."""
    try:
        out = subprocess.run(
            ["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True, timeout=2, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0.0
    digest = hashlib.sha256(out.strip().encode()).digest()
    return float(int.from_bytes(digest[:6], "big"))


def stdio_agent_base(server: str, command: Sequence[str], cwd: str | None, override: str | None) -> str:
    """The key of this guard's agent, before a slot suffix: readable prefix, private digest.

    ``override`` (``LOOP_GUARD_AGENT_KEY``) replaces the derived part, e.g. one key per project.
    """
    if override:
        return f"agent:{override}"
    client = client_process()
    identity = [socket.gethostname(), client.pid, client.started, list(command), os.path.abspath(cwd or os.getcwd())]
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:20]
    return f"stdio:{server}:{digest}"
