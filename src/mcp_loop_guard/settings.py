"""Configuration: CLI flags over ``LOOP_GUARD_*`` variables over a config file over defaults.

The core never sees ``Settings``, only the frozen :class:`~mcp_loop_guard.core.Policy` it
converts to, one for the whole session and one per upstream server with overrides.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from mcp_loop_guard.core import Policy

__all__ = [
    "FileSettings",
    "PolicySpec",
    "SettingField",
    "Settings",
    "SettingsError",
    "load_settings",
    "setting_fields",
]

ENV_PREFIX = "LOOP_GUARD_"

LogLevel = Literal["debug", "info", "warning", "error"]

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:([0-9]{1,5}|\*))?"
_ALLOWED_HOST = re.compile(rf"^{_HOST}$")
_ALLOWED_ORIGIN = re.compile(rf"^[A-Za-z][A-Za-z0-9+.-]*://{_HOST}$")
_PER_SERVER = "per-server settings: enabled, warnThreshold, blockThreshold, ignoreTools, ignoreErrors"
_TOKEN = re.compile(r"^[\x21-\x7e]+$")

_FILE_VALUES: ContextVar[Mapping[str, Any]] = ContextVar("_FILE_VALUES", default=MappingProxyType({}))
"""Values of the config file's ``loopGuard`` section while ``load_settings`` builds Settings."""


def _split(value: object) -> object:
    """A list setting from "a, b,c" or a list: entries trimmed, empty ones dropped."""
    items: Iterable[object]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        return value
    return tuple(text for item in items if (text := str(item).strip()))


