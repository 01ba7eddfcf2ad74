"""wrap and unwrap on realistic config files of every client: what is wrapped, what is left, and exact round trips."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mcp_loop_guard.wrap import jsonc
from mcp_loop_guard.wrap.clients import CLIENTS, GENERIC, client_of
from mcp_loop_guard.wrap.plan import rewrite
from mcp_loop_guard.wrap.spans import plain

FIXTURES = Path(__file__).parent / "wrap_fixtures"
GUARD = ("/opt/bin/mcp-loop-guard",)

# file under wrap_fixtures/ -> (client, servers wrapped, servers left alone)
EXPECTED: dict[str, tuple[str, set[str], set[str]]] = {
    "claude-desktop/claude_desktop_config.json": (
        "claude-desktop",
        {"filesystem", "git", "sqlite"},
        {"already", "notion"},
    ),
    "claude-code/user/.claude.json": ("claude-code", {"time", "github", "linear", "postgres"}, {"sentry", "internal"}),
    "claude-code/project/.mcp.json": ("claude-code", {"playwright", "api", "db"}, set()),
    "cursor/.cursor/mcp.json": ("cursor", {"browser", "docs", "events", "local"}, {"figma"}),
    "vscode/.vscode/mcp.json": ("vscode", {"fetch", "github", "legacy", "dev"}, {"socket", "entra"}),
    "vscode-user/User/mcp.json": ("vscode", {"memory"}, set()),
    "windsurf/mcp_config.json": ("windsurf", {"git", "context", "off"}, {"old"}),
    "gemini/.gemini/settings.json": ("gemini", {"git", "github", "learn", "events"}, {"ambiguous", "gcp"}),
    "codex/config.toml": ("codex", {"time", "notes", "multi", "docs", "search"}, {"private", "inline"}),
}
STRICT_JSON = {"claude-desktop", "claude-code", "cursor", "windsurf"}
"""Clients whose files are plain JSON: a wrapped file must still be plain JSON."""


def _read(client: str, text: str) -> dict[str, Any]:
    if client == "codex":
        return tomllib.loads(text)
    if client in STRICT_JSON:
        loaded: dict[str, Any] = json.loads(text)
        return loaded
    data = plain(jsonc.parse(text))
    assert isinstance(data, dict)
    return data


def _servers(client: str, data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every server entry by name, from all of the file's sections."""
    sections = {"vscode": ["servers"], "codex": ["mcp_servers"]}.get(client, ["mcpServers"])
    found: dict[str, dict[str, Any]] = {}
    for section in sections:
        found |= data.get(section, {})
    for project in data.get("projects", {}).values():
        found |= project.get("mcpServers", {})
    return found


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_client_file_wraps_as_expected_and_unwraps_byte_for_byte(name: str) -> None:
    """A client's file: exactly the servers the guard can front are wrapped; unwrap gives the file back to the byte."""
    client_key, wrapped, left = EXPECTED[name]
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    client = client_of(path)
    assert client.key == client_key
    result = rewrite(text, client, prefix=GUARD, undo=False)
    assert {o.name for o in result.outcomes if o.changed} == wrapped
    assert {o.name for o in result.outcomes if not o.changed} == left
    back = rewrite(result.text, client, prefix=(), undo=True, only=wrapped)
    assert back.text == text
    assert {o.name for o in back.outcomes if o.changed} == wrapped


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_wrapping_twice_changes_nothing(name: str) -> None:
    """A wrapped file wrapped again stays byte for byte the same: every entry is recognised as wrapped."""
    path = FIXTURES / name
    client = client_of(path)
    once = rewrite(path.read_text(encoding="utf-8"), client, prefix=GUARD, undo=False).text
    again = rewrite(once, client, prefix=GUARD, undo=False)
    assert again.text == once
    assert all("already runs behind the guard" in o.detail for o in again.outcomes if o.name in EXPECTED[name][1])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_wrapped_entries_run_the_guard_with_the_original_after_it(name: str) -> None:
    """Each wrapped entry reads (in the client's own syntax) as the guard with the original command or URL after it."""
    client_key, wrapped, _ = EXPECTED[name]
    path = FIXTURES / name
    text = path.read_text(encoding="utf-8")
    before = _servers(client_key, _read(client_key, text))
    after_data = _read(client_key, rewrite(text, client_of(path), prefix=GUARD, undo=False).text)
    after = _servers(client_key, after_data)
    for server in wrapped:
        old, new = before[server], after[server]
        assert new["command"] == GUARD[0]
        if "command" in old:
            assert new["args"] == ["--", old["command"], *old.get("args", [])]
        else:
            url = next(old[key] for key in ("url", "serverUrl", "httpUrl") if key in old)
            headers = old.get("headers", old.get("http_headers", {}))
            flags = [flag for header in headers.items() for flag in ("--header", f"{header[0]}: {header[1]}")]
            assert new["args"] == ["--upstream", url, *flags]
            assert not {"url", "serverUrl", "httpUrl", "headers", "http_headers"} & new.keys()
        rewritten = {"command", "args", "url", "serverUrl", "httpUrl", "headers", "http_headers", "type"}
        assert {k: v for k, v in new.items() if k not in rewritten} == {
            k: v for k, v in old.items() if k not in rewritten
        }
        if "type" in old:
            typed = client_key in ("claude-code", "vscode") and "command" not in old
            assert new["type"] == ("stdio" if typed else old["type"])
    outside = ("mcpServers", "servers", "mcp_servers", "projects")
    assert {k: v for k, v in after_data.items() if k not in outside} == {
        k: v for k, v in _read(client_key, text).items() if k not in outside
    }


