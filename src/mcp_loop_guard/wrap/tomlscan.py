"""Where things sit in a TOML file (Codex's ``config.toml``), for edits that leave the rest untouched.

``tomllib`` checks the document and decodes values; this scanner only finds spans: table
headers, key/value pairs, array elements and inline-table members. It relies on the text
having passed ``tomllib`` first.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

from mcp_loop_guard.wrap.spans import Node, Pair, TextSyntaxError

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_STRINGS = {
    # Possessive, so a string of megabytes is matched in one pass without backtracking state.
    ('"', False): re.compile(r'"(?:[^"\\\n]++|\\[\s\S])*+"'),
    ("'", False): re.compile(r"'[^'\n]*+'"),
    ('"', True): re.compile(r'"""(?:[^"\\]++|\\[\s\S]|"(?!""))*+"{3,}'),
    ("'", True): re.compile(r"'''(?:[^']++|'(?!''))*+'{3,}"),
}
"""A string token of each kind (quote, multi-line), in a text ``tomllib`` accepted."""
_SCALAR = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}[^\s,\]}#]*|[^\s,\]}#]+")


@dataclass(frozen=True, slots=True)
class Section:
    """A ``[table]`` header (or the root, ``path == ()``) and the pairs written under it."""

    path: tuple[str, ...]
    array: bool
    """A ``[[table]]`` header."""
    start: int
    """Where the header starts (0 for the root)."""
    body_end: int
    """Where the next header starts, or the end of the text."""
    pairs: tuple[tuple[tuple[str, ...], Pair], ...]
    """Each pair with its full dotted key path relative to the section."""


def sections(text: str) -> list[Section]:
    """The document's sections in order.

    Raises:
        TextSyntaxError: the text is not TOML this scanner understands.
    """
    return _Scanner(text).document()


def decode_string(raw: str) -> str:
    """The value of one TOML string token (any of the four kinds).

    Tokens without escapes are cut out as they are: ``tomllib`` reads strings a character
    at a time, seconds for a string of megabytes.
    """
    if raw.startswith("'''"):
        return raw[3:-3].removeprefix("\r\n").removeprefix("\n")
    if raw.startswith("'") or (raw.startswith('"') and not raw.startswith('"""') and "\\" not in raw):
        return raw[1:-1]
    value = tomllib.loads(f"v = {raw}")["v"]
    if not isinstance(value, str):  # pragma: no cover - callers pass string tokens only
        raise TypeError(raw)
    return value


def literal(value: str) -> str:
    """``value`` as a TOML basic string token."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    out = []
    for char in escaped:
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(char, f"\\u{code:04X}"))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def key_text(key: str) -> str:
    """``key`` as TOML writes it: bare when it can be, quoted otherwise."""
    return key if _BARE.fullmatch(key) else literal(key)


def skip_blank(text: str, at: int, *, newlines: bool = True) -> int:
    """The first position from ``at`` past whitespace and comments (and newlines, unless told not to)."""
    return _Scanner(text).skip(at, newlines=newlines)


def strip_comments(gap: str) -> str:
    """``gap`` with its ``#`` comments removed."""
    return re.sub(r"#[^\n]*", "", gap)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, at: int, what: str) -> TextSyntaxError:
        return TextSyntaxError(self.text, at, what)

    def skip(self, at: int, *, newlines: bool = True) -> int:
        text = self.text
        while at < len(text):
            char = text[at]
            if char in " \t" or (newlines and char in "\r\n"):
                at += 1
            elif char == "#":
                end = text.find("\n", at)
                at = len(text) if end < 0 else (end if not newlines else end + 1)
            else:
                break
        return at

    def document(self) -> list[Section]:
        text = self.text
        found: list[Section] = []
        path: tuple[str, ...] = ()
        array = False
        start = 0
        pairs: list[tuple[tuple[str, ...], Pair]] = []
        at = self.skip(0)
        while at < len(text):
            if text[at] == "[":
                found.append(Section(path, array, start, at, tuple(pairs)))
                start, pairs = at, []
                array = text.startswith("[[", at)
                path, _, at = self.key_path(self.skip(at + (2 if array else 1), newlines=False))
                close = "]]" if array else "]"
                if not text.startswith(close, at):
                    raise self.fail(at, f"expected {close} to close the table header")
                at += len(close)
            else:
                key, pair, at = self.key_value(at)
                pairs.append((key, pair))
            at = self.end_of_line(at)
        found.append(Section(path, array, start, len(text), tuple(pairs)))
        return found

    def end_of_line(self, at: int) -> int:
        at = self.skip(at, newlines=False)
        if at < len(self.text) and self.text[at] not in "\r\n":
            raise self.fail(at, "expected the end of the line")
        return self.skip(at)

    def key_path(self, at: int) -> tuple[tuple[str, ...], int, int]:
        """The dotted key at ``at``: its parts, where its last part ends, and the position after the spaces."""
        parts: list[str] = []
        while True:
            part, at = self.key_part(at)
            parts.append(part)
            after = self.skip(at, newlines=False)
            if self.text[after : after + 1] != ".":
                return tuple(parts), at, after
            at = self.skip(after + 1, newlines=False)

    def key_part(self, at: int) -> tuple[str, int]:
        text = self.text
        if text[at : at + 1] in ('"', "'"):
            node = self.string(at)
            return str(node.value), node.end
        match = _BARE.match(text, at)
        if match is None:
            raise self.fail(at, "expected a key")
        return match.group(), match.end()

    def key_value(self, at: int) -> tuple[tuple[str, ...], Pair, int]:
        key, key_end, after = self.key_path(at)
        if self.text[after : after + 1] != "=":
            raise self.fail(after, "expected = after the key")
        value = self.value(self.skip(after + 1, newlines=False))
        return key, Pair(".".join(key), at, key_end, value), value.end

    def value(self, at: int) -> Node:
        char = self.text[at : at + 1]
        if char in ('"', "'"):
            return self.string(at)
        if char == "[":
            return self.array(at)
        if char == "{":
            return self.table(at)
        match = _SCALAR.match(self.text, at)
        if match is None:
            raise self.fail(at, "expected a value")
        return Node("other", at, match.end(), match.group())

    def string(self, at: int) -> Node:
        text = self.text
        quote = text[at]
        multi = text.startswith(quote * 3, at)
        match = _STRINGS[quote, multi].match(text, at)
        if match is None:
            what = "a multi-line string is never closed" if multi else "a string is not closed on its line"
            raise self.fail(at, what)
        return Node("string", at, match.end(), decode_string(match.group()))

    def array(self, start: int) -> Node:
        items: list[Node] = []
        at = self.skip(start + 1)
        while self.text[at : at + 1] != "]":
            item = self.value(at)
            items.append(item)
            at = self.skip(item.end)
            if self.text[at : at + 1] == ",":
                at = self.skip(at + 1)
            elif self.text[at : at + 1] != "]":
                raise self.fail(at, "expected , or ] in an array")
        return Node("array", start, at + 1, items=tuple(items))

    def table(self, start: int) -> Node:
        pairs: list[Pair] = []
        at = self.skip(start + 1)
        while self.text[at : at + 1] != "}":
            _, pair, end = self.key_value(at)
            pairs.append(pair)
            at = self.skip(end)
            if self.text[at : at + 1] == ",":
                at = self.skip(at + 1)
            elif self.text[at : at + 1] != "}":
                raise self.fail(at, "expected , or } in an inline table")
        return Node("object", start, at + 1, pairs=tuple(pairs))
