"""The config file: the ``mcpServers`` JSON of Claude Desktop, Cursor and VS Code, plus ``loopGuard``.

A file names the upstream servers (a ``command`` to run, or a ``url`` to reach over
streamable HTTP or SSE), may set any ``LOOP_GUARD_*`` setting in a top-level ``loopGuard``
section, and may override the loop rules per server in the server's own ``loopGuard``.
Everything is checked at load, so a bad file stops the guard before it serves anything,
with the file, the key and what is wrong. The file is read as every file a user names is
(:mod:`mcp_loop_guard.userfile`): a regular file of at most 4 MB, nested at most 100 deep.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

from mcp_loop_guard.core.setting import GLOBAL, Scope, Setting, snake
from mcp_loop_guard.overrides import PolicySpec, Spec, ToolSpec, settable
from mcp_loop_guard.proxy.wire.header_text import has_control
from mcp_loop_guard.redaction import program_name, program_stem, redact_url
from mcp_loop_guard.registry import REMOVED, SETTING
from mcp_loop_guard.settings import FileSettings, SettingsError
from mcp_loop_guard.userfile import MAX_DEPTH, MIB, UserFileError, line_of, read_text, too_deep

__all__ = [
    "MAX_CONFIG_BYTES",
    "SERVER_NAME",
    "TRANSPORTS",
    "ConfigError",
    "GuardConfig",
    "HttpServer",
    "ServerSpec",
    "StdioServer",
    "command_line_config",
    "load_config",
    "program_name",
    "redact_url",
    "stdio_command_config",
    "url_config",
]

SERVER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TRANSPORTS: Mapping[str, Literal["stdio", "http", "sse"]] = MappingProxyType(
    {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http", "sse": "sse"}
)
"""Accepted ``type``/``transport`` values and what each means."""

MAX_CONFIG_BYTES = 4 * MIB
"""The largest config file read: a real one is a few kilobytes; a larger one is a mistake or an attack."""

_NO_VALUES: Mapping[str, Any] = MappingProxyType({})
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MODELS: Mapping[Scope, type[Spec] | None] = MappingProxyType({"global": None, "server": PolicySpec, "tool": ToolSpec})
"""How each scope's section is checked at load (the top-level one is checked as Settings are made)."""
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP header name (an RFC 9110 token)."""
_LAUNCHERS = frozenset({"npx", "pnpx", "bunx", "uvx", "pipx"})
"""Package runners whose first argument names the server better than they do."""


@dataclass(frozen=True, slots=True, repr=False)
class StdioServer:
    """An upstream run as a child process and spoken to over its stdin and stdout."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: _NO_VALUES)
    """Variables set in the child's environment."""
    cwd: str | None = None
    policy: Mapping[str, Any] = field(default_factory=lambda: _NO_VALUES)
    """Per-server loop rules, for :func:`mcp_loop_guard.policies.policy_for`."""
    call_timeout: float | None = None
    """Seconds a request may go without an answer or progress (``callTimeoutSeconds``); None: the global one."""
    display: str = field(default="", compare=False)
    """The command line as the user wrote it (``${VAR}`` references unexpanded), for the operator's log only."""
    public: str = field(default="", compare=False)
    """The name texts a client reads give it, when not ``name`` (see :attr:`public_name`)."""

    def __repr__(self) -> str:
        """Everything but the values of ``env``, which often hold tokens."""
        return (
            f"StdioServer(name={self.name!r}, command={self.command!r}, args={self.args!r}, "
            f"env={_masked(self.env)}, cwd={self.cwd!r}, policy={dict(self.policy)!r})"
        )

    @property
    def public_name(self) -> str:
        """How texts a model may read name the server: its config name, or for ``-- COMMAND`` the program's.

        Never its arguments or command line: those may hold a path or a secret, and the model
        (and whoever reads its transcript) has no business with them.
        """
        return self.public or self.name


