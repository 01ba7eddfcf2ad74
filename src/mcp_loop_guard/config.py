"""The upstreams a guard runs in front of, and what the command line names: ``-- COMMAND`` or ``--upstream URL``.

A config file (``--config FILE``, the ``mcpServers`` JSON) names its servers in the same
types; it is read by :mod:`mcp_loop_guard.config_file`, loaded only by a guard given one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp_loop_guard.proxy.wire.header_text import has_control
from mcp_loop_guard.redaction import program_name, program_stem, redact_url
from mcp_loop_guard.settings import FileSettings, SettingsError

__all__ = [
    "SERVER_NAME",
    "TRANSPORTS",
    "ConfigError",
    "GuardConfig",
    "HttpServer",
    "ServerSpec",
    "StdioServer",
    "command_line_config",
    "guess_transport",
    "header_problem",
    "is_http_url",
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

_NO_VALUES: Mapping[str, Any] = MappingProxyType({})
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


def command_line_config(
    upstream: str | None, headers: Sequence[str], command: Sequence[str], cwd: str | None
) -> GuardConfig:
    """The upstream a command line names without a config file: ``--upstream URL``, else ``-- COMMAND``.

    (``--config FILE`` is read by :func:`mcp_loop_guard.config_file.load_config`.)

    Raises:
        ConfigError: the URL, a header or the command is not what it must be.
    """
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
    if not is_http_url(url):
        raise ConfigError("--upstream", [("", "expected an http:// or https:// URL with a host")])
    sent: dict[str, str] = {}
    for header in headers:
        name, colon, value = header.partition(":")
        if not colon or not _HEADER_NAME.match(name.strip()):
            raise ConfigError("--header", [("", 'expected "Name: value", with a header name before the colon')])
        if (problem := header_problem(name.strip(), value.strip())) is not None:
            raise ConfigError("--header", [(name.strip(), problem)])
        sent[name.strip()] = value.strip()
    host = urlsplit(url).hostname or ""
    name = re.sub(r"[^a-zA-Z0-9_-]", "-", host)[:64] or "upstream"
    server = HttpServer(name, url, transport or guess_transport(url), MappingProxyType(sent))
    return GuardConfig(None, (server,), FileSettings({}))


def _name_from_command(command: Sequence[str]) -> str:
    """A server name from the program's basename, or from the package a runner (npx, uvx...) starts."""
    stem = program_stem(command[0])
    if stem.lower() in _LAUNCHERS:
        package = next((arg for arg in command[1:] if not arg.startswith("-") and arg != "run"), "")
        stem = package.rpartition("/")[2].lstrip("@").partition("@")[0] or stem
    return re.sub(r"[^a-zA-Z0-9_-]", "_", stem)[:64] or "upstream"


def header_problem(name: str, value: str) -> str | None:
    """What makes a configured header unsendable (after ``${VAR}`` expansion), never quoting its value."""
    if not _HEADER_NAME.match(name):
        return "not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~ only)"
    if has_control(value):
        return "the value holds a control character (CR, LF, NUL...), which would end the header"
    if not value.isascii() and any(ord(char) > 0xFF for char in value):
        return "the value holds characters an HTTP header cannot carry (beyond Latin-1)"
    return None


def guess_transport(url: str) -> Literal["http", "sse"]:
    """SSE for a path ending in ``/sse``, streamable HTTP otherwise."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "http"


def is_http_url(url: str) -> bool:
    """True for an absolute http(s) URL with a host."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in {"http", "https"} and bool(parts.hostname)


def _masked(values: Mapping[str, str]) -> str:
    """A mapping's keys with every value hidden."""
    return "{" + ", ".join(f"{key!r}: '***'" for key in values) + "}"
