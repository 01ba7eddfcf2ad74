"""The two syntaxes an entry is written in: a JSON object, or a TOML ``[table]`` section.

Both give the same view (an entry's members with their spans) and the few edits that
wrapping needs: write a member after another, remove one, and render tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from mcp_loop_guard.wrap import jsonc, tomlscan
from mcp_loop_guard.wrap.spans import Node, Pair, indent_before, line_start

Edit = tuple[int, int, str]
"""Replace ``text[start:end]`` with the string."""


def apply(text: str, edits: list[Edit]) -> str:
    """``text`` with non-overlapping edits applied."""
    for start, end, new in sorted(edits, key=lambda edit: edit[0], reverse=True):
        text = text[:start] + new + text[end:]
    return text


class Syntax(Protocol):
    """What the entry edits need to know of a syntax."""

    @property
    def name(self) -> str:
        """``JSON`` or ``TOML``."""

    def entry(self, text: str) -> Node:
        """The entry (an object of members) written in ``text``."""

    def literal(self, value: str) -> str:
        """A string token."""

    def key(self, key: str) -> str:
        """A member key token."""

    def string_inner(self, raw: str) -> str | None:
        """A string token's content as it would sit between basic double quotes, or None."""

    def strip_comments(self, gap: str) -> str:
        """Text between tokens without its comments."""

    def add_after(self, text: str, pair: Pair, member: str) -> Edit:
        """Writes ``member`` (key, separator and value) as the member after ``pair``."""

    def remove(self, text: str, entry: Node, pair: Pair) -> Edit:
        """Removes ``pair`` from ``entry``."""

    def header_pair(self, key_inner: str, value_inner: str, like: Pair, text: str) -> str:
        """One member of a headers table, from the contents of its key and value strings."""

    def header_key_inner(self, text: str, pair: Pair) -> str | None:
        """A headers member's key as it would sit between basic double quotes, or None."""


def newline_of(text: str) -> str:
    """The line ending the text uses."""
    return "\r\n" if "\r\n" in text else "\n"


@dataclass(frozen=True, slots=True)
class JsonSyntax:
    """An entry is a JSON object; members are separated by commas."""

    name: str = "JSON"

    def entry(self, text: str) -> Node:
        """The object ``text`` holds."""
        return jsonc.parse(text)

    def literal(self, value: str) -> str:
        """A JSON string token."""
        return jsonc.literal(value)

    def key(self, key: str) -> str:
        """A JSON key: always a string token."""
        return jsonc.literal(key)

    def string_inner(self, raw: str) -> str | None:
        """Between the quotes of a JSON string token (its escapes are valid in both syntaxes)."""
        return raw[1:-1]

    def strip_comments(self, gap: str) -> str:
        """Without ``//`` and ``/* */`` comments."""
        return jsonc.strip_comments(gap)

    def add_after(self, text: str, pair: Pair, member: str) -> Edit:
        """After ``pair``'s value: on a line of its own when ``pair`` starts its line, else on the same line."""
        indent = indent_before(text, pair.key_start)
        if indent is not None and line_start(text, pair.key_start) > 0:
            return (pair.value.end, pair.value.end, f",{newline_of(text)}{indent}{member}")
        return (pair.value.end, pair.value.end, f", {member}")

    def remove(self, text: str, entry: Node, pair: Pair) -> Edit:
        """With the separator before it (or after it, for the first member)."""
        index = entry.pairs.index(pair)
        if index > 0:
            return (entry.pairs[index - 1].value.end, pair.value.end, "")
        if len(entry.pairs) > 1:
            return (pair.key_start, entry.pairs[1].key_start, "")
        return (pair.key_start, pair.value.end, "")

    def header_pair(self, key_inner: str, value_inner: str, like: Pair, text: str) -> str:
        """``"Name": "value"``, spaced like ``like``."""
        return f'"{key_inner}"{text[like.key_end : like.value.start]}"{value_inner}"'

    def header_key_inner(self, text: str, pair: Pair) -> str | None:
        """Between the key's quotes."""
        return text[pair.key_start + 1 : pair.key_end - 1]


_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*"')


@dataclass(frozen=True, slots=True)
class TomlSyntax:
    """An entry is a ``[mcp_servers.NAME]`` section; members are lines."""

    name: str = "TOML"

    def entry(self, text: str) -> Node:
        """The first table section of ``text`` (the entry's own header and its lines)."""
        section = tomlscan.sections(text)[1]
        return Node("object", section.start, section.body_end, pairs=tuple(pair for _, pair in section.pairs))

    def literal(self, value: str) -> str:
        """A TOML basic string."""
        return tomlscan.literal(value)

    def key(self, key: str) -> str:
        """Bare when it can be."""
        return tomlscan.key_text(key)

    def string_inner(self, raw: str) -> str | None:
        """A single-line basic string's content as written; a literal string's content escaped."""
        if _BASIC.fullmatch(raw):
            return raw[1:-1]
        if raw.startswith("'") and not raw.startswith("'''"):
            return tomlscan.literal(raw[1:-1])[1:-1]
        return None

    def strip_comments(self, gap: str) -> str:
        """Without ``#`` comments."""
        return tomlscan.strip_comments(gap)

    def add_after(self, text: str, pair: Pair, member: str) -> Edit:
        """A line of its own after ``pair``'s line, indented alike."""
        indent = indent_before(text, pair.key_start) or ""
        end = text.find("\n", pair.value.end)
        if end < 0:
            return (len(text), len(text), f"{newline_of(text)}{indent}{member}")
        return (end + 1, end + 1, f"{indent}{member}{newline_of(text)}")

    def remove(self, text: str, entry: Node, pair: Pair) -> Edit:
        """The whole line (on the last line of a text without a final newline, the line break before it)."""
        start, end = line_start(text, pair.key_start), text.find("\n", pair.value.end)
        if end >= 0:
            return (start, end + 1, "")
        if start > 0:
            start -= 2 if text[start - 2 : start] == "\r\n" else 1
        return (start, len(text), "")

    def header_pair(self, key_inner: str, value_inner: str, like: Pair, text: str) -> str:
        """``"Name" = "value"``."""
        return f'"{key_inner}" = "{value_inner}"'

    def header_key_inner(self, text: str, pair: Pair) -> str | None:
        """A bare key as is, a quoted one between its quotes."""
        raw = text[pair.key_start : pair.key_end]
        if "." in pair.key and not raw.startswith(('"', "'")):
            return None
        return raw if not raw.startswith(('"', "'")) else self.string_inner(raw)


JSON = JsonSyntax()
TOML = TomlSyntax()