def test_remote_entry_of_a_typed_client_becomes_a_stdio_entry_in_place() -> None:
    """A Claude Code http entry becomes type stdio, its url becomes command and its headers become args, in place."""
    text = (FIXTURES / "claude-code/user/.claude.json").read_text(encoding="utf-8")
    wrapped = rewrite(text, CLIENTS["claude-code"], prefix=GUARD, undo=False, only={"github"}).text
    assert (
        '    "github": {\n'
        '      "type": "stdio",\n'
        '      "command": "/opt/bin/mcp-loop-guard",\n'
        '      "args": [\n'
        '        "--upstream",\n'
        '        "https://api.githubcopilot.com/mcp/",\n'
        '        "--header",\n'
        '        "Authorization: Bearer ${GITHUB_TOKEN}"\n'
        "      ]\n"
        "    },\n"
    ) in wrapped


def test_jsonc_comments_and_trailing_commas_survive_around_wrapped_entries() -> None:
    """In VS Code's JSONC, every comment and trailing comma outside the rewritten tokens stays where it was."""
    text = (FIXTURES / "vscode/.vscode/mcp.json").read_text(encoding="utf-8")
    wrapped = rewrite(text, CLIENTS["vscode"], prefix=GUARD, undo=False).text
    for kept in ("// Servers for this workspace", "/* the fetch server, from PyPI */", "// runs from the uv cache"):
        assert kept in wrapped
    assert '\t\t\t"command": "/opt/bin/mcp-loop-guard", // runs from the uv cache\n' in wrapped
    assert '\t\t\t"args": ["--", "uvx", "mcp-server-fetch"],\n\t\t},' in wrapped
    assert wrapped.count(",\n\t\t},") == text.count(",\n\t\t},")


def test_codex_toml_comments_and_sub_tables_stay() -> None:
    """In Codex's TOML, comments, sub-tables and a literal-string command are kept; the wrapped table reads back."""
    text = (FIXTURES / "codex/config.toml").read_text(encoding="utf-8")
    wrapped = rewrite(text, CLIENTS["codex"], prefix=GUARD, undo=False).text
    assert 'args = ["--", "uvx", "mcp-server-time", "--local-timezone", "UTC"]  # keep UTC\n' in wrapped
    assert '[mcp_servers.time.env]\nLOG = "warn"\n' in wrapped
    assert (
        'command = "/opt/bin/mcp-loop-guard"\nargs = ["--", \'C:\\Tools\\notes-mcp.exe\']\nenabled = false\n' in wrapped
    )
    data = tomllib.loads(wrapped)
    assert data["mcp_servers"]["notes"]["args"] == ["--", "C:\\Tools\\notes-mcp.exe"]
    assert data["mcp_servers"]["docs"]["args"] == [
        "--upstream", "https://docs.example.com/mcp", "--header", "X-Client: codex", "--header", "X-Team: tools"
    ]  # fmt: skip
    assert data["profiles"] == {"fast": {"model": "gpt-5-mini"}}


@pytest.mark.parametrize(
    ("path", "client"),
    [
        ("x/claude_desktop_config.json", "claude-desktop"),
        ("home/.claude.json", "claude-code"),
        ("repo/.mcp.json", "claude-code"),
        ("home/.cursor/mcp.json", "cursor"),
        ("repo/.vscode/mcp.json", "vscode"),
        ("Code/User/mcp.json", "vscode"),
        ("home/.codeium/windsurf/mcp_config.json", "windsurf"),
        ("home/.gemini/settings.json", "gemini"),
        ("home/.codex/config.toml", "codex"),
        ("anywhere/servers.json", "generic"),
    ],
)
def test_a_file_is_read_in_the_format_of_the_client_it_belongs_to(path: str, client: str) -> None:
    """FILE is read as the client whose file it is, by its name and folder; any other JSON file as a generic one."""
    assert client_of(Path(path)).key == client
    assert (client_of(Path(path)) is GENERIC) == (client == "generic")