@dataclass(frozen=True, slots=True, repr=False)
class HttpServer:
    """An upstream reached at a URL over streamable HTTP or legacy SSE."""

    name: str
    url: str
    transport: Literal["http", "sse"] = "http"
    headers: Mapping[str, str] = field(default_factory=lambda: _NO_VALUES)
    """Sent with every request, e.g. ``Authorization``."""
    policy: Mapping[str, Any] = field(default_factory=lambda: _NO_VALUES)
    call_timeout: float | None = None
    """Seconds a request may go without an answer or progress (``callTimeoutSeconds``); None: the global one."""

    def same_endpoint(self, other: object) -> bool:
        """Whether ``other`` is this server at the same URL over the same transport (a reload may keep its sessions)."""
        return isinstance(other, HttpServer) and (other.name, other.url, other.transport) == (
            self.name,
            self.url,
            self.transport,
        )

    def __repr__(self) -> str:
        """Everything but header values and the URL's password and query values."""
        return (
            f"HttpServer(name={self.name!r}, url={redact_url(self.url)!r}, transport={self.transport!r}, "
            f"headers={_masked(self.headers)}, policy={dict(self.policy)!r})"
        )


ServerSpec = StdioServer | HttpServer


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """The upstream servers to guard and the settings the file gives."""

    path: Path | None
    """The file read, or None for a config made from the command line."""
    servers: tuple[ServerSpec, ...]
    settings: Mapping[str, Any]
    """The ``loopGuard`` section by snake_case setting name; pass it to ``load_settings``."""
    tools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """``loopGuard.tools``: (pattern over the names clients see, overrides), in file order."""


class ConfigError(SettingsError):
    """The config cannot be used: ``<file>: <key path>: <what is wrong>``, for every problem found."""

    def __init__(self, file: str, problems: Sequence[tuple[str, str]]) -> None:
        """``problems`` are (dotted key path, or "" for the whole file; what is wrong)."""
        self.file = file
        self.problems = tuple(problems)
        super().__init__(f"{file}: " + "; ".join(f"{key}: {what}" if key else what for key, what in self.problems))


class _Entry(BaseModel):
    """One server entry as clients write it; keys other clients add (``timeout``...) are ignored."""

    # Built at the first config file read: a guard started with a command alone never pays for it.
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True, defer_build=True)

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, min_length=1)
    type: str | None = None
    transport: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    loop_guard: dict[str, Any] = Field(default_factory=dict, alias="loopGuard")
    call_timeout_seconds: float | int | None = Field(default=None, gt=0, alias="callTimeoutSeconds")


def load_config(path: Path) -> GuardConfig:
    """Read and check a config file.

    In a server's ``command``, ``args``, ``env``, ``cwd``, ``url`` and ``headers``,
    ``${VAR}``, ``${VAR:-default}`` and ``${env:VAR}`` are replaced from the environment.

    Raises:
        ConfigError: the file cannot be read, is not JSON, or any server or setting is wrong.
    """
    problems: list[tuple[str, str]] = []
    document = _document(path)
    if not isinstance(document, dict):
        raise ConfigError(str(path), [("", f"expected a JSON object at the top, got {_kind(document)}")])
    servers = _servers(document, str(path), problems)
    section = document.get("loopGuard", {})
    tools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    if isinstance(section, dict) and "tools" in section:
        section = dict(section)
        tools = _tool_sections(section.pop("tools"), "loopGuard.tools", str(path), problems)
    settings = _section(section, "loopGuard", "global", str(path), problems)
    if not servers and not problems:
        problems.append(("", 'no servers: give at least one enabled server under "mcpServers"'))
    if problems:
        raise ConfigError(str(path), problems)
    return GuardConfig(path, servers, settings, tools)


def _document(path: Path) -> object:
    """The file's JSON value: a regular file of at most :data:`MAX_CONFIG_BYTES`, nested at most ``MAX_DEPTH`` deep.

    Raises:
        ConfigError: the file cannot be read, is too large, too deep, or not JSON.
    """
    try:
        text = read_text(path, limit=MAX_CONFIG_BYTES)
    except UserFileError as error:
        raise ConfigError(str(path), [("", error.problem)]) from None
    if (at := too_deep(text, "json")) is not None:
        raise ConfigError(str(path), [("", f"line {line_of(text, at)}: nested deeper than {MAX_DEPTH} levels")])
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            str(path), [("", f"invalid JSON at line {error.lineno}, column {error.colno}: {error.msg}")]
        ) from None
    except ValueError:  # the only other one: an integer longer than Python converts
        digits = sys.get_int_max_str_digits()
        raise ConfigError(str(path), [("", f"invalid JSON: a number of more than {digits} digits")]) from None


