"""``Settings``: every global setting as a typed attribute, read from flags, variables and the config file.

Each attribute is one typed line; its default, range, parsing and check come from the registry
(:mod:`mcp_loop_guard.registry`), which also reads each value into its type (:mod:`.setting_values`).
The names and types are written here once more so that mypy checks every ``settings.x``;
``tests/unit/test_settings_registry.py`` fails when they and the registry disagree. A plain
class, not a pydantic model: a guard in front of one command then loads no pydantic at all
(14 MB and a quarter of a second of CPU at every start).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal

from mcp_loop_guard.budgets import BudgetSpec, budgets_of
from mcp_loop_guard.core import Mode, Policy, ScrubRules
from mcp_loop_guard.core.setting import ENV_PREFIX, Setting
from mcp_loop_guard.registry import RULE_SETTINGS, global_settings
from mcp_loop_guard.setting_checks import Secret, parse_tokens
from mcp_loop_guard.setting_values import Issue, read_setting

__all__ = ["FILE_VALUES", "Settings", "SettingsInvalid"]

FILE_VALUES: ContextVar[Mapping[str, Any]] = ContextVar("FILE_VALUES", default=MappingProxyType({}))
"""Values of the config file's ``loopGuard`` section while ``load_settings`` builds Settings."""

_COMPOSED = frozenset({"scrub", "scrub_keys", "mode", "budgets"})
"""Rule settings Policy holds in another form (:meth:`Settings.to_policy` builds it)."""
_AS_THEY_ARE = tuple(sorted(RULE_SETTINGS - _COMPOSED))
"""Rule settings Policy holds as they are, under the same name."""
_FIELDS: Final[Mapping[str, Setting]] = MappingProxyType({setting.name: setting for setting in global_settings()})


class SettingsInvalid(ValueError):  # noqa: N818 - the settings are what is invalid
    """Values that cannot be settings; ``issues`` names each, where it is, what was given and why."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__(f"{len(issues)} invalid setting(s)")
        self.issues = issues


class Settings:
    """Every global setting of the guard (see docs/settings.md), typed and frozen.

    ``Settings(**values)``: values given as flags are, over ``LOOP_GUARD_*`` variables, over
    :data:`FILE_VALUES`, over the registry's defaults.

    Raises:
        SettingsInvalid: a value cannot be read or is out of range, or a name is no setting.
    """

    fields: ClassVar[Mapping[str, Setting]] = _FIELDS
    """The global settings by name, in the order they are listed."""

    watch_config: bool
    # loop rules
    enabled: bool
    warn_threshold: int
    block_threshold: int
    abort_threshold: int
    ignore_tools: tuple[str, ...]
    ignore_errors: bool
    use_terminate: bool
    reset_after_seconds: float
    cycle_max_period: int
    recurring_warn_threshold: int | None
    recurring_block_threshold: int | None
    recurring_window: int
    same_error_warn_threshold: int
    same_error_block_threshold: int
    same_result_warn_threshold: int
    same_result_block_threshold: int
    burst_detection: bool
    side_effect_warn_threshold: int
    side_effect_block_threshold: int
    trust_annotations: bool
    scrub: tuple[str, ...]
    scrub_keys: tuple[str, ...]
    mode: Literal["enforce", "warn", "shadow"]
    budgets: tuple[BudgetSpec, ...]
    # event log, state store
    event_log: str | None
    state: str
    state_timeout_seconds: float
    state_fail: Literal["open", "closed"]
    agent_key: str | None
    # serving over HTTP, security
    transport: Literal["stdio", "http", "sse"]
    host: str
    port: int
    stateless: bool
    child_per_session: bool
    session_key_header: str
    sse_ping_seconds: float
    auth_token: Secret | None
    auth_tokens: Secret | None
    admin_token: Secret | None
    trust_key_header: bool
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    # logging
    log_level: Literal["debug", "info", "warning", "error"]
    log_format: Literal["text", "json"]
    log_contents: bool
    # limits
    call_timeout_seconds: float | None
    max_message_bytes: int
    max_request_bytes: int
    max_sessions: int
    max_keys: int
    max_connections: int
    header_timeout_seconds: float
    body_timeout_seconds: float
    max_pending_requests: int
    health_interval_seconds: float
    session_idle_seconds: float

    def __init__(self, **given: Any) -> None:
        """Each setting from the first place that gives it: ``given``, the environment, the file, the default."""
        environment = _environment()
        file_values = FILE_VALUES.get()
        unknown = {name: value for name, value in {**file_values, **given}.items() if name not in _FIELDS}
        issues = [Issue((name,), value, "extra_forbidden", "not a setting") for name, value in unknown.items()]
        for name, setting in _FIELDS.items():
            if name in given:
                raw = given[name]
            elif setting.env in environment:
                raw = environment[setting.env]
            elif name in file_values:
                raw = file_values[name]
            else:
                object.__setattr__(self, name, setting.default)
                continue
            value, problems = read_setting(setting, raw)
            issues += problems
            object.__setattr__(self, name, value)
        if issues:
            raise SettingsInvalid(issues)

    def __setattr__(self, name: str, value: object) -> None:
        """Settings are frozen: a reload builds new ones."""
        raise AttributeError(f"Settings are frozen: {name} cannot be set")

    def __delattr__(self, name: str) -> None:
        """Settings are frozen."""
        raise AttributeError(f"Settings are frozen: {name} cannot be deleted")

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        """(name, value) of each setting, in the order they are listed."""
        return ((name, getattr(self, name)) for name in _FIELDS)

    def __eq__(self, other: object) -> bool:
        """Equal when every setting is."""
        return isinstance(other, Settings) and dict(self) == dict(other)

    def __hash__(self) -> int:
        """Hashable, as frozen values are."""
        return hash(tuple(value for _, value in self))

    def __repr__(self) -> str:
        """Names and values; tokens show as stars."""
        return "Settings(" + ", ".join(f"{name}={value!r}" for name, value in self) + ")"

    def to_policy(self) -> Policy:
        """The frozen rules the detector runs on: every setting of :data:`RULE_SETTINGS`, and no other."""
        return Policy(
            **{name: getattr(self, name) for name in _AS_THEY_ARE},
            scrub=ScrubRules(presets=self.scrub, keys=self.scrub_keys),
            mode=Mode(self.mode),
            budgets=budgets_of(self.budgets),
        )

    def tokens(self) -> dict[str, str]:
        """Bearer tokens by name: the named ones, plus the single token as "default"."""
        named = parse_tokens(self.auth_tokens.get_secret_value()) if self.auth_tokens is not None else {}
        if self.auth_token is not None:
            named.setdefault("default", self.auth_token.get_secret_value())
        return named


def _environment() -> dict[str, str]:
    """The ``LOOP_GUARD_*`` variables by upper-case name: their names are read in any case."""
    return {name.upper(): value for name, value in os.environ.items() if name.upper().startswith(ENV_PREFIX)}
