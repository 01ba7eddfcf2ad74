"""Wrap and unwrap one entry's text, by edits that unwrap can undo to the byte.

Wrapping a local server replaces the ``command`` token with the guard's and inserts the
guard's arguments, ``--`` and the original command token (copied as written) at the head
of ``args``. Wrapping a remote server turns its URL member into ``command`` and its headers
member into ``args`` in place, the array laid out as the headers table was. Unwrapping
reverses those edits from what the wrapped entry holds; where an entry could have come
from more than one original (no ``args`` at all, or ``"args": []``), the original is the
one that wraps to exactly this text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mcp_loop_guard.wrap.spans import Node, Pair, indent_before
from mcp_loop_guard.wrap.syntax import Edit, Syntax, apply, newline_of


@dataclass(frozen=True, slots=True)
class Remote:
    """How a remote entry's keys are named and restored."""

    url_key: str
    """The key holding the URL in the original entry."""
    headers_key: str
    type_token: str | None = None
    """The ``type`` value token to write on unwrap (None: leave ``type`` as it is)."""


def _raw(text: str, node: Node) -> str:
    return text[node.start : node.end]


def _member(syntax: Syntax, key: str, value: str, like: Pair, text: str) -> str:
    """A new member spaced as ``like`` (``"key": value`` or ``key = value``)."""
    return f"{syntax.key(key)}{text[like.key_end : like.value.start]}{value}"


def _separator(syntax: Syntax, text: str, array: Node) -> str:
    """The text between two elements of ``array``, comments left out."""
    items = array.items
    if len(items) >= 2:
        gap = text[items[0].end : items[1].start]
        if syntax.strip_comments(gap) != gap:
            return ", "
        if gap.count(",") == 1 and gap.replace(",", "").strip() == "":
            return gap
    lead = syntax.strip_comments(text[array.start + 1 : items[0].start]) if items else ""
    if "\n" in lead and lead.strip() == "":
        start = lead.rfind("\n")
        if lead[start - 1 : start] == "\r":
            start -= 1
        return "," + lead[start:]
    return ", "


def _empty_array_alternative(text: str, args: Pair, tokens: Sequence[str], syntax: Syntax) -> str:
    """A layout for tokens in a formerly empty array that differs from a newly inserted ``args``."""
    indent = indent_before(text, args.key_start)
    close = indent_before(text, len(text) - 1)
    if syntax.name == "JSON" and indent is not None and close is not None and len(indent) > len(close):
        step = indent[len(close) :]
        newline = newline_of(text)
        inner = f",{newline}{indent}{step}".join(tokens)
        return f"[{newline}{indent}{step}{inner}{newline}{indent}]"
    return "[ " + ", ".join(tokens) + " ]"


def wrap_local(syntax: Syntax, text: str, prefix: Sequence[str]) -> str:
    """The entry running behind the guard; ``prefix`` are the guard's tokens, its ``--`` last."""
    entry = syntax.entry(text)
    command = entry.pair("command")
    assert command is not None
    original = _raw(text, command.value)
    tokens = [*prefix[1:], original]
    edits: list[Edit] = [(command.value.start, command.value.end, prefix[0])]
    args = entry.pair("args")
    if args is None:
        edits.append(syntax.add_after(text, command, _member(syntax, "args", f"[{', '.join(tokens)}]", command, text)))
    elif args.value.items:
        separator = _separator(syntax, text, args.value)
        edits.append((args.value.items[0].start, args.value.items[0].start, separator.join(tokens) + separator))
    else:
        inserted = apply(text, [*edits, (args.value.start + 1, args.value.start + 1, ", ".join(tokens))])
        if inserted != wrap_local(syntax, apply(text, [syntax.remove(text, entry, args)]), prefix):
            return inserted
        layout = _empty_array_alternative(text, args, tokens, syntax)
        edits.append((args.value.start, args.value.end, layout))
    return apply(text, edits)


def unwrap_local(syntax: Syntax, text: str, dash: int) -> str:
    """The entry without the guard; ``args[dash]`` is the guard's ``--``."""
    entry = syntax.entry(text)
    command, args = entry.pair("command"), entry.pair("args")
    assert command is not None
    assert args is not None
    items = args.value.items
    prefix = [_raw(text, command.value), *(_raw(text, item) for item in items[: dash + 1])]
    restore = (command.value.start, command.value.end, _raw(text, items[dash + 1]))
    if len(items) > dash + 2:
        return apply(text, [restore, (items[0].start, items[dash + 2].start, "")])
    candidates = [
        apply(text, [restore, syntax.remove(text, entry, args)]),
        apply(text, [restore, (items[0].start, items[dash + 1].end, "")]),
        apply(text, [restore, (args.value.start, args.value.end, "[]")]),
    ]
    return _first_that_wraps_to(text, candidates, lambda candidate: wrap_local(syntax, candidate, prefix), 1)


