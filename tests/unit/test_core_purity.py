"""The core is pure: no MCP, no anyio, no pydantic, no logging, no clock."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import mcp_loop_guard.core

BANNED = ("mcp", "anyio", "pydantic", "pydantic_settings", "logging", "time")


def test_importing_the_core_loads_no_framework() -> None:
    """A fresh interpreter importing mcp_loop_guard.core has no mcp, anyio or pydantic module."""
    probe = (
        "import json, sys, mcp_loop_guard.core; print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True).stdout))
    assert not loaded & {"mcp", "anyio", "pydantic", "pydantic_core", "pydantic_settings"}


def test_core_sources_import_nothing_impure() -> None:
    """No module under core/ imports mcp, anyio, pydantic, logging or time, even lazily."""
    core = Path(mcp_loop_guard.core.__file__).parent
    offenders = []
    for path in sorted(core.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.name}: {name}" for name in names if name.split(".")[0] in BANNED]
    assert offenders == []
