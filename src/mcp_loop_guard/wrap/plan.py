"""Wrap or unwrap every server entry of one config file's text.

Each entry is decided on its values (local, remote, already wrapped, or one the guard
cannot stand in front of), then edited in its own span of the text. Every edit is
checked twice before it is kept: the entry must read back as intended, and unwrapping
the wrapped entry must give back the original text byte for byte. An entry failing
either check is left as it was, with the reason.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp_loop_guard.wrap import edit, jsonc
from mcp_loop_guard.wrap.clients import Client
from mcp_loop_guard.wrap.entries import UNSUPPORTED_TOML, Entry, RefusedError, json_entries, toml_entries
from mcp_loop_guard.wrap.guard import guard_words
from mcp_loop_guard.wrap.spans import TextSyntaxError, plain
from mcp_loop_guard.wrap.syntax import JSON, TOML, Edit, Syntax, apply

_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class _LeftAloneError(Exception):
    """This entry stays as it is, for the reason given."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one entry."""

    section: str
    name: str
    changed: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The new text and what happened to each entry."""

    text: str
    outcomes: tuple[Outcome, ...]


def rewrite(text: str, client: Client, *, prefix: Sequence[str], undo: bool, only: Collection[str] = ()) -> Rewrite:
    """``text`` with its entries wrapped (``prefix`` is the guard command's words) or unwrapped.

    Raises:
        RefusedError: the text is not a config file of this client's format, or ``only`` names no server.
    """
    syntax: Syntax = TOML if client.syntax == "toml" else JSON
    entries = toml_entries(text) if client.syntax == "toml" else json_entries(text, client)
    names = {entry.name for entry in entries}
    if missing := sorted(set(only) - names):
        known = ", ".join(sorted(names)) or "none"
        raise RefusedError("", f"no server named {', '.join(missing)} (servers: {known})")
    edits: list[Edit] = []
    outcomes: list[Outcome] = []
    for entry in entries:
        if only and entry.name not in only:
            continue
        if entry.start < 0:
            outcomes.append(Outcome(entry.section, entry.name, changed=False, detail=UNSUPPORTED_TOML))
            continue
        work = _Work(syntax, client, text[entry.start : entry.end], entry, tuple(prefix))
        try:
            new, detail = work.unwrap() if undo else work.wrap()
        except _LeftAloneError as left:
            outcomes.append(Outcome(entry.section, entry.name, changed=False, detail=str(left)))
            continue
        edits.append((entry.start, entry.end, new))
        outcomes.append(Outcome(entry.section, entry.name, changed=True, detail=detail))
    new = apply(text, edits)
    if edits:
        _must_parse(new, syntax)
    return Rewrite(new, tuple(outcomes))


def _must_parse(text: str, syntax: Syntax) -> None:
    """A last look at the whole rewritten file before anything is shown or written.

    Raises:
        RuntimeError: it does not parse, which would be a bug of wrap: nothing is written then.
    """
    try:
        if syntax.name == "TOML":
            tomllib.loads(text)
        else:
            jsonc.parse(text)
    except (TextSyntaxError, tomllib.TOMLDecodeError) as error:
        raise RuntimeError(f"the rewritten file would not parse ({error}); nothing written") from error


class _Work:
    """One entry being wrapped or unwrapped."""

    def __init__(self, syntax: Syntax, client: Client, text: str, entry: Entry, prefix: tuple[str, ...]) -> None:
        self.syntax, self.client, self.text, self.entry, self.prefix = syntax, client, text, entry, prefix
        self.data = entry.data
        self.at = f"{entry.section}.{entry.name}"
        self.local = self._read(text) if syntax.name == "TOML" else dict(entry.data)
        """The values written in this entry's own span (a TOML entry's sub-tables sit elsewhere)."""

    def _string(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is not None and not isinstance(value, str):
            raise RefusedError(f"{self.at}.{key}", "expected a string")
        return value

    def _strings(self, key: str) -> list[str]:
        value = self.data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise RefusedError(f"{self.at}.{key}", "expected a list of strings")
        return value

    def _read(self, text: str) -> dict[str, Any]:
        """The entry's values as ``text`` writes them."""
        if self.syntax.name == "TOML":
            servers = tomllib.loads(text).get("mcp_servers", {})
            return dict(servers.get(self.entry.name, {}))
        data = plain(jsonc.parse(text))
        return dict(data) if isinstance(data, dict) else {}

    def _checked(self, new: str, expected: Mapping[str, Any]) -> str:
        """``new`` once it reads as ``expected`` and unwraps back to the original text."""
        try:
            reads = self._read(new)
            back = _Work(self.syntax, self.client, new, Entry(self.entry.section, self.entry.name, 0, 0, reads),
                         self.prefix).unwrap()[0]  # fmt: skip
        except (TextSyntaxError, tomllib.TOMLDecodeError, _LeftAloneError, RefusedError) as error:
            raise _LeftAloneError(f"left as is: the wrapped entry did not read back as intended ({error})") from None
        if reads != dict(expected):
            raise _LeftAloneError("left as is: the wrapped entry did not read back as intended")
        if back != self.text:
            raise _LeftAloneError(
                "left as is: unwrap could not give this entry back byte for byte "
                "(comments or an unusual layout inside the keys wrap rewrites)"
            )
        return new

    def wrap(self) -> tuple[str, str]:
        command = self._string("command")
        args = self._strings("args")
        disabled = " (disabled)" if self.data.get("disabled") is True or self.data.get("enabled") is False else ""
        if command is not None and guard_words(command, args, self.prefix) is not None:
            raise _LeftAloneError("left as is: already runs behind the guard")
        urls = [key for key in ("url", "serverUrl", "httpUrl") if key in self.data]
        if command is not None:
            if urls:
                raise _LeftAloneError(f"left as is: has both command and {urls[0]}")
            tokens = [self.syntax.literal(word) for word in (*self.prefix, "--")]
            new = edit.wrap_local(self.syntax, self.text, tokens)
            expected = self.local | {"command": self.prefix[0], "args": [*self.prefix[1:], "--", command, *args]}
            return self._checked(new, expected), f"wrapped: {_program(command)} runs behind the guard{disabled}"
        if not urls:
            raise _LeftAloneError("left as is: has neither command nor a URL")
        return self._wrap_remote(urls, disabled)

    def _wrap_remote(self, urls: list[str], disabled: str) -> tuple[str, str]:
        client = self.client
        key = next((key for key in client.url_keys if key in self.data), None)
        if key is None:
            keys = " or ".join(client.url_keys)
            raise _LeftAloneError(
                f"left as is: {client.no_remote_reason or f'{client.title} reads remote servers from {keys}'}"
            )
        for blocker, reason in client.signs_in.items():
            if blocker in self.data:
                raise _LeftAloneError(f"left as is: {reason}")
        url = self._string(key) or ""
        if not re.match(r"(?i)https?://[^/\s]|\$\{", url):
            raise _LeftAloneError(f"left as is: {key} is not an http(s) URL, the only kind the guard reaches")
        transport = _transport(url)
        declared = self._declared(key)
        if declared is not None and declared != transport:
            raise _LeftAloneError(
                "left as is: the guard reaches a server over SSE exactly when its URL path ends in /sse, "
                f"and this entry says {declared}"
            )
        headers = self.data.get(client.headers_key, {})
        if not isinstance(headers, dict) or not all(isinstance(value, str) for value in headers.values()):
            raise RefusedError(f"{self.at}.{client.headers_key}", "expected an object of strings")
        for name, value in headers.items():
            if not _TOKEN.match(name) or "\n" in value or "\r" in value:
                raise _LeftAloneError(f"left as is: header {name!r} cannot be passed as --header")
        if client.headers_key in self.data and not headers and self.syntax.name == "TOML":
            raise _LeftAloneError(f"left as is: an empty {client.headers_key} would stop Codex from starting it")
        routes = client.type_routes and "type" in self.data
        remote = edit.Remote(key, client.headers_key, self.syntax.literal(client.type_names[transport]))
        tokens = [self.syntax.literal(word) for word in self.prefix]
        try:
            new = edit.wrap_remote(
                self.syntax, self.text, tokens, remote, self.syntax.literal("stdio") if routes else None
            )
        except ValueError as error:
            raise _LeftAloneError(f"left as is: {error}") from None
        expected = {k: v for k, v in self.local.items() if k != key and (k != client.headers_key or not headers)}
        flags = [flag for name, value in headers.items() for flag in ("--header", f"{name}: {value}")]
        expected |= {"command": self.prefix[0], "args": [*self.prefix[1:], "--upstream", url, *flags]}
        if routes:
            expected["type"] = "stdio"
        how = "streamable HTTP" if transport == "http" else "SSE"
        caution = (
            ""
            if headers
            else f"; it sends no headers: if {client.title} signs you in to it (OAuth), the guard cannot, "
            f"so take it out again with unwrap --only {self.entry.name}"
        )
        return self._checked(new, expected), f"wrapped: remote, the guard reaches it over {how}{disabled}{caution}"

    def _declared(self, key: str) -> Literal["http", "sse"] | None:
        """The transport the entry names, if it names one."""
        kind = self._string("type")
        if self.client.http_only or key == "httpUrl":
            return "http"
        if self.client.key == "gemini" and kind is None:
            raise _LeftAloneError(
                'left as is: Gemini CLI reads "url" without "type" as SSE in older versions and as streamable '
                'HTTP in newer ones; add "type": "http" or "type": "sse", then wrap again'
            )
        if kind is None:
            return None
        for transport, spelling in self.client.type_names.items():
            if kind == spelling:
                return "sse" if transport == "sse" else "http"
        if kind in ("streamable-http", "streamableHttp"):
            spelled = self.client.type_names["http"]
            raise _LeftAloneError(f'left as is: unwrap would write its type back as "{spelled}"; write that, then wrap')
        raise _LeftAloneError(f"left as is: its type {kind!r} is not a transport the guard reaches (http, sse)")

    def unwrap(self) -> tuple[str, str]:
        command = self._string("command")
        args = self._strings("args")
        skip = None if command is None else guard_words(command, args, self.prefix)
        if command is None or skip is None:
            raise _LeftAloneError("left as is: not behind the guard")
        rest = args[skip:]
        if "--" in rest and rest.index("--") + 1 < len(rest):
            dash = skip + rest.index("--")
            new = edit.unwrap_local(self.syntax, self.text, dash)
            restored = {"command": args[dash + 1]} | ({"args": args[dash + 2 :]} if args[dash + 2 :] else {})
            self._reads_as(new, {k: v for k, v in self.local.items() if k not in ("command", "args")} | restored)
            return new, f"unwrapped: runs {_program(args[dash + 1])} directly again"
        if "--upstream" in rest:
            return self._unwrap_remote(args, skip + rest.index("--upstream"))
        raise _LeftAloneError("left as is: runs the guard without a server of its own to give back")

    def _unwrap_remote(self, args: list[str], upstream: int) -> tuple[str, str]:
        tail = args[upstream + 2 :]
        if upstream + 1 >= len(args) or tail[::2] != ["--header"] * (len(tail) // 2) or len(tail) % 2:
            raise _LeftAloneError("left as is: its arguments after --upstream are not ones unwrap reads back")
        url = args[upstream + 1]
        key = self.client.url_keys[0] if self.client.url_keys else "url"
        if self.client.key == "gemini":
            key = "url" if "type" in self.data else "httpUrl"
        transport = _transport(url)
        routes = self.client.type_routes and "type" in self.data
        remote = edit.Remote(key, self.client.headers_key, self.syntax.literal(self.client.type_names[transport]))
        back = edit.Remote(key, self.client.headers_key, remote.type_token if routes else None)
        entry = self.syntax.entry(self.text)
        command = entry.pair("command")
        assert command is not None
        items = entry.pair("args")
        prefix = [self.text[command.value.start : command.value.end]]
        if items is not None:
            prefix += [self.text[item.start : item.end] for item in items.value.items[:upstream]]
        stdio = self.syntax.literal("stdio") if routes else None

        def rewrap(candidate: str) -> str:
            return edit.wrap_remote(self.syntax, candidate, prefix, remote, stdio)

        new = edit.unwrap_remote(self.syntax, self.text, upstream, back, rewrap)
        expected = {k: v for k, v in self.local.items() if k not in ("command", "args")} | {key: url}
        if tail:
            pairs = [header.partition(":") for header in tail[1::2]]
            expected[self.client.headers_key] = {name: value.removeprefix(" ") for name, _, value in pairs}
        if routes:
            expected["type"] = self.client.type_names[transport]
        self._reads_as(new, expected)
        return new, "unwrapped: remote, reached directly again"

    def _reads_as(self, new: str, expected: Mapping[str, Any]) -> None:
        """Leaves the entry alone unless ``new`` reads as ``expected``, with or without an empty ``args``/headers."""
        reads = self._read(new)
        loose = {key: value for key, value in reads.items() if value not in ([], {}) or key in expected}
        if loose != dict(expected):
            raise _LeftAloneError("left as is: unwrapping it would not read back as intended (was it edited by hand?)")


def _transport(url: str) -> Literal["http", "sse"]:
    """The guard's reading of ``--upstream``: SSE when the path ends in ``/sse``."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "http"


def _program(command: str) -> str:
    """A command's program name, for the report (never its arguments, which may hold secrets)."""
    return re.split(r"[/\\]", command)[-1] or command
