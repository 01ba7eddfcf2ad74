"""The config file: the ``mcpServers`` JSON of Claude Desktop, Cursor and VS Code, plus ``loopGuard``.

A file names the upstream servers (a ``command`` to run, or a ``url`` to reach over
streamable HTTP or SSE), may set any ``LOOP_GUARD_*`` setting in a top-level ``loopGuard``
section, and may override the loop rules per server in the server's own ``loopGuard``.
Everything is checked at load, so a bad file stops the guard before it serves anything,
with the file, the key and what is wrong. The file is read as every file a user names is
(:mod:`mcp_loop_guard.userfile`): a regular file of at most 4 MB, nested at most 100 deep.

Only a guard given a file (``--config``, a reload, ``replay --config``) loads this module. It
reads servers and the top-level section without pydantic; the pydantic models that check a
server's or a tool's overrides (:mod:`mcp_loop_guard.overrides`) load at the first such section.
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
from typing import TYPE_CHECKING, Any, Literal

from mcp_loop_guard.config import (
    SERVER_NAME,
    TRANSPORTS,
    ConfigError,
    GuardConfig,
    HttpServer,
    ServerSpec,
    StdioServer,
    guess_transport,
    header_problem,
    is_http_url,
)
from mcp_loop_guard.core.setting import GLOBAL, Scope, Setting, snake
from mcp_loop_guard.registry import REMOVED, SETTING, settable
from mcp_loop_guard.settings import FileSettings
from mcp_loop_guard.userfile import MAX_DEPTH, MIB, UserFileError, line_of, read_text, too_deep

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from mcp_loop_guard.overrides import Spec

__all__ = ["MAX_CONFIG_BYTES", "load_config"]

MAX_CONFIG_BYTES = 4 * MIB
"""The largest config file read: a real one is a few kilobytes; a larger one is a mistake or an attack."""

_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True, slots=True)
class _Entry:
    """One server entry as clients write it, its values checked; keys other clients add (``timeout``...) are ignored."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    type: str | None = None
    transport: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    loop_guard: Mapping[str, Any] = field(default_factory=dict)
    call_timeout_seconds: float | None = None


def _entry(entry: Mapping[str, Any], at: str, problems: list[tuple[str, str]]) -> _Entry | None:
    """The entry's values, each of the JSON type it must be; None with its problems recorded (in key order)."""
    found = len(problems)

    def problem(key: str, words: str) -> None:
        problems.append((f"{at}.{key}", words))

    def text(key: str, *, empty: bool = True) -> str | None:
        value = entry.get(key)
        if value is not None and not isinstance(value, str):
            problem(key, f"expected a string, got {_kind(value)}")
        elif value == "" and not empty:
            problem(key, "must not be empty")
        else:
            return value
        return None

    def texts(key: str) -> dict[str, str]:
        value = entry.get(key, {})
        if not isinstance(value, dict):
            problem(key, f"expected an object, got {_kind(value)}")
            return {}
        for name, item in value.items():
            if not isinstance(item, str):
                problem(f"{key}.{name}", f"expected a string, got {_kind(item)}")
        return value

    command = text("command", empty=False)
    args = entry.get("args", [])
    if not isinstance(args, list):
        problem("args", f"expected a list, got {_kind(args)}")
    for index, arg in enumerate(args if isinstance(args, list) else ()):
        if not isinstance(arg, str):
            problem(f"args[{index}]", f"expected a string, got {_kind(arg)}")
    env = texts("env")
    cwd, url = text("cwd"), text("url", empty=False)
    kind, transport = text("type"), text("transport")
    headers = texts("headers")
    loop_guard = entry.get("loopGuard", {})
    if not isinstance(loop_guard, dict):
        problem("loopGuard", f"expected an object, got {_kind(loop_guard)}")
    timeout = entry.get("callTimeoutSeconds")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        problem("callTimeoutSeconds", f"expected a number, got {_kind(timeout)}")
    elif timeout is not None and not timeout > 0:
        problem("callTimeoutSeconds", "must be greater than 0")
    if len(problems) > found:
        return None
    return _Entry(command, tuple(args), env, cwd, url, kind, transport, headers, loop_guard, timeout)


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
    spec = _entry(entry, at, problems)
    if spec is None:
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
    if len(problems) == found and not is_http_url(url):
        problems.append((f"{at}.url", "expected an http:// or https:// URL with a host"))
    headers = MappingProxyType({key: expand(value, f"headers.{key}") for key, value in spec.headers.items()})
    problems.extend(
        (f"{at}.headers.{key}", problem)
        for key, value in headers.items()
        if (problem := header_problem(key, value)) is not None
    )
    remote: Literal["http", "sse"] = (
        "sse" if kind == "sse" or (kind is None and guess_transport(url) == "sse") else "http"
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
    if values and scope != "global":  # the top-level section is checked as Settings are made
        from pydantic import ValidationError  # noqa: PLC0415 - pydantic reads overrides, loaded at the first

        try:
            values = _model(scope).model_validate(values).model_dump(exclude_unset=True, exclude_none=True)
        except ValidationError as error:
            problems.extend(
                (_path(keys[str(issue["loc"][0])], issue["loc"][1:]), _problem(issue)) for issue in error.errors()
            )
    if "tools" in section and scope == "server":
        values["tools"], keys["tools"] = dict(tools), f"{at}.tools"
    return FileSettings(values, keys, file)


def _model(scope: Scope) -> type[Spec]:
    """The model that checks a server's or a tool's section."""
    from mcp_loop_guard.overrides import PolicySpec, ToolSpec  # noqa: PLC0415 - see _section

    return PolicySpec if scope == "server" else ToolSpec


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