def _tool_sections(
    value: object, at: str, file: str, problems: list[tuple[str, str]]
) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    """A ``tools`` section: tool name patterns, each with its own overrides, checked now."""
    if not isinstance(value, dict):
        problems.append((at, f"expected an object mapping tool names or patterns to settings, got {_kind(value)}"))
        return ()
    found: list[tuple[str, Mapping[str, Any]]] = []
    for pattern, overrides in value.items():
        section = _section(overrides, f"{at}.{pattern}", "tool", file, problems)
        found.append((pattern, section))
    return tuple(found)


def command_line_config(
    config: str | None, upstream: str | None, headers: Sequence[str], command: Sequence[str], cwd: str | None
) -> GuardConfig:
    """The upstreams a command line names: ``--config FILE``, else ``--upstream URL``, else ``-- COMMAND``.

    Raises:
        ConfigError: the file, the URL, a header or the command is not what it must be.
    """
    if config is not None:
        return load_config(Path(config))
    if upstream is not None:
        return url_config(upstream, headers=headers)
    return stdio_command_config(command, cwd)


def stdio_command_config(command: Sequence[str], cwd: str | None) -> GuardConfig:
    """The ``-- COMMAND [ARG...]`` form: one stdio server, named after the command.

    Raises:
        ConfigError: the command is empty.
    """
    if not command or not command[0]:
        raise ConfigError("command", [("", "give the upstream server command after --")])
    server = StdioServer(
        _name_from_command(command),
        command[0],
        tuple(command[1:]),
        cwd=cwd,
        display=shlex.join(command),
        public=program_name(command[0]),
    )
    return GuardConfig(None, (server,), FileSettings({}))


def url_config(url: str, transport: Literal["http", "sse"] | None = None, headers: Sequence[str] = ()) -> GuardConfig:
    """The ``--upstream URL`` form: one remote server, SSE when the path ends in ``/sse``.

    ``headers`` are ``--header`` values, ``"Name: value"``, sent as given with every request.

    Raises:
        ConfigError: ``url`` is not an http(s) URL, or a header is not ``Name: value``.
    """
    if not _is_http_url(url):
        raise ConfigError("--upstream", [("", "expected an http:// or https:// URL with a host")])
    sent: dict[str, str] = {}
    for header in headers:
        name, colon, value = header.partition(":")
        if not colon or not _HEADER_NAME.match(name.strip()):
            raise ConfigError("--header", [("", 'expected "Name: value", with a header name before the colon')])
        if (problem := _header_problem(name.strip(), value.strip())) is not None:
            raise ConfigError("--header", [(name.strip(), problem)])
        sent[name.strip()] = value.strip()
    host = urlsplit(url).hostname or ""
    name = re.sub(r"[^a-zA-Z0-9_-]", "-", host)[:64] or "upstream"
    server = HttpServer(name, url, transport or _guess_transport(url), MappingProxyType(sent))
    return GuardConfig(None, (server,), FileSettings({}))


def _servers(document: Mapping[str, Any], file: str, problems: list[tuple[str, str]]) -> tuple[ServerSpec, ...]:
    """The enabled servers under ``mcpServers`` (or VS Code's ``servers``)."""
    keys = [key for key in ("mcpServers", "servers") if key in document]
    if len(keys) == 2:
        problems.append(("", 'both "mcpServers" and "servers" are given (keep one)'))
        return ()
    key = keys[0] if keys else "mcpServers"
    section = document.get(key, {})
    if not isinstance(section, dict):
        problems.append((key, f"expected an object mapping server names to servers, got {_kind(section)}"))
        return ()
    servers: list[ServerSpec] = []
    for name, entry in section.items():
        at = f"{key}.{name}"
        if not isinstance(entry, dict):
            problems.append((at, f"expected an object, got {_kind(entry)}"))
        elif not isinstance(entry.get("disabled", False), bool):
            problems.append((f"{at}.disabled", f"expected true or false, got {_kind(entry['disabled'])}"))
        elif entry.get("disabled") is not True and (server := _server(name, entry, at, file, problems)):
            servers.append(server)
    return tuple(servers)


