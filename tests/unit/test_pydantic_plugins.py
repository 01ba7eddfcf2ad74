"""The guard's process runs no pydantic plugin, and does not load what looking for one costs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_loop_guard import pydantic_plugins

_GUARD = """
import json, sys
from mcp_loop_guard.cli import main

code = main(["--", sys.executable, "-c", "import sys; sys.stdin.read()"])
loaded = ["pydantic.main" in sys.modules, "importlib.metadata" in sys.modules, "probe_plugin" in sys.modules]
print(json.dumps([code, *loaded]))
"""
_PLAIN = """
import json, sys
from pydantic import BaseModel

class Model(BaseModel):
    x: int

print(json.dumps([Model(x=1).x, "importlib.metadata" in sys.modules, "probe_plugin" in sys.modules]))
"""


def _installed_plugin(where: Path) -> dict[str, str]:
    """An environment in which a pydantic plugin is installed, as a package beside the guard would install one."""
    plugin = "class Plugin:\n    def new_schema_validator(self, *a, **k):\n        return None, None, None\n"
    (where / "probe_plugin.py").write_text(plugin + "plugin = Plugin()\n")
    info = where / "probe_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nprobe = probe_plugin:plugin\n")
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("LOOP_GUARD_", "PYDANTIC_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(where), env.get("PYTHONPATH")]))
    return env


def _run(script: str, env: dict[str, str]) -> list[object]:
    command = [sys.executable, "-c", script]
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def test_a_guard_builds_its_models_without_looking_for_plugins(tmp_path: Path) -> None:
    """A plugin installed beside the guard is loaded by pydantic elsewhere, never by the guard, and the guard does
    not load importlib.metadata to look for one."""
    env = _installed_plugin(tmp_path)
    assert _run(_PLAIN, env) == [1, True, True]
    env["LOOP_GUARD_BUDGETS"] = "search_*=20/3600"  # read by a pydantic model: a guard of one command builds none
    assert _run(_GUARD, env) == [0, True, False, False]


def test_the_empty_loader_answers_pydantic_and_leaves_the_import_system_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``get_plugins`` finds none; another name a later pydantic may ask comes from its own loader; ``__path__``
    (what ``from ._loader import ...`` asks first) does not load that."""
    monkeypatch.delitem(sys.modules, pydantic_plugins.LOADER, raising=False)
    pydantic_plugins.keep_out()
    loader = sys.modules[pydantic_plugins.LOADER]
    assert loader.get_plugins() == ()
    assert not hasattr(loader, "__path__")
    assert loader.PYDANTIC_ENTRY_POINT_GROUP == "pydantic"
    with pytest.raises(AttributeError):
        _ = loader.no_such_name


def test_a_loader_pydantic_already_loaded_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """Too late to keep out once loaded: the real loader is left as it is rather than swapped under pydantic."""
    import pydantic.plugin._loader as real

    monkeypatch.setitem(sys.modules, pydantic_plugins.LOADER, real)
    pydantic_plugins.keep_out()
    assert sys.modules[pydantic_plugins.LOADER] is real