class Settings(BaseSettings):
    """Every knob of the guard, with the reference design's names and defaults."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True, hide_input_in_errors=True)

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
        json_schema_extra={"accepted": "a comma-separated list of tool names or shell-style patterns"},
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
    transport: Literal["stdio", "http", "sse"] = Field(
        default="stdio", description="How clients reach the guard: stdio, streamable HTTP (/mcp) or SSE (/sse)."
    )
    host: str = Field(
        default="127.0.0.1",
        description="Address the HTTP server listens on.",
        json_schema_extra={"accepted": "a host name or IP address"},
    )
    port: int = Field(default=8080, ge=1, le=65535, description="Port the HTTP server listens on.")
    stateless: bool = Field(default=False, description="Serve streamable HTTP without sessions (no Mcp-Session-Id).")
    auth_token: SecretStr | None = Field(
        default=None,
        description="Bearer token every HTTP request must carry (Authorization: Bearer ...); prefer the variable.",
        json_schema_extra={"accepted": "a token of visible ASCII characters without spaces"},
    )
    max_request_bytes: int = Field(
        default=4_194_304, gt=0, description="Largest HTTP request body accepted; larger ones get 413."
    )
    session_idle_seconds: float = Field(
        default=1800.0, gt=0, description="Idle seconds after which HTTP sessions and keyed loop states expire."
    )
    session_key_header: str = Field(
        default="X-Loop-Guard-Key",
        description="Header keying the loop state of sessionless requests; without it, the client address.",
        json_schema_extra={"accepted": "an HTTP header name"},
    )
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated extra Host values for DNS-rebinding protection (example.com:*).",
        json_schema_extra={"accepted": "a comma-separated list of host or host:port values (port may be *)"},
    )
    allowed_origins: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Comma-separated extra Origin values for DNS-rebinding protection (https://app.example.com).",
        json_schema_extra={"accepted": "a comma-separated list of origins like https://app.example.com:* (no path)"},
    )
    log_format: Literal["text", "json"] = Field(default="text", description="Log lines as text or one JSON object.")
    call_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Seconds an upstream request may go without an answer or progress before it is cancelled; "
        "unset: no limit.",
    )
    max_message_bytes: int = Field(
        default=64 * 1024 * 1024,
        gt=0,
        description="Largest JSON-RPC message accepted on a stdio channel (a client request or an upstream result).",
    )
    log_contents: bool = Field(
        default=False,
        description="UNSAFE: log tool arguments and results (they may hold secrets); for debugging only.",
    )

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
        return init_settings, env_settings, InitSettingsSource(settings_cls, dict(_FILE_VALUES.get()))

    @field_validator("ignore_tools", "allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        """Accept "a, b,c" as well as a list; trim entries and drop empty ones."""
        return _split(value)

    @field_validator("log_level", "transport", "log_format", mode="before")
    @classmethod
    def _lower_choice(cls, value: object) -> object:
        """Choices are case-insensitive: INFO and info are the same."""
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        """A listen address is one word."""
        if not value or any(char.isspace() for char in value):
            msg = "empty or contains spaces"
            raise ValueError(msg)
        return value

    @field_validator("auth_token")
    @classmethod
    def _check_token(cls, value: SecretStr | None) -> SecretStr | None:
        """An empty token is a mistake, not "no authentication": fail closed."""
        if value is not None and not _TOKEN.match(value.get_secret_value()):
            msg = "empty or contains spaces or control characters (unset it to turn authentication off)"
            raise ValueError(msg)
        return value

    @field_validator("session_key_header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        """Header names are RFC 9110 tokens."""
        if not _HEADER_NAME.match(value):
            msg = f"{value!r} is not a header name"
            raise ValueError(msg)
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry is host, host:port or host:* (no scheme, no path)."""
        for entry in value:
            if not _ALLOWED_HOST.match(entry):
                msg = f"{entry!r} is not host, host:port or host:*"
                raise ValueError(msg)
        return value

    @field_validator("allowed_origins")
    @classmethod
    def _check_origins(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry is scheme://host with an optional port or :*; a trailing slash is dropped."""
        origins = tuple(entry.removesuffix("/") for entry in value)
        for entry in origins:
            if not _ALLOWED_ORIGIN.match(entry):
                msg = f"{entry!r} is not an origin like https://host, https://host:port or https://host:*"
                raise ValueError(msg)
        return origins

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

    def policy_for(self, overrides: Mapping[str, Any], *, prefix: str = "") -> Policy:
        """The session policy with one server's overrides (camelCase or snake_case keys) applied.

        Thresholds, ``ignore_errors`` and ``enabled`` replace the session's; ``ignore_tools``
        adds to them. The server's patterns name its tools as it lists them, so ``prefix``
        (``"time__"`` when tools are exported prefixed) is put in front of each.

        Raises:
            SettingsError: an unknown key, a bad value, or a warn threshold not below block.
        """
        where = overrides.where if isinstance(overrides, FileSettings) else str
        try:
            spec = PolicySpec.model_validate(dict(overrides))
        except ValidationError as error:
            problems = [
                f"{where(str(issue['loc'][0]))}: "
                + (f"not a per-server setting ({_PER_SERVER})" if issue["type"] == "extra_forbidden" else issue["msg"])
                for issue in error.errors()
            ]
            raise SettingsError("invalid per-server setting: " + "; ".join(problems)) from None
        given = spec.model_dump(exclude_unset=True, exclude_none=True)
        if "ignore_tools" in given:
            given["ignore_tools"] = self.ignore_tools + tuple(prefix + name for name in spec.ignore_tools or ())
        policy = dataclasses.replace(self.to_policy(), **given)
        thresholds = [name for name in PolicySpec.THRESHOLDS if name in given]
        if thresholds and policy.misconfiguration is not None:
            keys = " and ".join(where(name) for name in thresholds)
            msg = (
                f"invalid per-server setting {keys}: warn threshold ({policy.warn_threshold}) must be below "
                f"block threshold ({policy.block_threshold}); set both for this server"
            )
            raise SettingsError(msg)
        return policy


class PolicySpec(BaseModel):
    """The settings one server may override, as given (camelCase or snake_case keys)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
    )

    THRESHOLDS: ClassVar[tuple[str, ...]] = ("warn_threshold", "block_threshold")

    enabled: bool | None = None
    warn_threshold: int | None = Field(default=None, ge=1)
    block_threshold: int | None = Field(default=None, ge=1)
    ignore_tools: tuple[str, ...] | None = None
    ignore_errors: bool | None = None

    @field_validator("ignore_tools", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        """The same list forms as LOOP_GUARD_IGNORE_TOOLS: a list or a comma-separated string."""
        return _split(value)


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
        """Names and values, with the token hidden."""
        shown = {name: "<hidden>" if name == "auth_token" else value for name, value in self._values.items()}
        return f"FileSettings({shown!r}, file={self.file!r})"

    def key(self, name: str) -> str:
        """The key path ``name`` was written under, e.g. ``loopGuard.warnThreshold``."""
        return self._keys.get(name, name)

    def where(self, name: str) -> str:
        """Where ``name`` was written, e.g. ``loopGuard.warnThreshold in /etc/mcp.json``."""
        return f"{self.key(name)} in {self.file}" if self.file else self.key(name)


@dataclass(frozen=True, slots=True)
class SettingField:
    """One setting as the CLI and docs need it."""

    name: str
    env: str
    """Environment variable, e.g. ``LOOP_GUARD_WARN_THRESHOLD``."""
    flag: str
    """Command-line flag, e.g. ``--warn-threshold``."""
    type: Any
    """Annotation: ``bool``, ``int``, ``float``, ``str``, ``tuple[str, ...]``, ``SecretStr | None`` or a ``Literal``."""
    default: Any
    description: str
    accepted: str
    """Accepted values in words, e.g. "an integer >= 1"."""
    choices: tuple[str, ...] | None = None


def setting_fields() -> list[SettingField]:
    """All settings in declaration order."""
    return [_setting_field(name, info) for name, info in Settings.model_fields.items()]


def load_settings(file_settings: Mapping[str, Any] | None = None, /, **overrides: Any) -> Settings:
    """Build Settings from ``overrides`` (CLI flags; None means "not given"), the environment,
    then ``file_settings`` (the config file's ``loopGuard`` section), then the defaults.

    Raises:
        SettingsError: a value cannot be parsed or is out of range; every bad one is named
            with where it came from (flag, variable or file key).
    """
    given = {name: value for name, value in overrides.items() if value is not None}
    file_values = file_settings if file_settings is not None else FileSettings({})
    token = _FILE_VALUES.set(file_values)
    try:
        return Settings(**given)
    except ValidationError as error:
        raise SettingsError(_explain(error, given, file_values)) from None
    finally:
        _FILE_VALUES.reset(token)


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
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("accepted"), str):
        return str(extra["accepted"])
    annotation = info.annotation
    if annotation is bool:
        return "true or false (also 1/0, yes/no, on/off)"
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(str(choice) for choice in get_args(annotation))
    bounds: list[str] = []
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Ge):
            bounds.append(f">= {rule.ge}")
        elif isinstance(rule, annotated_types.Gt):
            bounds.append(f"> {rule.gt}")
        elif isinstance(rule, annotated_types.Le):
            bounds.append(f"<= {rule.le}")
    kind = "an integer" if annotation is int else "a number"
    if len(bounds) == 2 and bounds[0].startswith(">=") and bounds[1].startswith("<="):
        return f"{kind} from {bounds[0][3:]} to {bounds[1][3:]}"
    return " ".join([kind, *bounds])


def _explain(error: ValidationError, given: Mapping[str, Any], file_values: Mapping[str, Any]) -> str:
    """One paragraph naming each bad setting, where it came from, its value and what it accepts."""
    fields = Settings.model_fields
    environment = {name.upper() for name in os.environ}
    problems: list[str] = []
    for issue in error.errors(include_url=False):
        name = str(issue["loc"][0]) if issue["loc"] else ""
        if name not in fields:
            problems.append(f"{name!r} is not a setting (known: {', '.join(fields)})")
            continue
        variable = ENV_PREFIX + name.upper()
        value = "<hidden>" if fields[name].annotation == SecretStr | None else repr(issue["input"])
        if name in given:
            origin = f"{variable}={value} (from --{name.replace('_', '-')})"
        elif variable in environment or name not in file_values:
            origin = f"{variable}={value}"
        elif isinstance(file_values, FileSettings) and file_values.file:
            origin = f"{file_values.key(name)}={value} in {file_values.file}"
        else:
            origin = f"loopGuard.{to_camel(name)}={value} in the config file"
        detail = f"{issue['ctx']['error']}; " if issue["type"] == "value_error" else ""
        problems.append(f"{origin} is not valid: {detail}expected {_accepted(fields[name])}")
    return (
        "invalid configuration: "
        + "; ".join(problems)
        + ". Fix these values (or unset them to use the defaults) and start again."
    )
