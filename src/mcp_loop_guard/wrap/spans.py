"""Values of a config file with where each one sits in its text, for JSON(C) and TOML alike.

Edits replace only the spans of the entries they change, so everything else in the
file (comments, key order, spacing) stays byte for byte as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["object", "array", "string", "number", "bool", "null", "other"]


@dataclass(frozen=True, slots=True)
class Node:
    """One value: its kind, its span ``text[start:end]`` and, for containers, what it holds."""

    kind: Kind
    start: int
    end: int
    value: object = None
    """The decoded value of a scalar (a ``str`` for strings)."""
    items: tuple[Node, ...] = ()
    """An array's elements."""
    pairs: tuple[Pair, ...] = field(default=())
    """An object's (or inline table's) members, in file order."""

    def pair(self, key: str) -> Pair | None:
        """The last member named ``key`` (the one a client uses), or None."""
        found = None
        for pair in self.pairs:
            if pair.key == key:
                found = pair
        return found


@dataclass(frozen=True, slots=True)
class Pair:
    """One member: ``key`` (its token at ``key_start:key_end``) and its value."""

    key: str
    key_start: int
    key_end: int
    value: Node


class TextSyntaxError(ValueError):
    """The text is not valid in its syntax: what is wrong and where (1-based line and column)."""

    def __init__(self, text: str, at: int, what: str) -> None:
        """Locates ``at`` in ``text`` for the message."""
        self.line = text.count("\n", 0, at) + 1
        self.column = at - (text.rfind("\n", 0, at) + 1) + 1
        self.what = what
        super().__init__(f"line {self.line}, column {self.column}: {what}")


def plain(node: Node) -> object:
    """The node as Python data (objects as dicts, the last of duplicate keys winning)."""
    if node.kind == "object":
        return {pair.key: plain(pair.value) for pair in node.pairs}
    if node.kind == "array":
        return [plain(item) for item in node.items]
    return node.value


def line_start(text: str, at: int) -> int:
    """Where the line holding ``at`` begins."""
    return text.rfind("\n", 0, at) + 1


def indent_before(text: str, at: int) -> str | None:
    """The whitespace from the start of the line up to ``at``, or None when other text precedes it."""
    lead = text[line_start(text, at) : at]
    return lead if lead.strip() == "" else None