def _first_that_wraps_to(text: str, candidates: Sequence[str], wrap: Callable[[str], str], fallback: int) -> str:
    """The first candidate original that wraps to exactly ``text``.

    When none does (the user edited the wrapped entry), ``candidates[fallback]``: the
    reading that keeps what the user wrote.
    """
    for candidate in candidates:
        if wrap(candidate) == text:
            return candidate
    return candidates[fallback]


def header_element(syntax: Syntax, text: str, pair: Pair) -> str | None:
    """The ``"Name: value"`` token of one header, from the tokens as written, or None if not expressible."""
    key = syntax.header_key_inner(text, pair)
    value = syntax.string_inner(_raw(text, pair.value)) if pair.value.kind == "string" else None
    if key is None or value is None:
        return None
    return f'"{key}: {value}"'


def wrap_remote(syntax: Syntax, text: str, prefix: Sequence[str], remote: Remote, type_token: str | None) -> str:
    """The remote entry as a local one running the guard with ``--upstream`` and ``--header``.

    ``prefix`` are the guard's tokens (command first); ``type_token`` replaces ``type``'s value.
    An empty headers table stays as it is (an ``args`` written in its place could not be told
    from one added after the URL).

    Raises:
        ValueError: a header cannot be written as a ``--header`` argument.
    """
    entry = syntax.entry(text)
    url = entry.pair(remote.url_key)
    assert url is not None
    tokens = [*prefix[1:], syntax.literal("--upstream"), _raw(text, url.value)]
    edits: list[Edit] = [
        (url.key_start, url.key_end, syntax.key("command")),
        (url.value.start, url.value.end, prefix[0]),
    ]
    headers = entry.pair(remote.headers_key)
    if headers is not None and headers.value.pairs:
        table = headers.value
        for pair in table.pairs:
            element = header_element(syntax, text, pair)
            if element is None:
                raise ValueError(f"{remote.headers_key}.{pair.key} is not written as a plain string")
            tokens += [syntax.literal("--header"), element]
        open_, separator, close = _layout(syntax, text, table, [pair.key_start for pair in table.pairs])
        edits += [
            (headers.key_start, headers.key_end, syntax.key("args")),
            (table.start, table.end, "[" + open_ + separator.join(tokens) + close + "]"),
        ]
    else:
        edits.append(syntax.add_after(text, url, _member(syntax, "args", f"[{', '.join(tokens)}]", url, text)))
    kind = entry.pair("type")
    if kind is not None and type_token is not None:
        edits.append((kind.value.start, kind.value.end, type_token))
    return apply(text, edits)


def _layout(syntax: Syntax, text: str, node: Node, starts: Sequence[int]) -> tuple[str, str, str]:
    """The text after the opening bracket, between members, and before the closing one."""
    ends = [item.end for item in node.items] or [pair.value.end for pair in node.pairs]
    if not starts:
        return "", ", ", text[node.start + 1 : node.end - 1]
    open_ = text[node.start + 1 : starts[0]]
    close = text[ends[-1] : node.end - 1]
    if len(starts) >= 2:
        separator = text[ends[0] : starts[1]]
    elif "\n" in open_:
        separator = "," + open_
    else:
        separator = ", "
    return open_, separator, close


def unwrap_remote(syntax: Syntax, text: str, upstream: int, remote: Remote, rewrap: Callable[[str], str]) -> str:
    """The remote entry back from its wrapped form; ``args[upstream]`` is ``--upstream``."""
    entry = syntax.entry(text)
    command, args = entry.pair("command"), entry.pair("args")
    assert command is not None
    assert args is not None
    items = args.value.items
    edits: list[Edit] = [
        (command.key_start, command.key_end, syntax.key(remote.url_key)),
        (command.value.start, command.value.end, _raw(text, items[upstream + 1])),
    ]
    kind = entry.pair("type")
    if kind is not None and remote.type_token is not None:
        edits.append((kind.value.start, kind.value.end, remote.type_token))
    headers = [_raw(text, item) for item in items[upstream + 3 :: 2]]
    if headers:
        open_, separator, close = _layout(syntax, text, args.value, [item.start for item in items])
        pairs = []
        for element in headers:
            name, _, value = element[1:-1].partition(":")
            pairs.append(syntax.header_pair(name, value.removeprefix(" "), command, text))
        table = "{" + open_ + separator.join(pairs) + close + "}"
        return apply(text, [*edits, (args.key_start, args.key_end, syntax.key(remote.headers_key)),
                            (args.value.start, args.value.end, table)])  # fmt: skip
    inner = text[items[-1].end : args.value.end - 1]
    empty = [
        (args.key_start, args.key_end, syntax.key(remote.headers_key)),
        (args.value.start, args.value.end, "{" + inner + "}"),
    ]
    candidates = [apply(text, [*edits, syntax.remove(text, entry, args)]), apply(text, [*edits, *empty])]
    return _first_that_wraps_to(text, candidates, rewrap, 0)
