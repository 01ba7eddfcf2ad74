"""Finding the server entries of a config file, and where each one is written.

JSON files hold servers in maps like ``mcpServers`` (for Claude Code also under every
``projects.<path>``); Codex's TOML holds them as ``[mcp_servers.NAME]`` tables.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_loop_guard.userfile import MAX_DEPTH, line_of, too_deep
from mcp_loop_guard.wrap import jsonc, tomlscan
from mcp_loop_guard.wrap.clients import Client
from mcp_loop_guard.wrap.spans import Node, TextSyntaxError, plain


class RefusedError(Exception):
    """The file is not what wrap expects: the key path (or "") and what is wrong."""

    def __init__(self, key: str, problem: str) -> None:
        """``key`` is a dotted path into the file, "" for the whole file."""
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}" if key else problem)


@dataclass(frozen=True, slots=True)
class Entry:
    """One server entry: its section, name, span in the text (-1 when not editable) and values."""

    section: str
    name: str
    start: int
    end: int
    data: Mapping[str, Any]


UNSUPPORTED_TOML = (
    "left as is: written in part outside its [mcp_servers.NAME] table (an inline table, dotted keys or a "
    "sub-table); wrap edits the keys inside that table"
)


def json_entries(text: str, client: Client) -> list[Entry]:
    """Every entry of every server section of a JSON file.

    Raises:
        RefusedError: not JSON, no server section, or a section or entry of the wrong type.
    """
    try:
        top = jsonc.parse(text)
    except TextSyntaxError as problem:
        raise RefusedError("", f"not JSON (comments and trailing commas allowed): {problem}") from None
    if top.kind != "object":
        raise RefusedError("", "expected a JSON object at the top")
    found: list[tuple[str, Node]] = []
    for pattern in client.sections:
        found += _sections(top, pattern.split("."), "")
    if not found:
        wanted = " or ".join(f'"{pattern}"' for pattern in client.sections)
        raise RefusedError("", f"no server section ({wanted}): nothing to wrap")
    entries: list[Entry] = []
    for section, node in found:
        if node.kind != "object":
            raise RefusedError(section, "expected an object mapping server names to servers")
        seen: set[str] = set()
        for pair in node.pairs:
            if pair.key in seen:
                raise RefusedError(f"{section}.{pair.key}", "given twice")
            seen.add(pair.key)
            if pair.value.kind != "object":
                raise RefusedError(f"{section}.{pair.key}", "expected an object (a server entry)")
            data = plain(pair.value)
            assert isinstance(data, dict)
            entries.append(Entry(section, pair.key, pair.value.start, pair.value.end, data))
    return entries


def _sections(node: Node, parts: list[str], at: str) -> list[tuple[str, Node]]:
    """The nodes at a dotted pattern, ``*`` matching every key of an object."""
    if not parts:
        return [(at, node)]
    if node.kind != "object":
        return []
    head, rest = parts[0], parts[1:]
    pairs = node.pairs if head == "*" else [pair for pair in node.pairs if pair.key == head][-1:]
    found: list[tuple[str, Node]] = []
    for pair in pairs:
        found += _sections(pair.value, rest, f"{at}.{pair.key}" if at else pair.key)
    return found


def toml_entries(text: str) -> list[Entry]:
    """Every ``mcp_servers`` entry of a TOML file.

    Raises:
        RefusedError: not TOML, no server section, or an entry of the wrong type.
    """
    if (at := too_deep(text, "toml")) is not None:
        raise RefusedError("", f"line {line_of(text, at)}: nested deeper than {MAX_DEPTH} levels")
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RefusedError("", f"not TOML: {error}") from None
    except ValueError:  # the only other one: an integer longer than Python converts
        raise RefusedError("", f"not TOML: a number of more than {sys.get_int_max_str_digits()} digits") from None
    servers = document.get("mcp_servers")
    if servers is None:
        raise RefusedError("", "no server section ([mcp_servers.NAME] tables): nothing to wrap")
    if not isinstance(servers, dict):
        raise RefusedError("mcp_servers", "expected a table of servers")
    spans = {
        section.path[1]: section
        for section in tomlscan.sections(text)
        if len(section.path) == 2 and section.path[0] == "mcp_servers" and not section.array
    }
    entries: list[Entry] = []
    for name, data in servers.items():
        if not isinstance(data, dict):
            raise RefusedError(f"mcp_servers.{name}", "expected a table (a server entry)")
        section = spans.get(name)
        keys = {key for key, _ in section.pairs if len(key) == 1} if section else set()
        own = {"command", "args", "url", "http_headers"} & data.keys()
        if section is None or any((key,) not in keys for key in own):
            entries.append(Entry("mcp_servers", name, -1, -1, data))
        else:
            entries.append(Entry("mcp_servers", name, section.start, section.body_end, data))
    return entries
