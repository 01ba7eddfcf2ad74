"""The guard's process runs no pydantic plugins.

The first pydantic model built asks pydantic's plugin loader for plugins, and that loader
imports ``importlib.metadata`` (with ``email`` and ``zipfile``) to read the entry points of every
distribution installed beside the guard. A guard has no use for such plugins, and should not
run code a neighbouring package registered for them inside a proxy meant to stand between a
model and its tools; the loader alone is 1.4 MB. So the guard's entry point puts a loader that
finds none in its place before any model is built (a guard of one command builds none; one
reading a config file, budgets or overrides does, and so does the SDK path).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

LOADER = "pydantic.plugin._loader"
"""Pydantic's private module that ``pydantic.plugin._schema_validator`` asks for plugins."""


def get_plugins() -> tuple[()]:
    """No plugins, as pydantic itself answers when ``PYDANTIC_DISABLE_PLUGINS=__all__``."""
    return ()


def _real(name: str) -> Any:
    """Anything else a later pydantic asks of its loader comes from the real one, loaded only then.

    Not the import system's questions (``__path__``: is the loader a package?), which must not load it.
    """
    if name.startswith("__"):
        raise AttributeError(name)
    import pydantic.plugin  # noqa: PLC0415 - only for a name this module does not answer

    spec = importlib.machinery.PathFinder.find_spec(LOADER, list(pydantic.plugin.__path__))
    if spec is None or spec.loader is None:
        raise AttributeError(name)
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    return getattr(real, name)


def keep_out() -> None:
    """Put the empty loader in place, unless pydantic has loaded its own already (then it is too late to matter)."""
    if LOADER in sys.modules:
        return
    loader = ModuleType(LOADER, __doc__)
    loader.get_plugins = get_plugins  # type: ignore[attr-defined]
    loader.__getattr__ = _real  # type: ignore[method-assign]
    sys.modules[LOADER] = loader
