"""The package's shape: proxy/ depends only downward, nothing imports in a circle, no proxy module grows unread.

Read from the sources (module-level imports, ``TYPE_CHECKING`` blocks, imports made lazily
inside functions, and modules loaded later by name), so a new import that breaks the
layering fails here rather than in a reader's head, or at the first request that loads it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mcp_loop_guard

PACKAGE = Path(mcp_loop_guard.__file__).parent
ROOT = "mcp_loop_guard"
LAYERS = ("wire", "upstream", "relay", "downstream")
"""proxy/ by direction of data: each layer may import its own and the ones before it."""
ABOVE_PROXY = ("app", "cli", "wrap", "state_cli", "demo", "demo_server")
"""What starts the guard; nothing under proxy/ may import it."""
MOST_LINES = 350
"""About 300 lines, the size a newcomer reads in one sitting, with room for a class's last method."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = (ROOT, *path.relative_to(PACKAGE).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports, at module level or lazily inside a function.

    A ``from pkg import sub`` names ``pkg.sub``; a module named in a string (what
    ``importlib.import_module`` loads later) counts as imported too.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{alias.name}" for alias in node.names} & modules.keys()
            found |= subs or ({node.module} & modules.keys())
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(f"{ROOT}.proxy."):
            found |= {node.value} & modules.keys()
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "proxy" and parts[2] in LAYERS else None


def test_proxy_layers_import_only_downward() -> None:
    upward = []
    for module, imported in _graph().items():
        layer = _layer(module)
        if layer is None:
            continue
        allowed = LAYERS[: LAYERS.index(layer) + 1]
        upward += [f"{module} -> {name}" for name in imported if (other := _layer(name)) and other not in allowed]
    assert upward == []


def test_nothing_under_proxy_imports_what_starts_the_guard() -> None:
    above = {f"{ROOT}.{name}" for name in ABOVE_PROXY}
    offenders = [
        f"{module} -> {name}"
        for module, imported in _graph().items()
        if module.startswith(f"{ROOT}.proxy")
        for name in imported
        if name in above or any(name.startswith(f"{prefix}.") for prefix in above)
    ]
    assert offenders == []


def test_no_module_imports_itself_through_others() -> None:
    """No import circle between modules; a package's ``__init__`` re-exporting its own parts is not one."""
    graph = {
        module: {name for name in imported if not name.startswith(f"{module}.")}
        for module, imported in _graph().items()
    }
    circles = []
    for start in graph:
        seen: set[str] = set()
        stack = [(start, (start,))]
        while stack:
            module, path = stack.pop()
            for name in graph[module]:
                if name == start:
                    circles.append(" -> ".join((*path, name)))
                elif name not in seen:
                    seen.add(name)
                    stack.append((name, (*path, name)))
    assert circles == []


def test_proxy_modules_stay_readable_in_one_sitting() -> None:
    modules = _modules()
    long = {
        name: lines
        for name, path in modules.items()
        if name.startswith(f"{ROOT}.proxy")
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES
    }
    assert long == {}


def test_the_layout_checks_see_the_package() -> None:
    """The checks above read real imports: the stdio relay's known dependencies are found."""
    graph = _graph()
    assert f"{ROOT}.proxy.relay.pipe" in graph[f"{ROOT}.proxy.downstream.stdio"]
    assert any(_layer(name) == "wire" for name in graph[f"{ROOT}.proxy.relay.pipe"])
    assert len([name for name in graph if _layer(name)]) > 40
    # lazy imports count: the SDK path loaded at the first 2026-07-28 request, the router in front of several
    assert f"{ROOT}.proxy.downstream.http.sessionless" in graph[f"{ROOT}.proxy.downstream.http.translating"]
    assert f"{ROOT}.proxy.upstream.router" in graph[f"{ROOT}.proxy.upstream.channels"]


def test_the_front_doors_texts_come_from_the_one_module_of_texts() -> None:
    """Every HTTP refusal (``reply(send, status, text)``) takes its text from ``core/replies.py``, none inline."""
    inline = []
    for name, path in _modules().items():
        if not name.startswith(f"{ROOT}.proxy"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "reply" and len(node.args) >= 3:
                text = node.args[2]
                if isinstance(text, ast.Constant | ast.JoinedStr):
                    inline.append(f"{name}:{node.lineno}")
    assert inline == []
