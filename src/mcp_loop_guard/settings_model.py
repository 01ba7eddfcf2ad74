"""``Settings``: every global setting as a typed attribute, read from flags, variables and the config file.

Each field is one typed line; its default, range and description come from the registry
(:mod:`mcp_loop_guard.registry`), and so do how its value is read and checked. The names and
types are written here once more so that mypy checks every ``settings.x``;
``tests/unit/test_settings_registry.py`` fails when they and the registry disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from mcp_loop_guard.budgets import BudgetSpec, budgets_of
from mcp_loop_guard.core import Mode, Policy, ScrubRules
from mcp_loop_guard.core.setting import ENV_PREFIX
from mcp_loop_guard.registry import RULE_SETTINGS, SETTING, check_value, parse_value
from mcp_loop_guard.setting_checks import parse_tokens

__all__ = ["FILE_VALUES", "Settings", "declared"]

FILE_VALUES: ContextVar[Mapping[str, Any]] = ContextVar("FILE_VALUES", default=MappingProxyType({}))
"""Values of the config file's ``loopGuard`` section while ``load_settings`` builds Settings."""

_COMPOSED = frozenset({"scrub", "scrub_keys", "mode", "budgets"})
"""Rule settings Policy holds in another form (:meth:`Settings.to_policy` builds it)."""
_AS_THEY_ARE = tuple(sorted(RULE_SETTINGS - _COMPOSED))
"""Rule settings Policy holds as they are, under the same name."""


def declared(name: str) -> Any:
    """The field of setting ``name``: its registry default, range and description."""
    setting = SETTING[name]
    return Field(
        default=setting.default,
        ge=setting.ge,
        gt=setting.gt,
        le=setting.le,
        description=setting.description,
        json_schema_extra={"setting": name},
    )


class Settings(BaseSettings):
    """Every global setting of the guard (see docs/settings.md), typed."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, hide_input_in_errors=True, enable_decoding=False
    )

    watch_config: bool = declared("watch_config")
    # loop rules
    enabled: bool = declared("enabled")
    warn_threshold: int = declared("warn_threshold")
    block_threshold: int = declared("block_threshold")
    abort_threshold: int = declared("abort_threshold")
    ignore_tools: tuple[str, ...] = declared("ignore_tools")
    ignore_errors: bool = declared("ignore_errors")
    use_terminate: bool = declared("use_terminate")
    reset_after_seconds: float = declared("reset_after_seconds")
    cycle_max_period: int = declared("cycle_max_period")
    recurring_warn_threshold: int | None = declared("recurring_warn_threshold")
    recurring_block_threshold: int | None = declared("recurring_block_threshold")
    recurring_window: int = declared("recurring_window")
    same_error_warn_threshold: int = declared("same_error_warn_threshold")
    same_error_block_threshold: int = declared("same_error_block_threshold")
    same_result_warn_threshold: int = declared("same_result_warn_threshold")
    same_result_block_threshold: int = declared("same_result_block_threshold")
    burst_detection: bool = declared("burst_detection")
    side_effect_warn_threshold: int = declared("side_effect_warn_threshold")
    side_effect_block_threshold: int = declared("side_effect_block_threshold")
    trust_annotations: bool = declared("trust_annotations")
    scrub: tuple[str, ...] = declared("scrub")
    scrub_keys: tuple[str, ...] = declared("scrub_keys")
    mode: Literal["enforce", "warn", "shadow"] = declared("mode")
    budgets: tuple[BudgetSpec, ...] = declared("budgets")
    # event log, state store
    event_log: str | None = declared("event_log")
    state: str = declared("state")
    state_timeout_seconds: float = declared("state_timeout_seconds")
    state_fail: Literal["open", "closed"] = declared("state_fail")
    agent_key: str | None = declared("agent_key")
    # serving over HTTP, security
    transport: Literal["stdio", "http", "sse"] = declared("transport")
    host: str = declared("host")
    port: int = declared("port")
    stateless: bool = declared("stateless")
    child_per_session: bool = declared("child_per_session")
    session_key_header: str = declared("session_key_header")
    sse_ping_seconds: float = declared("sse_ping_seconds")
    auth_token: SecretStr | None = declared("auth_token")
    auth_tokens: SecretStr | None = declared("auth_tokens")
    admin_token: SecretStr | None = declared("admin_token")
    trust_key_header: bool = declared("trust_key_header")
    allowed_hosts: tuple[str, ...] = declared("allowed_hosts")
    allowed_origins: tuple[str, ...] = declared("allowed_origins")
    # logging
    log_level: Literal["debug", "info", "warning", "error"] = declared("log_level")
    log_format: Literal["text", "json"] = declared("log_format")
    log_contents: bool = declared("log_contents")
    # limits
    call_timeout_seconds: float | None = declared("call_timeout_seconds")
    max_message_bytes: int = declared("max_message_bytes")
    max_request_bytes: int = declared("max_request_bytes")
    max_sessions: int = declared("max_sessions")
    max_keys: int = declared("max_keys")
    max_connections: int = declared("max_connections")
    header_timeout_seconds: float = declared("header_timeout_seconds")
    body_timeout_seconds: float = declared("body_timeout_seconds")
    max_pending_requests: int = declared("max_pending_requests")
    health_interval_seconds: float = declared("health_interval_seconds")
    session_idle_seconds: float = declared("session_idle_seconds")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword values (CLI flags) first, then the environment, then the config file."""
        return init_settings, env_settings, InitSettingsSource(settings_cls, dict(FILE_VALUES.get()))

    @field_validator("*", mode="before")
    @classmethod
    def _parse(cls, value: object, info: ValidationInfo) -> object:
        """Text as each setting reads it: lists split on commas, choices in any case, budgets' short form."""
        return parse_value(SETTING[str(info.field_name)], value)

    @field_validator("*")
    @classmethod
    def _check(cls, value: Any, info: ValidationInfo) -> Any:
        """Each setting's own check (scrub presets, JSON paths, hosts, tokens...)."""
        return check_value(SETTING[str(info.field_name)], value)

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