def _server(
    name: str, entry: Mapping[str, Any], at: str, file: str, problems: list[tuple[str, str]]
) -> ServerSpec | None:
    """One server, or None with its problems recorded."""
    if not SERVER_NAME.match(name):
        problems.append((at, "server names must match ^[a-zA-Z0-9_-]{1,64}$ (letters, digits, _ and -)"))
        return None
    try:
        spec = _Entry.model_validate(entry)
    except ValidationError as error:
        problems.extend((_path(at, issue["loc"]), _problem(issue)) for issue in error.errors())
        return None
    found = len(problems)
    kind = _transport(spec, at, problems)
    policy = _section(spec.loop_guard, f"{at}.loopGuard", "server", file, problems)
    if spec.command is not None and spec.url is not None:
        problems.append(
            (at, 'has both "command" and "url" (keep "command" for a local server, "url" for a remote one)')
        )
    elif spec.command is None and spec.url is None:
        problems.append((at, 'needs "command" (a local server) or "url" (a remote one)'))
    elif kind == "stdio" and spec.url is not None:
        problems.append((at, 'transport "stdio" needs "command", not "url"'))
    elif kind in {"http", "sse"} and spec.command is not None:
        problems.append((at, f'transport "{kind}" needs "url", not "command"'))
    if len(problems) > found:
        return None
    expand = _Expander(at, problems)
    if spec.command is not None:
        return StdioServer(
            name,
            expand(spec.command, "command"),
            tuple(expand(arg, f"args[{index}]") for index, arg in enumerate(spec.args)),
            MappingProxyType({key: expand(value, f"env.{key}") for key, value in spec.env.items()}),
            None if spec.cwd is None else expand(spec.cwd, "cwd"),
            policy,
            None if spec.call_timeout_seconds is None else float(spec.call_timeout_seconds),
            display=shlex.join([spec.command, *spec.args]),
        )
    url = expand(spec.url or "", "url")
    if len(problems) == found and not _is_http_url(url):
        problems.append((f"{at}.url", "expected an http:// or https:// URL with a host"))
    headers = MappingProxyType({key: expand(value, f"headers.{key}") for key, value in spec.headers.items()})
    problems.extend(
        (f"{at}.headers.{key}", problem)
        for key, value in headers.items()
        if (problem := _header_problem(key, value)) is not None
    )
    remote: Literal["http", "sse"] = (
        "sse" if kind == "sse" or (kind is None and _guess_transport(url) == "sse") else "http"
    )
    timeout = None if spec.call_timeout_seconds is None else float(spec.call_timeout_seconds)
    return HttpServer(name, url, remote, headers, policy, timeout)


def _transport(spec: _Entry, at: str, problems: list[tuple[str, str]]) -> str | None:
    """The transport that ``type`` and ``transport`` name (they must agree), or None when neither is given."""
    named: dict[str, str] = {}
    for key, value in (("type", spec.type), ("transport", spec.transport)):
        if value is None:
            continue
        if value not in TRANSPORTS:
            accepted = ", ".join(TRANSPORTS)
            problems.append((f"{at}.{key}", f"unknown transport {value!r} (accepted: {accepted})"))
            return None
        named[key] = TRANSPORTS[value]
    if len(set(named.values())) > 1:
        problems.append((at, f'"type" ({spec.type}) and "transport" ({spec.transport}) disagree (keep one)'))
        return None
    return next(iter(named.values()), None)


def _section(section: object, at: str, scope: Scope, file: str, problems: list[tuple[str, str]]) -> FileSettings:
    """A ``loopGuard`` section of ``scope`` by snake_case name; camelCase keys accepted, others reported.

    A server's ``tools`` section is read as the top-level one is, each pattern's section by itself.
    """
    if not isinstance(section, dict):
        problems.append((at, f"expected an object, got {_kind(section)}"))
        return FileSettings({})
    fields = settable(scope)
    names = {spelling: setting.name for setting in fields for spelling in (setting.name, setting.key)}
    values: dict[str, Any] = {}
    keys: dict[str, str] = {}
    tools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    for key, value in section.items():
        name = names.get(key)
        if scope == "server" and key == "tools":
            tools = _tool_sections(value, f"{at}.tools", file, problems)
        elif name is None:
            problems.append((f"{at}.{key}", _misplaced(key, scope, fields)))
        elif name in keys:
            problems.append((f"{at}.{key}", f"given twice (also as {keys[name].rpartition('.')[2]})"))
        else:
            values[name], keys[name] = value, f"{at}.{key}"
    if (model := _MODELS[scope]) is not None:
        try:
            values = model.model_validate(values).model_dump(exclude_unset=True, exclude_none=True)
        except ValidationError as error:
            problems.extend(
                (_path(keys[str(issue["loc"][0])], issue["loc"][1:]), _problem(issue)) for issue in error.errors()
            )
    if "tools" in section and scope == "server":
        values["tools"], keys["tools"] = dict(tools), f"{at}.tools"
    return FileSettings(values, keys, file)


