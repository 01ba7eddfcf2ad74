"""Configuration: CLI flags over ``LOOP_GUARD_*`` variables over a config file over defaults.

Every setting is declared once in the registry (:mod:`mcp_loop_guard.registry`); ``Settings``
(:mod:`mcp_loop_guard.settings_model`) is its typed form. The core never sees ``Settings``,
only the frozen :class:`~mcp_loop_guard.core.Policy` it converts to, one for the whole session
and one per upstream server and tool with overrides.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from mcp_loop_guard.core.setting import ENV_PREFIX, Setting, camel, snake
from mcp_loop_guard.redaction import redact_url
from mcp_loop_guard.registry import REMOVED, RULE_SETTINGS, SETTING, global_settings
from mcp_loop_guard.setting_checks import parse_tokens, split_list
from mcp_loop_guard.setting_values import Issue
from mcp_loop_guard.settings_model import FILE_VALUES, Settings, SettingsInvalid

__all__ = [
    "ENV_PREFIX",
    "REMOVED",
    "RULE_SETTINGS",
    "FileSettings",
    "SettingField",
    "Settings",
    "SettingsError",
    "load_settings",
    "parse_tokens",
    "setting_fields",
    "split_list",
]

logger = logging.getLogger(__name__)

SettingField = Setting
"""One setting as the CLI and docs need it: name, variable, flag, type, default, accepted values."""


class SettingsError(Exception):
    """The configuration cannot be used; the message is one user-facing paragraph."""


class FileSettings(Mapping[str, Any]):
    """Values read from a config file, by snake_case setting name, remembering where each was written."""

    __slots__ = ("_keys", "_values", "file")

    def __init__(self, values: Mapping[str, Any], keys: Mapping[str, str] | None = None, file: str = "") -> None:
        """``keys`` maps a setting name to its key path in the file, e.g. ``loopGuard.warnThreshold``."""
        self._values = dict(values)
        self._keys = dict(keys or {})
        self.file = file
        """The file the values come from, as the user named it."""

    def __getitem__(self, name: str) -> Any:
        """The value of one setting."""
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        """Setting names in file order."""
        return iter(self._values)

    def __len__(self) -> int:
        """How many settings the file sets."""
        return len(self._values)

    def __repr__(self) -> str:
        """Names and values, with the tokens hidden."""
        shown = {name: "<hidden>" if _secret(name) else value for name, value in self._values.items()}
        return f"FileSettings({shown!r}, file={self.file!r})"

    def key(self, name: str) -> str:
        """The key path ``name`` was written under, e.g. ``loopGuard.warnThreshold``."""
        return self._keys.get(name, name)

    def where(self, name: str) -> str:
        """Where ``name`` was written, e.g. ``loopGuard.warnThreshold in /etc/mcp.json``."""
        return f"{self.key(name)} in {self.file}" if self.file else self.key(name)


def setting_fields() -> list[SettingField]:
    """The global settings (variables, flags, top-level config keys), in the order they are listed."""
    return list(global_settings())


def load_settings(file_settings: Mapping[str, Any] | None = None, /, **overrides: Any) -> Settings:
    """Build Settings from ``overrides`` (CLI flags; None means "not given"), the environment,
    then ``file_settings`` (the config file's ``loopGuard`` section), then the defaults.

    Raises:
        SettingsError: a value cannot be parsed or is out of range; every bad one is named
            with where it came from (flag, variable or file key).
    """
    given = {name: value for name, value in overrides.items() if value is not None}
    file_values = file_settings if file_settings is not None else FileSettings({})
    _warn_unknown_variables()
    token = FILE_VALUES.set(file_values)
    try:
        return Settings(**given)
    except SettingsInvalid as invalid:
        raise SettingsError(_explain(invalid.issues, given, file_values)) from None
    finally:
        FILE_VALUES.reset(token)


def _secret(name: str) -> bool:
    setting = SETTING.get(name)
    return setting is not None and setting.secret


def _warn_unknown_variables() -> None:
    """A ``LOOP_GUARD_*`` variable that is no setting is most likely a typo: say so, once per load."""
    fields = Settings.fields
    for variable in sorted(os.environ):
        name = variable[len(ENV_PREFIX) :].lower()
        if not variable.startswith(ENV_PREFIX) or name in fields:
            continue
        if name in REMOVED:
            logger.warning("%s is ignored: it was removed; %s", variable, REMOVED[name])
        else:
            logger.warning("%s is ignored: it is not a setting (see mcp-loop-guard --help)", variable)


def _explain(issues: list[Issue], given: Mapping[str, Any], file_values: Mapping[str, Any]) -> str:
    """One paragraph naming each bad setting, where it came from, its value and what it accepts."""
    fields = Settings.fields
    environment = {name.upper() for name in os.environ}
    problems: list[str] = []
    for issue in issues:
        name = str(issue.loc[0])
        if name not in fields:
            if snake(name) in REMOVED:
                problems.append(f"{name!r} was removed: {REMOVED[snake(name)]}")
            else:
                problems.append(f"{name!r} is not a setting (known: {', '.join(fields)})")
            continue
        setting = SETTING[name]
        value = "<hidden>" if setting.secret else repr(issue.input)
        if name == "state" and isinstance(issue.input, str):
            value = repr(redact_url(issue.input))  # a store URL may hold its password
        inner = "".join(f"[{part}]" if isinstance(part, int) else f".{camel(part)}" for part in issue.loc[1:])
        if name in given:
            origin = f"{setting.env}{inner}={value} (from {setting.flag})"
        elif setting.env in environment or name not in file_values:
            origin = f"{setting.env}{inner}={value}"
        elif isinstance(file_values, FileSettings) and file_values.file:
            origin = f"{file_values.key(name)}{inner}={value} in {file_values.file}"
        else:
            origin = f"loopGuard.{setting.key}{inner}={value} in the config file"
        problems.append(f"{origin} is not valid: {_detail(issue, inner)}expected {setting.accepted}")
    return (
        "invalid configuration: "
        + "; ".join(problems)
        + ". Fix these values (or unset them to use the defaults) and start again."
    )


def _detail(issue: Issue, inner: str) -> str:
    """The setting's own words on what is wrong; the reader's for a part of a list (which ``accepted`` won't name)."""
    if issue.type == "value_error":
        return f"{issue.ctx['error']}; "
    return f"{issue.msg.lower()}; " if inner else ""
