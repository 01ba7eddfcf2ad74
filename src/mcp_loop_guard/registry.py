"""Every setting of the guard, declared once, by group: the loop rules and the process settings.

The loop rules are declared in the core (:mod:`mcp_loop_guard.core.registry`, which Policy takes
its defaults and ranges from), the others in :mod:`mcp_loop_guard.process_settings`. Made from
:data:`SETTINGS`: ``Settings`` (variables, flags, the config file's top-level ``loopGuard``), what a
server's or a tool's ``loopGuard`` section may override (:mod:`mcp_loop_guard.overrides`),
:data:`RULE_SETTINGS`, the flags and ``--help`` (:mod:`mcp_loop_guard.cli_options`) and
``docs/settings.md`` (:mod:`mcp_loop_guard.settings_doc`). A new setting is one declaration,
one typed line in ``Settings`` if it is global, and a regenerated ``docs/settings.md``;
``tests/unit/test_settings_registry.py`` fails until they agree."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from mcp_loop_guard.core.registry import RULES
from mcp_loop_guard.core.setting import Scope, Setting
from mcp_loop_guard.process_settings import PROCESS
from mcp_loop_guard.setting_checks import split_list

__all__ = [
    "GROUPS",
    "REMOVED",
    "RULE_SETTINGS",
    "SETTING",
    "SETTINGS",
    "Setting",
    "check_value",
    "global_settings",
    "parse_value",
    "settable",
]

GROUPS: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        "upstreams": ("upstreams and the config file", "The servers to guard, and the file that may name them."),
        "rules": (
            "loop rules",
            "When repeated calls are warned, refused, or end the session. Most may also be set per server or per "
            "tool in a config file, and a few only there (pollable, ignoreArgs, orderedArgs, caseInsensitiveArgs).",
        ),
        "budgets": ("budgets", "Also per server in a config file, over the server's own tool names."),
        "events": ("event log and replay", "What the guard records for `mcp-loop-guard replay`."),
        "state": ("state store", "Where each agent's loop state lives, so a restarted guard goes on where it stopped."),
        "http": ("serving over HTTP", "One guard serving many agents over streamable HTTP or SSE."),
        "security": ("security", "Who may use an HTTP guard, and from where."),
        "logging": (
            "logging and tracing",
            "Logs go to stderr, never stdout. Tracing is set with the standard OTEL_* variables (the otel extra).",
        ),
        "limits": ("limits", "What one client or upstream can make the guard hold, and for how long."),
    }
)
"""Group key: (title, what its settings are about), in the order they are listed."""

_TIMING = (
    "a wall-clock wait no longer exempts a repeat (a slow model would never be stopped); patience is judged "
    "from the agent's own rhythm, waiting tools, growing backoffs and `pollable: true` on a tool"
)
REMOVED: Final[Mapping[str, str]] = MappingProxyType({"poll_seconds": _TIMING, "quiet_seconds": _TIMING})
"""Settings that no longer exist, and what took their place."""

SETTINGS: Final[tuple[Setting, ...]] = tuple(
    setting for group in GROUPS for setting in (*RULES, *PROCESS) if setting.group == group
)
"""Every setting, by group, in the order they are listed."""

SETTING: Final[Mapping[str, Setting]] = MappingProxyType({setting.name: setting for setting in SETTINGS})

RULE_SETTINGS: Final[frozenset[str]] = frozenset(
    setting.name for setting in SETTINGS if setting.rule and "global" in setting.scopes
)
"""Settings that change a verdict (what ``Settings.to_policy`` reads): replay takes them, a reload applies them."""


def global_settings() -> tuple[Setting, ...]:
    """The settings that are variables, flags and top-level config keys: the fields of ``Settings``."""
    return tuple(setting for setting in SETTINGS if "global" in setting.scopes)


def parse_value(setting: Setting, value: object) -> object:
    """A value as given (text from a variable or flag, a list or text from a file) in the form its type takes."""
    if setting.parse is not None:
        return setting.parse(value)
    if setting.is_list:
        return split_list(value)
    if setting.choices is not None and isinstance(value, str):
        return value.strip().lower()  # choices are case-insensitive: INFO and info are the same
    return value


def check_value(setting: Setting, value: Any) -> Any:
    """A typed value as kept, after the setting's own check (None, where allowed, is never checked)."""
    return value if setting.check is None or value is None else setting.check(value)


def settable(scope: Scope) -> tuple[Setting, ...]:
    """The settings that may be set in ``scope``, in the order they are listed."""
    return tuple(setting for setting in SETTINGS if scope in setting.scopes)
