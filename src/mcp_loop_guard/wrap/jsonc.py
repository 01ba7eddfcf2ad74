"""JSON with comments (``//``, ``/* */``) and trailing commas, as VS Code and Claude Code accept it.

The parser keeps where every value and key sits, so an edit can replace one entry's
text and leave the rest of the file as the user wrote it. It refuses nesting deeper than
``MAX_DEPTH`` before its recursion could exhaust the stack, and its string pattern is
possessive, so a string of megabytes is matched without backtracking state.
"""

from __future__ import annotations

import json
import re
import sys

from mcp_loop_guard.userfile import MAX_DEPTH
from mcp_loop_guard.wrap.spans import Node, Pair, TextSyntaxError

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]++|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*+"')
_LITERALS = {"true": ("bool", True), "false": ("bool", False), "null": ("null", None)}


def parse(text: str) -> Node:
    """The document's top value with its spans.

    Raises:
        TextSyntaxError: the text is not JSON (comments and trailing commas allowed).
    """
    parser = _Parser(text)
    node = parser.value(parser.skip(0))
    end = parser.skip(node.end)
    if end != len(text):
        raise TextSyntaxError(text, end, "unexpected text after the top value")
    return node


def skip_blank(text: str, at: int) -> int:
    """The first position from ``at`` that is neither whitespace nor a comment."""
    return _Parser(text).skip(at)


def strip_comments(gap: str) -> str:
    """``gap`` (text between two tokens) with its comments removed, whitespace and commas kept."""
    parts: list[str] = []
    at = 0
    while at < len(gap):
        if gap.startswith("//", at):
            end = gap.find("\n", at)
            at = len(gap) if end < 0 else end
        elif gap.startswith("/*", at):
            end = gap.find("*/", at + 2)
            at = len(gap) if end < 0 else end + 2
        else:
            parts.append(gap[at])
            at += 1
    return "".join(parts)


def literal(value: str) -> str:
    """``value`` as a JSON string token (non-ASCII kept as is, as editors write it)."""
    return json.dumps(value, ensure_ascii=False)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def skip(self, at: int) -> int:
        text = self.text
        while at < len(text):
            char = text[at]
            if char in " \t\r\n":
                at += 1
            elif text.startswith("//", at):
                end = text.find("\n", at)
                at = len(text) if end < 0 else end
            elif text.startswith("/*", at):
                end = text.find("*/", at + 2)
                if end < 0:
                    raise TextSyntaxError(text, at, "a /* comment is never closed")
                at = end + 2
            else:
                break
        return at

    def value(self, at: int) -> Node:
        text = self.text
        if at >= len(text):
            raise TextSyntaxError(text, at, "a value is missing at the end of the text")
        char = text[at]
        if char == "{":
            return self.object(at)
        if char == "[":
            return self.array(at)
        if char == '"':
            return self.string(at)
        if match := _NUMBER.match(text, at):
            try:
                return Node("number", at, match.end(), json.loads(match.group()))
            except ValueError:  # an integer longer than Python converts
                digits = sys.get_int_max_str_digits()
                raise TextSyntaxError(text, at, f"a number of more than {digits} digits") from None
        for word, (kind, value) in _LITERALS.items():
            if text.startswith(word, at):
                return Node(kind, at, at + len(word), value)  # type: ignore[arg-type]
        raise TextSyntaxError(text, at, f"unexpected character {char!r} where a value belongs")

    def string(self, at: int) -> Node:
        match = _STRING.match(self.text, at)
        if match is None:
            raise TextSyntaxError(self.text, at, "a string is not closed or holds an invalid escape")
        return Node("string", at, match.end(), json.loads(match.group()))

    def array(self, start: int) -> Node:
        self._deeper(start)
        items: list[Node] = []
        at = self.skip(start + 1)
        while self.text[at : at + 1] != "]":
            item = self.value(at)
            items.append(item)
            at = self._after_item(item.end, "]")
        self.depth -= 1
        return Node("array", start, at + 1, items=tuple(items))

    def object(self, start: int) -> Node:
        self._deeper(start)
        text = self.text
        pairs: list[Pair] = []
        at = self.skip(start + 1)
        while text[at : at + 1] != "}":
            if text[at : at + 1] != '"':
                raise TextSyntaxError(text, at, "expected a quoted key or }")
            key = self.string(at)
            at = self.skip(key.end)
            if text[at : at + 1] != ":":
                raise TextSyntaxError(text, at, "expected : after the key")
            value = self.value(self.skip(at + 1))
            pairs.append(Pair(str(key.value), key.start, key.end, value))
            at = self._after_item(value.end, "}")
        self.depth -= 1
        return Node("object", start, at + 1, pairs=tuple(pairs))

    def _deeper(self, at: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TextSyntaxError(self.text, at, f"nested deeper than {MAX_DEPTH} levels")

    def _after_item(self, end: int, close: str) -> int:
        """Past the comma after an item (a trailing one allowed), at the next item or ``close``."""
        at = self.skip(end)
        char = self.text[at : at + 1]
        if char == ",":
            return self.skip(at + 1)
        if char == close:
            return at
        raise TextSyntaxError(self.text, at, f"expected , or {close}")
