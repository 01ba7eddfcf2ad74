"""Round trips over generated layouts: wrap then unwrap gives every file back byte for byte, whatever its style."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.wrap import jsonc
from mcp_loop_guard.wrap.clients import CLIENTS, GENERIC
from mcp_loop_guard.wrap.plan import rewrite
from mcp_loop_guard.wrap.spans import plain

GUARD = ("/usr/local/bin/mcp-loop-guard",)
texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
words = st.text("abcxyz-_./\\\"' é", min_size=1, max_size=10)


@dataclass(frozen=True)
class Style:
    """How a generated JSON file is laid out."""

    indent: str
    newline: str
    multi_line_entries: bool
    multi_line_arrays: bool
    trailing_commas: bool
    ascii_escapes: bool
    colon: str


styles = st.builds(
    Style,
    indent=st.sampled_from(["  ", "    ", "\t"]),
    newline=st.sampled_from(["\n", "\r\n"]),
    multi_line_entries=st.booleans(),
    multi_line_arrays=st.booleans(),
    trailing_commas=st.booleans(),
    ascii_escapes=st.booleans(),
    colon=st.sampled_from([": ", ":"]),
)


def _token(value: Any, style: Style, depth: int) -> str:  # noqa: PLR0911 - one return per JSON kind
    """A JSON value laid out in the style, at a nesting depth."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=style.ascii_escapes)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    inner = style.indent * (depth + 1)
    outer = style.indent * depth
    comma = "," if style.trailing_commas else ""
    if isinstance(value, list):
        items = [_token(item, style, depth + 1) for item in value]
        if style.multi_line_arrays and items:
            nl = style.newline
            return "[" + nl + ("," + nl).join(inner + item for item in items) + comma + nl + outer + "]"
        return "[" + ", ".join(items) + "]"
    members = [f"{json.dumps(key)}{style.colon}{_token(item, style, depth + 1)}" for key, item in value.items()]
    if style.multi_line_entries and members:
        nl = style.newline
        return "{" + nl + ("," + nl).join(inner + member for member in members) + comma + nl + outer + "}"
    return "{" + ", ".join(members) + "}"


local_entries = st.fixed_dictionaries(
    {"command": words},
    optional={
        "args": st.lists(texts, max_size=3),
        "env": st.dictionaries(st.sampled_from(["A", "B_C"]), texts, max_size=2),
        "disabled": st.booleans(),
        "cwd": words,
    },
)
remote_entries = st.fixed_dictionaries(
    {"url": st.sampled_from(["https://example.com/mcp", "http://127.0.0.1:8080/sse", "https://h/x?a=1&b=2"])},
    optional={
        "headers": st.dictionaries(st.sampled_from(["Authorization", "X-Api-Key", "x-team"]), words, max_size=2),
        "timeout": st.integers(1, 60),
    },
)
names = st.text("abcdefgh-_", min_size=1, max_size=6)
servers = st.dictionaries(names, st.one_of(local_entries, remote_entries), min_size=1, max_size=4)


@given(servers=servers, style=styles, key_order=st.randoms())
def test_json_files_round_trip_in_any_layout(servers: dict[str, dict[str, Any]], style: Style, key_order: Any) -> None:
    """Any mcpServers JSON file, laid out any common way, comes back byte for byte from wrap then unwrap."""
    shuffled = {}
    for name, entry in servers.items():
        keys = list(entry)
        key_order.shuffle(keys)
        shuffled[name] = {key: entry[key] for key in keys}
    text = _token({"mcpServers": shuffled, "other": ["kept"]}, style, 0) + style.newline
    wrapped = rewrite(text, GENERIC, prefix=GUARD, undo=False)
    assert {o.name for o in wrapped.outcomes if o.changed} == set(servers), [o.detail for o in wrapped.outcomes]
    assert rewrite(wrapped.text, GENERIC, prefix=GUARD, undo=False).text == wrapped.text
    assert rewrite(wrapped.text, GENERIC, prefix=(), undo=True).text == text
    read = plain(jsonc.parse(wrapped.text))
    assert isinstance(read, dict)
    for name, entry in servers.items():
        new = read["mcpServers"][name]
        assert new["command"] == GUARD[0]
        if "command" in entry:
            assert new["args"] == ["--", entry["command"], *entry.get("args", [])]
        else:
            headers = [
                flag for key, value in entry.get("headers", {}).items() for flag in ("--header", f"{key}: {value}")
            ]
            assert new["args"] == ["--upstream", entry["url"], *headers]
            assert new.get("headers") == ({} if entry.get("headers") == {} else None)


toml_strings = st.one_of(
    st.builds(lambda text: json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f"), texts),
    st.builds(lambda text: f"'{text}'", st.text('abc xyz/\\"-', max_size=8)),
)


@given(
    tables=st.lists(
        st.tuples(
            names,
            toml_strings,
            st.none() | st.lists(toml_strings, max_size=3),
            st.booleans(),
            st.sampled_from(["", "  # note"]),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda table: table[0],
    ),
    newline=st.sampled_from(["\n", "\r\n"]),
    enabled=st.booleans(),
    final_newline=st.booleans(),
)
def test_codex_toml_round_trips_in_any_layout(
    tables: list[tuple[str, str, list[str] | None, bool, str]], newline: str, enabled: bool, final_newline: bool
) -> None:
    """Codex tables with any string kinds, one- or multi-line args, comments and CRLF come back byte for byte."""
    lines = ['model = "x"', ""]
    for name, command, args, multi, comment in tables:
        lines += [f"[mcp_servers.{name}]", f"command = {command}{comment}"]
        if args is not None:
            body = (
                "[" + newline + "".join(f"  {arg},{newline}" for arg in args) + "]" if multi else f"[{', '.join(args)}]"
            )
            lines.append(f"args = {body}{comment}")
        lines += ["enabled = true", ""] if enabled else [""]
    text = newline.join(lines) if final_newline else newline.join(lines).rstrip("\r\n")
    wrapped = rewrite(text, CLIENTS["codex"], prefix=GUARD, undo=False)
    assert all(o.changed for o in wrapped.outcomes), [o.detail for o in wrapped.outcomes]
    assert rewrite(wrapped.text, CLIENTS["codex"], prefix=GUARD, undo=False).text == wrapped.text
    assert rewrite(wrapped.text, CLIENTS["codex"], prefix=(), undo=True).text == text
    before, after = tomllib.loads(text)["mcp_servers"], tomllib.loads(wrapped.text)["mcp_servers"]
    for name, entry in before.items():
        assert after[name]["args"] == ["--", entry["command"], *entry.get("args", [])]
        assert after[name].get("enabled") == entry.get("enabled")
