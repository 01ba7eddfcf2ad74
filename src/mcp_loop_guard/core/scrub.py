"""Scrubbing: what is left out of a result before it is fingerprinted, when an operator asks.

A status that never changes but carries a fresh ``fetched_at`` or request id in every answer
makes every result look new, and hides a loop. Scrubbing replaces such volatile parts with a
placeholder before hashing (never in what the model sees). It is opt-in: a clock or a job's
``updated_at`` is legitimate polling.

Two kinds of rule: named presets (regular expressions over every string the model sees) and
keys or JSON paths dropped from ``structuredContent`` and from text items that hold JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

__all__ = ["PRESETS", "ScrubRules", "dropper", "parse_path"]

_ISO = (
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2}))?"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{1,2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}(?: GMT| [+-]\d{4})?"
    r"|\b\d{1,2}:\d{2}:\d{2}(?:\.\d+)?\b"
    r"|\b1[5-9]\d{8}(?:\d{3})?(?:\.\d+)?\b"
)
PRESETS: Final[Mapping[str, str]] = {
    "timestamps": _ISO,
    "uuids": r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    "hexids": r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{16,}\b",
    "tokens": r"\b[a-z]{2,10}_[0-9A-Za-z]{12,}\b|\b[0-9A-HJKMNP-TV-Z]{26}\b",
    "durations": r"\b\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds|milliseconds|m|min|minutes)\b",
}
"""Named volatile patterns: ISO 8601 / RFC 1123 times, clock times and Unix epochs; UUIDs; long hex
ids (request and trace ids, hashes); prefixed random tokens (``msg_01H...``) and ULIDs; durations."""

_PLACEHOLDER: Final = "\x00"


@dataclass(frozen=True, slots=True)
class ScrubRules:
    """Presets and keys/paths to scrub; empty rules change nothing and cost nothing."""

    presets: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    """Key names dropped at any depth (``fetched_at``) or JSON paths (``$.meta.requestId``, ``$..id``)."""

    def __post_init__(self) -> None:
        """Reject unknown presets and malformed paths early, with what is accepted.

        Raises:
            ValueError: an unknown preset name or a path that cannot be parsed.
        """
        unknown = [name for name in self.presets if name not in PRESETS]
        if unknown:
            msg = f"unknown scrub preset {unknown[0]!r} (known: {', '.join(PRESETS)})"
            raise ValueError(msg)
        for key in self.keys:
            if key.startswith("$"):
                parse_path(key)

    def __bool__(self) -> bool:
        """True when there is anything to scrub."""
        return bool(self.presets or self.keys)

    def apply(self, result: Mapping[str, Any]) -> Mapping[str, Any]:
        """The result as fingerprinted: volatile parts replaced, listed keys dropped. The input is not changed."""
        if not self:
            return result
        text = _text_scrubber(self.presets)
        drop = dropper(self.keys)
        scrubbed: dict[str, Any] = dict(result)
        content = result.get("content")
        if isinstance(content, list):
            scrubbed["content"] = [_item(item, text, drop) for item in content]
        structured = result.get("structuredContent")
        if structured is not None:
            scrubbed["structuredContent"] = _strings(drop(structured), text)
        return scrubbed

    def differs_only_in_volatile(self, first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
        """True when the two results differ but are equal once scrubbed (used to suggest a setting)."""
        return first != second and self.apply(first) == self.apply(second)


Transform = Callable[[Any], Any]


def _item(item: object, text: Callable[[str], str], drop: Transform) -> object:
    """One content item with its text (and JSON held in it) scrubbed."""
    if not isinstance(item, Mapping):
        return item
    scrubbed = dict(item)
    value = item.get("text")
    if isinstance(value, str):
        scrubbed["text"] = text(_drop_in_json_text(value, drop))
    resource = item.get("resource")
    if isinstance(resource, Mapping) and isinstance(resource.get("text"), str):
        scrubbed["resource"] = {**resource, "text": text(_drop_in_json_text(resource["text"], drop))}
    return scrubbed


def _drop_in_json_text(value: str, drop: Transform) -> str:
    """Text that holds a JSON object or array, with the listed keys dropped; other text as it is."""
    stripped = value.lstrip()
    if drop is _keep or not stripped.startswith(("{", "[")):
        return value
    try:
        document = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return json.dumps(drop(document), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _strings(value: Any, text: Callable[[str], str]) -> Any:
    """Every string inside a JSON value scrubbed (iteratively, so depth is no limit)."""
    if isinstance(value, str):
        return text(value)
    if not isinstance(value, Mapping | list):
        return value
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        node = parent[key]
        if isinstance(node, str):
            parent[key] = text(node)
        elif isinstance(node, Mapping):
            copy = dict(node)
            parent[key] = copy
            stack.extend((copy, k) for k in copy)
        elif isinstance(node, list):
            items = list(node)
            parent[key] = items
            stack.extend((items, i) for i in range(len(items)))
    return root[0]


def _keep(value: Any) -> Any:
    return value


@cache
def _text_scrubber(presets: tuple[str, ...]) -> Callable[[str], str]:
    """One compiled alternation of the chosen presets."""
    if not presets:
        return str
    pattern = re.compile("|".join(f"(?:{PRESETS[name]})" for name in presets))
    return lambda text: pattern.sub(_PLACEHOLDER, text)


@cache
def dropper(keys: tuple[str, ...]) -> Transform:
    """A function dropping the listed keys and paths from a JSON value (a new value; the input stays)."""
    if not keys:
        return _keep
    names = frozenset(key for key in keys if not key.startswith("$"))
    paths = [parse_path(key) for key in keys if key.startswith("$")]

    def drop(value: Any) -> Any:
        copied = _without_names(value, names) if names else _deep_copy(value)
        for path in paths:
            _drop_path(copied, path)
        return copied

    return drop


def _deep_copy(value: Any) -> Any:
    return _without_names(value, frozenset())


def _without_names(value: Any, names: frozenset[str]) -> Any:
    """A copy of a JSON value without members named in ``names`` at any depth."""
    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        parent, key = stack.pop()
        node = parent[key]
        if isinstance(node, Mapping):
            copy = {k: v for k, v in node.items() if k not in names}
            parent[key] = copy
            stack.extend((copy, k) for k in copy)
        elif isinstance(node, list):
            items = list(node)
            parent[key] = items
            stack.extend((items, i) for i in range(len(items)))
    return root[0]


Step = tuple[str, str | int | None]
"""("key", name) | ("index", n) | ("all", None) | ("deep", name)."""

_STEP = re.compile(r"\.\.([A-Za-z_][\w-]*)|\.([A-Za-z_][\w-]*)|\[(\d+)\]|\[\*\]|\[['\"]([^'\"]+)['\"]\]")


@cache
def parse_path(path: str) -> tuple[Step, ...]:
    """``$.a.b[0]``, ``$.items[*].id``, ``$..fetched_at``, ``$['odd key']`` into steps.

    Raises:
        ValueError: the path is not of that form.
    """
    if not path.startswith("$"):
        msg = f"a JSON path starts with $: {path!r}"
        raise ValueError(msg)
    steps: list[Step] = []
    position = 1
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None:
            msg = f"cannot read JSON path {path!r} at position {position} (use $.key, $.list[0], $.list[*], $..key)"
            raise ValueError(msg)
        deep, key, index, quoted = match.groups()
        if deep is not None:
            steps.append(("deep", deep))
        elif key is not None or quoted is not None:
            steps.append(("key", key if key is not None else quoted))
        elif index is not None:
            steps.append(("index", int(index)))
        else:
            steps.append(("all", None))
        position = match.end()
    if not steps:
        msg = f"the JSON path {path!r} names nothing to drop"
        raise ValueError(msg)
    return tuple(steps)


def _drop_path(value: Any, path: tuple[Step, ...]) -> None:
    """Remove what ``path`` points at from ``value`` (a fresh copy, so it is changed in place)."""
    nodes: list[Any] = [value]
    for kind, arg in path[:-1]:
        nodes = [child for node in nodes for child in _children(node, kind, arg)]
    kind, arg = path[-1]
    for node in nodes:
        if kind == "deep":
            for found in _descendants(node):
                if isinstance(found, dict):
                    found.pop(arg, None)
        elif kind == "key" and isinstance(node, dict):
            node.pop(arg, None)
        elif kind == "index" and isinstance(node, list) and isinstance(arg, int) and arg < len(node):
            node[arg] = _PLACEHOLDER
        elif kind == "all" and isinstance(node, list):
            node[:] = [_PLACEHOLDER] * len(node)


def _children(node: Any, kind: str, arg: str | int | None) -> list[Any]:
    if kind == "key" and isinstance(node, dict) and arg in node:
        return [node[arg]]
    if kind == "index" and isinstance(node, list) and isinstance(arg, int) and arg < len(node):
        return [node[arg]]
    if kind == "all":
        return list(node.values()) if isinstance(node, dict) else list(node) if isinstance(node, list) else []
    if kind == "deep":
        return [found[arg] for found in _descendants(node) if isinstance(found, dict) and arg in found]
    return []


def _descendants(node: Any) -> list[Any]:
    """``node`` and every container inside it."""
    found: list[Any] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            found.append(current)
            stack.extend(current.values())
        elif isinstance(current, list):
            found.append(current)
            stack.extend(current)
    return found
