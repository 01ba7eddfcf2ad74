"""Configuration: ``LOOP_GUARD_*`` environment variables, overridden by CLI flags.

``Settings`` is a plain pydantic model, so a config file can fill it later too; the core
never sees it, only the frozen :class:`~mcp_loop_guard.core.Policy` it converts to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mcp_loop_guard.core import Policy

__all__ = ["SettingField", "Settings", "SettingsError", "load_settings", "setting_fields"]

ENV_PREFIX = "LOOP_GUARD_"

LogLevel = Literal["debug", "info", "warning", "error"]


class Settings(BaseSettings):
    """Every knob of the guard, with the reference design's names and defaults."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Turn loop detection on or off.")
    warn_threshold: int = Field(
        default=3,
        ge=1,
        description="Identical calls in a row (same tool, arguments and result) that earn a warning.",
    )
    block_threshold: int = Field(
        default=5,
        ge=1,
        description="The identical call that would reach this count is refused; must exceed warn.",
    )
    abort_threshold: int = Field(
        default=3, ge=1, description="Refusals within one request window after which the session is closed."
    )
    ignore_tools: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated tool names or shell-style patterns (github__*) the guard never counts.",
    )
    ignore_errors: bool = Field(
        default=False, description="Leave results with isError: true out of the count (error retries are free)."
    )
    use_terminate: bool = Field(
        default=False, description="Close the session at the first refusal instead of after several."
    )
    reset_after_seconds: float = Field(
        default=120.0,
        gt=0,
        description="Idle seconds (nothing in flight or arriving) that end a request window.",
    )
    log_level: LogLevel = Field(default="info", description="Least severe log level written to stderr.")

    @field_validator("ignore_tools", mode="before")
    @classmethod
    def _split_tool_list(cls, value: object) -> object:
        """Accept "a, b,c" as well as a list; trim names and drop empty ones."""
        items: Iterable[object]
        if isinstance(value, str):
            items = value.split(",")
        elif isinstance(value, list | tuple):
            items = value
        else:
            return value
        return tuple(text for item in items if (text := str(item).strip()))

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_log_level(cls, value: object) -> object:
        """Log levels are case-insensitive: INFO and info are the same."""
        return value.strip().lower() if isinstance(value, str) else value

    def to_policy(self) -> Policy:
        """The frozen rules the detector runs on."""
        return Policy(
            enabled=self.enabled,
            warn_threshold=self.warn_threshold,
            block_threshold=self.block_threshold,
            abort_threshold=self.abort_threshold,
            ignore_tools=self.ignore_tools,
            ignore_errors=self.ignore_errors,
            use_terminate=self.use_terminate,
            reset_after_seconds=self.reset_after_seconds,
        )


class SettingsError(Exception):
    """The configuration cannot be used; the message is one user-facing paragraph."""


@dataclass(frozen=True, slots=True)
class SettingField:
    """One setting as the CLI and docs need it."""

    name: str
    env: str
    """Environment variable, e.g. ``LOOP_GUARD_WARN_THRESHOLD``."""
    flag: str
    """Command-line flag, e.g. ``--warn-threshold``."""
    type: Any
    """Annotation: ``bool``, ``int``, ``float``, ``tuple[str, ...]`` or a ``Literal``."""
    default: Any
    description: str
    accepted: str
    """Accepted values in words, e.g. "an integer >= 1"."""
    choices: tuple[str, ...] | None = None


def setting_fields() -> list[SettingField]:
    """All settings in declaration order."""
    return [_setting_field(name, info) for name, info in Settings.model_fields.items()]


def load_settings(**overrides: Any) -> Settings:
    """Read the environment, then apply ``overrides`` (CLI flags; None means "not given").

    Raises:
        SettingsError: a value cannot be parsed or is out of range; every bad one is named.
    """
    given = {name: value for name, value in overrides.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as error:
        raise SettingsError(_explain(error, given)) from None


def _setting_field(name: str, info: FieldInfo) -> SettingField:
    """Describe one model field."""
    choices = get_args(info.annotation) if get_origin(info.annotation) is Literal else None
    return SettingField(
        name=name,
        env=ENV_PREFIX + name.upper(),
        flag="--" + name.replace("_", "-"),
        type=info.annotation,
        default=info.default,
        description=info.description or "",
        accepted=_accepted(info),
        choices=choices,
    )


def _accepted(info: FieldInfo) -> str:
    """The values a field takes, in words."""
    annotation = info.annotation
    bound = ""
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Ge):
            bound = f" >= {rule.ge}"
        elif isinstance(rule, annotated_types.Gt):
            bound = f" > {rule.gt}"
    if annotation is bool:
        return "true or false (also 1/0, yes/no, on/off)"
    if annotation is int:
        return "an integer" + bound
    if annotation is float:
        return "a number" + bound
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(choice) for choice in get_args(annotation))
    return "a comma-separated list of tool names or shell-style patterns"


def _explain(error: ValidationError, given: dict[str, Any]) -> str:
    """One paragraph naming each bad setting, its value and what it accepts."""
    fields = Settings.model_fields
    problems: list[str] = []
    for issue in error.errors(include_url=False):
        name = str(issue["loc"][0]) if issue["loc"] else ""
        if name not in fields:
            problems.append(f"{name!r} is not a setting (known: {', '.join(fields)})")
            continue
        source = f" (from --{name.replace('_', '-')})" if name in given else ""
        problems.append(
            f"{ENV_PREFIX}{name.upper()}={issue['input']!r}{source} is not valid: expected {_accepted(fields[name])}"
        )
    return (
        "invalid configuration: "
        + "; ".join(problems)
        + ". Fix these values (or unset them to use the defaults) and start again."
    )
