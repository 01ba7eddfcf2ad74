"""Configuration: CLI flags over ``LOOP_GUARD_*`` variables over a config file over defaults.

The core never sees ``Settings``, only the frozen :class:`~mcp_loop_guard.core.Policy` it
converts to, one for the whole session and one per upstream server with overrides.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from mcp_loop_guard.budgets import SHORT_FORM, BudgetSpec, budgets_of, parse_budgets
from mcp_loop_guard.core import Mode, Policy, ScrubRules
from mcp_loop_guard.core.scrub import PRESETS
from mcp_loop_guard.redaction import redact_url
from mcp_loop_guard.store import store_kind

__all__ = [
    "FileSettings",
    "SettingField",
    "Settings",
    "SettingsError",
    "load_settings",
    "setting_fields",
]

ENV_PREFIX = "LOOP_GUARD_"
REMOVED_TIMING = (
    "a wall-clock wait no longer exempts a repeat (a slow model would never be stopped); patience is judged "
    "from the agent's own rhythm, waiting tools, growing backoffs and `pollable: true` on a tool"
)
REMOVED: Mapping[str, str] = MappingProxyType({"poll_seconds": REMOVED_TIMING, "quiet_seconds": REMOVED_TIMING})
"""Settings that no longer exist, and what took their place."""
logger = logging.getLogger(__name__)

LogLevel = Literal["debug", "info", "warning", "error"]

_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:([0-9]{1,5}|\*))?"
_ALLOWED_HOST = re.compile(rf"^{_HOST}$")
_ALLOWED_ORIGIN = re.compile(rf"^[A-Za-z][A-Za-z0-9+.-]*://{_HOST}$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")

_FILE_VALUES: ContextVar[Mapping[str, Any]] = ContextVar("_FILE_VALUES", default=MappingProxyType({}))
"""Values of the config file's ``loopGuard`` section while ``load_settings`` builds Settings."""


