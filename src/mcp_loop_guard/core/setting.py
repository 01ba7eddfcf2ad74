"""One setting as declared: its name, type, default, range, where it may be set and what it means.

Plain frozen values, so that the core can declare its loop rules (:mod:`.registry`) and
Policy take its defaults and ranges from them; the process settings are declared the same
way outside the core (:mod:`mcp_loop_guard.process_settings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Final, Literal, get_args, get_origin

__all__ = ["ENV_PREFIX", "EVERYWHERE", "GLOBAL", "SERVER", "TOOL", "Scope", "Setting", "camel", "snake"]

Scope = Literal["global", "server", "tool"]
"""Where a setting may be set: ``global`` (a flag, a ``LOOP_GUARD_*`` variable, the config file's
top-level ``loopGuard``), ``server`` (a server's ``loopGuard``), ``tool`` (a ``tools`` section)."""
GLOBAL: Final[frozenset[Scope]] = frozenset({"global"})
SERVER: Final[frozenset[Scope]] = frozenset({"global", "server"})
TOOL: Final[frozenset[Scope]] = frozenset({"server", "tool"})
"""Per tool (and per server, for all of its tools), never globally."""
EVERYWHERE: Final[frozenset[Scope]] = frozenset({"global", "server", "tool"})

ENV_PREFIX: Final = "LOOP_GUARD_"
_MIB: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: what it is, where it may be set, and what it means."""

    name: str
    """snake_case; the variable, flag and config key are made from it."""
    type: Any
    """The value's type: ``bool``, ``int``, ``float``, ``str``, ``tuple[str, ...]``, ``X | None``, a ``Literal``."""
    default: Any
    description: str
    """One line: ``--help``, the first sentence in docs/settings.md."""
    group: str
    """The group it is listed under (keys of :data:`mcp_loop_guard.registry.GROUPS`)."""
    scopes: frozenset[Scope] = GLOBAL
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    values: str = ""
    """The accepted values in words, where the type and bounds do not say it."""
    unset: str = ""
    """What leaving it unset means, for a setting whose default is None."""
    more: str = ""
    """What docs/settings.md adds to the description."""
    rule: bool = False
    """It changes a verdict: ``replay`` takes it, a config reload applies it at once."""
    secret: bool = False
    """Its value is never shown, in a repr or an error."""
    parse: Callable[[object], object] | None = None
    """Turns text (a variable, a flag, a comma-separated key) into the typed form; lists split by default."""
    check: Callable[[Any], Any] | None = None
    """Checks a typed value beyond its type and bounds; returns the value kept, raises ValueError."""

    @property
    def key(self) -> str:
        """The config file key, camelCase: ``warnThreshold`` (snake_case is accepted too)."""
        return camel(self.name)

    @property
    def env(self) -> str:
        """The environment variable: ``LOOP_GUARD_WARN_THRESHOLD``; only for global settings."""
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        """The command-line flag: ``--warn-threshold``; only for global settings."""
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The values of a ``Literal`` setting, else None."""
        return get_args(self.type) if get_origin(self.type) is Literal else None

    @property
    def is_list(self) -> bool:
        """Given as a list, or as comma-separated text."""
        return get_origin(self.type) is tuple

    @property
    def accepted(self) -> str:
        """The accepted values in words: "an integer >= 1", "one of text, json"."""
        if self.values:
            return self.values
        kind = _bare(self.type)
        if kind is bool:
            lax = " (a variable or flag: also 1/0, yes/no, on/off)" if "global" in self.scopes else ""
            return "true or false" + lax
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if kind is str:
            return "a non-empty text" + (" (unset it for none)" if kind is not self.type else "")
        name = "an integer" if kind is int else "a number"
        if self.ge is not None and self.le is not None:
            words = f"{name} from {self.ge:g} to {self.le:g}"
        else:
            bounds = ((">=", self.ge), (">", self.gt), ("<=", self.le))
            words = " ".join([name, *(f"{sign} {bound:g}" for sign, bound in bounds if bound is not None)])
        return words

    @property
    def shown_default(self) -> str:
        """The default as a user would write it: ``true``, ``3``, ``0.25``, ``empty``, or what unset means."""
        default = self.default
        if default is None:
            return self.unset or "none"
        if isinstance(default, bool):
            return str(default).lower()
        if isinstance(default, tuple):
            return ",".join(map(str, default)) or "empty"
        if isinstance(default, float):
            return f"{default:g}"
        if isinstance(default, int) and self.name.endswith("_bytes") and default % _MIB == 0:
            return f"{default} ({default // _MIB} MiB)"
        return str(default)

    def problem(self, value: object) -> str | None:
        """Why ``value`` is out of this setting's bounds, or None (None itself is fine where the type allows it)."""
        if value is None or not isinstance(value, int | float) or isinstance(value, bool):
            return None
        if (
            (self.ge is not None and value < self.ge)
            or (self.gt is not None and not value > self.gt)
            or (self.le is not None and value > self.le)
        ):
            return f"{self.name} must be {self.accepted}, got {value!r}"
        return None


def _bare(kind: Any) -> Any:
    """``int`` for ``int | None``; any other type as it is."""
    if isinstance(kind, UnionType):
        others = [arg for arg in get_args(kind) if arg is not NoneType]
        return others[0] if len(others) == 1 else kind
    return kind


def camel(name: str) -> str:
    """``warn_threshold`` as ``warnThreshold``."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def snake(key: str) -> str:
    """``warnThreshold`` as ``warn_threshold``; a snake_case key as it is."""
    return "".join(f"_{char.lower()}" if char.isupper() else char for char in key)