def _misplaced(key: str, scope: Scope, fields: Sequence[Setting]) -> str:
    """Why ``key`` is not a setting of ``scope``: removed, set elsewhere, or unknown."""
    name = snake(key)
    setting = SETTING.get(name)
    if name in REMOVED:
        return f"was removed: {REMOVED[name]}"
    if setting is None or key not in (setting.name, setting.key):
        known = ", ".join([*(field.key for field in fields), *(["tools"] if scope == "server" else [])])
        return f"unknown setting (known: {known})"
    if setting.scopes == GLOBAL:
        return "applies to the whole session (set it in the top-level loopGuard section)"
    if scope == "global":
        return "applies to tools (set it in a server's loopGuard section or in a tools section)"
    return "applies to a whole server (set it in a server's loopGuard section or the top-level one)"


class _Expander:
    """Expands ``${VAR}``, ``${VAR:-default}`` (and VS Code's ``${env:VAR}``) in one server's values."""

    def __init__(self, at: str, problems: list[tuple[str, str]]) -> None:
        self._at = at
        self._problems = problems

    def __call__(self, text: str, key: str) -> str:
        """``text`` with its variables replaced; a missing one without default is a problem of ``key``."""

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            value = os.environ.get(name)
            if value is None or (value == "" and default is not None):
                if default is None:
                    self._problems.append(
                        (f"{self._at}.{key}", f"environment variable {name} is not set (or write ${{{name}:-default}})")
                    )
                    return ""
                return default
            return value

        return _VARIABLE.sub(replace, text)


def _name_from_command(command: Sequence[str]) -> str:
    """A server name from the program's basename, or from the package a runner (npx, uvx...) starts."""
    stem = program_stem(command[0])
    if stem.lower() in _LAUNCHERS:
        package = next((arg for arg in command[1:] if not arg.startswith("-") and arg != "run"), "")
        stem = package.rpartition("/")[2].lstrip("@").partition("@")[0] or stem
    return re.sub(r"[^a-zA-Z0-9_-]", "_", stem)[:64] or "upstream"


def _header_problem(name: str, value: str) -> str | None:
    """What makes a configured header unsendable (after ``${VAR}`` expansion), never quoting its value."""
    if not _HEADER_NAME.match(name):
        return "not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    if has_control(value):
        return "the value holds a control character (CR, LF, NUL...), which would end the header"
    if not value.isascii() and any(ord(char) > 0xFF for char in value):
        return "the value holds characters an HTTP header cannot carry (beyond Latin-1)"
    return None


def _guess_transport(url: str) -> Literal["http", "sse"]:
    """SSE for a path ending in ``/sse``, streamable HTTP otherwise."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "http"


def _is_http_url(url: str) -> bool:
    """True for an absolute http(s) URL with a host."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and bool(parts.hostname)


def _masked(values: Mapping[str, str]) -> str:
    """A mapping's keys with every value hidden."""
    return "{" + ", ".join(f"{key!r}: '***'" for key in values) + "}"


def _path(at: str, loc: tuple[int | str, ...]) -> str:
    """A dotted key path: ``mcpServers.time.args[1]``."""
    text = at
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _kind(value: object) -> str:
    """The JSON type of a value, in words, never the value (it may be a secret)."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}
    return kinds.get(type(value), "a number")


_EXPECTED = {
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "an object",
    "bool_type": "true or false",
    "int_type": "an integer",
}


def _problem(issue: ErrorDetails) -> str:
    """What is wrong, in words, from one pydantic issue."""
    kind = issue["type"]
    ctx = issue.get("ctx", {})
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_kind(issue['input'])}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    return str(issue["msg"])