def split_list(value: object) -> object:
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
    cycle_max_period: int = Field(
        default=8, ge=1, le=8, description="Longest repeating sequence of calls judged as a cycle; 1 turns cycles off."
    )
    recurring_warn_threshold: int | None = Field(
        default=None,
        ge=0,
        description="The same call with the same result this many times among the last calls, others between, "
        "earns a warning (default: the warn threshold; 0: never).",
        json_schema_extra={"accepted": "an integer >= 0 (unset: the warn threshold)"},
    )
    recurring_block_threshold: int | None = Field(
        default=None,
        ge=0,
        description="The same call with the same result that would reach this count among the last calls is "
        "refused (default: the block threshold; 0: never).",
        json_schema_extra={"accepted": "an integer >= 0 (unset: the block threshold)"},
    )
    recurring_window: int = Field(
        default=20, ge=2, le=64, description="How many of the agent's last calls the recurring family looks at."
    )
    same_error_warn_threshold: int = Field(
        default=3, ge=0, description="Same error from one tool in a row, whatever its arguments, that earns a warning."
    )
    same_error_block_threshold: int = Field(
        default=8, ge=0, description="Same error from one tool in a row after which its calls are refused; 0: never."
    )
    same_result_warn_threshold: int = Field(
        default=4, ge=0, description="Same result from one tool for different arguments in a row that earns a warning."
    )
    same_result_block_threshold: int = Field(
        default=0, ge=0, description="Same result for different arguments after which calls are refused; 0: never."
    )
    burst_detection: bool = Field(
        default=True, description="Count identical calls asked for at once (one model response) like a streak."
    )
    side_effect_warn_threshold: int = Field(
        default=2, ge=0, description="Identical calls to a destructive, non-idempotent tool that earn a warning."
    )
    side_effect_block_threshold: int = Field(
        default=3, ge=0, description="Identical calls to a destructive, non-idempotent tool refused from this one."
    )
    trust_annotations: bool = Field(
        default=True, description="Judge tools marked destructiveHint (and not idempotentHint) as side effects."
    )
    scrub_keys: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Keys (fetched_at) or JSON paths ($.meta.requestId) left out of result fingerprints.",
        json_schema_extra={
            "accepted": "a comma-separated list of key names or JSON paths ($.a.b, $.list[*].id, $..key)"
        },
    )
    scrub: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Volatile parts left out of result fingerprints (timestamps,uuids,hexids,tokens,durations).",
        json_schema_extra={"accepted": "a comma-separated list of: timestamps, uuids, hexids, tokens, durations"},
    )
    mode: Literal["enforce", "warn", "shadow"] = Field(
        default="enforce",
        description="enforce: warn, refuse, abort; warn: only warnings; shadow: nothing the model sees, only logs.",
    )
    budgets: Annotated[tuple[BudgetSpec, ...], NoDecode] = Field(
        default=(),
        description="Caps on one agent's calls, loops or not: search_*=20/3600 allows 20 calls to search_* an hour.",
        json_schema_extra={"accepted": SHORT_FORM},
    )
    watch_config: bool = Field(
        default=False, description="Reload the --config file whenever it changes (SIGHUP always reloads it)."
    )
    event_log: str | None = Field(
        default=None,
        description="Append one JSON line per tool call and its verdict to this file (for replay).",
        json_schema_extra={"accepted": "a file path"},
    )
    state: str = Field(
        default="sqlite",
        description="Where loop state lives: sqlite (a file in the user's state directory), sqlite:///path, "
        "memory, or redis://host:port/db (rediss:// too).",
        json_schema_extra={"accepted": "memory, sqlite, sqlite:///path/to/file, redis://host:port/db or rediss://..."},
    )
    state_timeout_seconds: float = Field(
        default=0.25, gt=0, description="Longest wait for the state store per call before failing open or closed."
    )
    state_fail: Literal["open", "closed"] = Field(
        default="open", description="When the state store is unavailable: let calls pass (open) or refuse them."
    )
    agent_key: str | None = Field(
        default=None,
        description="Key of this agent's loop state, instead of one derived from the client process (stdio).",
        json_schema_extra={"accepted": "a non-empty string"},
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
    auth_tokens: SecretStr | None = Field(
        default=None,
        description="Named bearer tokens, name:token pairs separated by commas; loop state keys are kept per name.",
        json_schema_extra={"accepted": "name:token pairs separated by commas (names of letters, digits, _ and -)"},
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="Bearer token of the admin API (/admin/agents: list agents, reset one); unset: no admin API.",
        json_schema_extra={"accepted": "a token without spaces or control characters"},
    )
    trust_key_header: bool = Field(
        default=True,
        description="Key sessionless loop state by the key header; off: by token name (or client address) only.",
    )
    max_sessions: int = Field(
        default=1000, ge=1, description="Live HTTP sessions; when full the least recently used idle one is closed."
    )
    max_keys: int = Field(
        default=10_000, ge=1, description="Sessionless loop states kept in memory (least recently used dropped)."
    )
    max_connections: int = Field(default=500, ge=1, description="Concurrent HTTP connections; more get 503 at once.")
    header_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Seconds a client may take to send an HTTP request's line and headers."
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="Seconds a client may take to send an HTTP request's body after its headers."
    )
    max_pending_requests: int = Field(
        default=64, ge=1, description="Upstream requests (sampling, roots, ping) awaiting one client at once."
    )
    sse_ping_seconds: float = Field(
        default=15.0,
        ge=0,
        description="Seconds of silence after which the guard's own event streams carry a comment, so proxies "
        "between it and the client do not cut them as idle (0: never).",
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

    @field_validator("ignore_tools", "allowed_hosts", "allowed_origins", "scrub", "scrub_keys", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        """Accept "a, b,c" as well as a list; trim entries and drop empty ones."""
        return split_list(value)

    @field_validator("budgets", mode="before")
    @classmethod
    def _parse_budgets(cls, value: object) -> object:
        """The short form (search_*=20/3600,200) or a JSON list; a config file gives a list of objects."""
        return parse_budgets(value)

    @field_validator("log_level", "transport", "log_format", "mode", "state_fail", mode="before")
    @classmethod
    def _lower_choice(cls, value: object) -> object:
        """Choices are case-insensitive: INFO and info are the same."""
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("scrub")
    @classmethod
    def _check_scrub(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Only named presets."""
        unknown = [name for name in value if name not in PRESETS]
        if unknown:
            msg = f"unknown preset {unknown[0]!r}"
            raise ValueError(msg)
        return value

    @field_validator("scrub_keys")
    @classmethod
    def _check_scrub_keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """JSON paths must parse."""
        ScrubRules(keys=value)
        return value

    @field_validator("state")
    @classmethod
    def _check_state(cls, value: str) -> str:
        """One of the store forms."""
        store_kind(value.strip())
        return value.strip()

    @field_validator("agent_key", "event_log")
    @classmethod
    def _check_text(cls, value: str | None) -> str | None:
        """An empty value is a mistake, not "unset"."""
        if value is not None and not value.strip():
            msg = "empty (unset it instead)"
            raise ValueError(msg)
        return value

    @field_validator("auth_tokens")
    @classmethod
    def _check_tokens(cls, value: SecretStr | None) -> SecretStr | None:
        """name:token pairs, names unique, tokens without spaces."""
        if value is not None:
            parse_tokens(value.get_secret_value())
        return value

    @field_validator("host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        """A listen address is one word."""
        if not value or any(char.isspace() for char in value):
            msg = "empty or contains spaces"
            raise ValueError(msg)
        return value

    @field_validator("auth_token", "admin_token")
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
            cycle_max_period=self.cycle_max_period,
            same_error_warn_threshold=self.same_error_warn_threshold,
            same_error_block_threshold=self.same_error_block_threshold,
            same_result_warn_threshold=self.same_result_warn_threshold,
            same_result_block_threshold=self.same_result_block_threshold,
            burst_detection=self.burst_detection,
            side_effect_warn_threshold=self.side_effect_warn_threshold,
            side_effect_block_threshold=self.side_effect_block_threshold,
            trust_annotations=self.trust_annotations,
            recurring_warn_threshold=self.recurring_warn_threshold,
            recurring_block_threshold=self.recurring_block_threshold,
            recurring_window=self.recurring_window,
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


RULE_SETTINGS = frozenset(
    {
        "enabled",
        "warn_threshold",
        "block_threshold",
        "abort_threshold",
        "ignore_tools",
        "ignore_errors",
        "use_terminate",
        "reset_after_seconds",
        "cycle_max_period",
        "same_error_warn_threshold",
        "same_error_block_threshold",
        "same_result_warn_threshold",
        "same_result_block_threshold",
        "burst_detection",
        "side_effect_warn_threshold",
        "side_effect_block_threshold",
        "trust_annotations",
        "recurring_warn_threshold",
        "recurring_block_threshold",
        "recurring_window",
        "scrub",
        "scrub_keys",
        "mode",
        "budgets",
    }
)
"""Settings that change a verdict (what :meth:`Settings.to_policy` reads): replay takes them, a reload applies them."""

_TOKEN_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def parse_tokens(text: str) -> dict[str, str]:
    """``alice:tok-a,bob:tok-b`` as {name: token}.

    Raises:
        ValueError: a pair without a colon, a bad name, a repeated name or token, a token with spaces.
    """
    tokens: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, colon, token = pair.partition(":")
        if not colon or not _TOKEN_NAME.match(name):
            msg = "each entry must be name:token with a name of letters, digits, _ and -"
            raise ValueError(msg)
        if not _TOKEN.match(token):
            msg = f"the token of {name!r} is empty or contains spaces or control characters"
            raise ValueError(msg)
        if name in tokens or token in tokens.values():
            msg = f"{name!r} or its token is given twice"
            raise ValueError(msg)
        tokens[name] = token
    if not tokens:
        msg = "no name:token pairs (unset it to turn named tokens off)"
        raise ValueError(msg)
    return tokens


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
    _warn_unknown_variables()
    token = _FILE_VALUES.set(file_values)
    try:
        return Settings(**given)
    except ValidationError as error:
        raise SettingsError(_explain(error, given, file_values)) from None
    finally:
        _FILE_VALUES.reset(token)


def _warn_unknown_variables() -> None:
    """A ``LOOP_GUARD_*`` variable that is no setting is most likely a typo: say so, once per load."""
    fields = Settings.model_fields
    for variable in sorted(os.environ):
        name = variable[len(ENV_PREFIX) :].lower()
        if not variable.startswith(ENV_PREFIX) or name in fields:
            continue
        if name in REMOVED:
            logger.warning("%s is ignored: it was removed; %s", variable, REMOVED[name])
        else:
            logger.warning("%s is ignored: it is not a setting (see mcp-loop-guard --help)", variable)


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
    if annotation in (str, str | None):
        return "a non-empty text" if annotation is str else "a non-empty text (unset it for none)"
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
            snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
            if snake in REMOVED:
                problems.append(f"{name!r} was removed: {REMOVED[snake]}")
            else:
                problems.append(f"{name!r} is not a setting (known: {', '.join(fields)})")
            continue
        variable = ENV_PREFIX + name.upper()
        value = "<hidden>" if fields[name].annotation == SecretStr | None else repr(issue["input"])
        if name == "state" and isinstance(issue["input"], str):
            value = repr(redact_url(issue["input"]))  # a store URL may hold its password
        inner = "".join(f"[{part}]" if isinstance(part, int) else f".{to_camel(part)}" for part in issue["loc"][1:])
        if name in given:
            origin = f"{variable}{inner}={value} (from --{name.replace('_', '-')})"
        elif variable in environment or name not in file_values:
            origin = f"{variable}{inner}={value}"
        elif isinstance(file_values, FileSettings) and file_values.file:
            origin = f"{file_values.key(name)}{inner}={value} in {file_values.file}"
        else:
            origin = f"loopGuard.{to_camel(name)}{inner}={value} in the config file"
        if issue["type"] == "value_error":
            detail = f"{issue['ctx']['error']}; "
        else:
            detail = f"{issue['msg'].lower()}; " if inner else ""
        problems.append(f"{origin} is not valid: {detail}expected {_accepted(fields[name])}")
    return (
        "invalid configuration: "
        + "; ".join(problems)
        + ". Fix these values (or unset them to use the defaults) and start again."
    )
