"""Single entries: exact wrapped text, hand edits kept by unwrap, guard spellings, entries left alone, refusals."""

from __future__ import annotations

import json

import pytest

from mcp_loop_guard.wrap.clients import CLIENTS, GENERIC, Client
from mcp_loop_guard.wrap.entries import RefusedError
from mcp_loop_guard.wrap.plan import rewrite

GUARD = ("/usr/local/bin/mcp-loop-guard",)


def _wrap(text: str, client: Client = GENERIC, prefix: tuple[str, ...] = GUARD) -> str:
    return rewrite(text, client, prefix=prefix, undo=False).text


def _unwrap(text: str, client: Client = GENERIC, prefix: tuple[str, ...] = ()) -> str:
    return rewrite(text, client, prefix=prefix, undo=True).text


def _details(text: str, client: Client = GENERIC, *, undo: bool = False) -> dict[str, str]:
    return {o.name: o.detail for o in rewrite(text, client, prefix=GUARD, undo=undo).outcomes}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(
            '{"mcpServers": {"a": {"command": "uvx", "args": ["x"]}}}',
            '{"mcpServers": {"a": {"command": "/usr/local/bin/mcp-loop-guard", "args": ["--", "uvx", "x"]}}}',
            id="one-line",
        ),
        pytest.param(
            '{"mcpServers": {"a": {"command": "srv"}}}',
            '{"mcpServers": {"a": {"command": "/usr/local/bin/mcp-loop-guard", "args": ["--", "srv"]}}}',
            id="no-args",
        ),
        pytest.param(
            '{"mcpServers": {"a": {"command": "srv", "args": []}}}',
            '{"mcpServers": {"a": {"command": "/usr/local/bin/mcp-loop-guard", "args": [ "--", "srv" ]}}}',
            id="empty-args-one-line",
        ),
        pytest.param(
            '{"mcpServers": {\n  "a": {\n    "command": "srv",\n    "args": [],\n    "env": {}\n  }\n}}',
            '{"mcpServers": {\n  "a": {\n    "command": "/usr/local/bin/mcp-loop-guard",\n'
            '    "args": [\n      "--",\n      "srv"\n    ],\n    "env": {}\n  }\n}}',
            id="empty-args-multi-line",
        ),
        pytest.param(
            '{"mcpServers": {\r\n  "a": {\r\n    "command": "srv"\r\n  }\r\n}}',
            '{"mcpServers": {\r\n  "a": {\r\n    "command": "/usr/local/bin/mcp-loop-guard",\r\n'
            '    "args": ["--", "srv"]\r\n  }\r\n}}',
            id="crlf-no-args",
        ),
        pytest.param(
            '{"mcpServers": {"a": {"command": "srv", "args": [ // why\n "x", /* y */ "z",\n]}}}',
            '{"mcpServers": {"a": {"command": "/usr/local/bin/mcp-loop-guard", '
            '"args": [ // why\n "--", "srv", "x", /* y */ "z",\n]}}}',
            id="comments-and-trailing-comma-in-args",
        ),
        pytest.param(
            '{"mcpServers": {"a": {"command": "C:\\\\Tools\\\\srv.exe", "args": ["caf\\u00e9"]}}}',
            '{"mcpServers": {"a": {"command": "/usr/local/bin/mcp-loop-guard", '
            '"args": ["--", "C:\\\\Tools\\\\srv.exe", "caf\\u00e9"]}}}',
            id="escapes-copied-as-written",
        ),
    ],
)
def test_local_entries_are_wrapped_by_minimal_edits_that_unwrap_reverses(before: str, after: str) -> None:
    """Only the command token changes and the guard's tokens go in, in the entry's own layout; unwrap undoes it."""
    assert _wrap(before) == after
    assert _unwrap(after) == before


def test_unwrap_keeps_what_the_user_changed_after_wrapping() -> None:
    """An entry edited after wrapping (a guard option, an extra server argument, a new env) keeps the server edits."""
    edited = (
        '{"mcpServers": {"a": {"command": "/usr/local/bin/mcp-loop-guard", '
        '"args": ["--warn-threshold", "4", "--", "uvx", "x", "--verbose"], "env": {"K": "v"}}}}'
    )
    assert _unwrap(edited) == '{"mcpServers": {"a": {"command": "uvx", "args": ["x", "--verbose"], "env": {"K": "v"}}}}'
    no_args_left = '{"mcpServers": {"a": {"command": "mcp-loop-guard", "args": ["--", "srv"], "cwd": "/w"}}}'
    assert _unwrap(no_args_left) == '{"mcpServers": {"a": {"command": "srv", "cwd": "/w"}}}'


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("mcp-loop-guard", ["--", "x"]),
        ("C:\\Users\\me\\.local\\bin\\mcp-loop-guard.exe", ["--", "x"]),
        ("uvx", ["mcp-loop-guard", "--", "x"]),
        ("uvx", ["mcp-loop-guard@0.1.0", "--", "x"]),
        ("python3", ["-m", "mcp_loop_guard", "--ignore-tools", "todo", "--", "x"]),
        ("/opt/venv/bin/mcp-loop-guard", ["--upstream", "https://example.com/mcp"]),
        ("uvx", ["--from", "git+https://example.com/mcp-loop-guard", "mcp-loop-guard", "--", "x"]),
        ("uv", ["run", "--directory", "/src/guard", "mcp-loop-guard", "--", "x"]),
        ("uv", ["tool", "run", "mcp_loop_guard==0.1", "--", "x"]),
        ("uv", ["run", "python", "-X", "utf8", "-m", "mcp_loop_guard", "--", "x"]),
        ("pipx", ["run", "--spec", "mcp-loop-guard[redis]", "mcp-loop-guard", "--", "x"]),
        ("python", ["-mmcp_loop_guard", "--", "x"]),
        ("env", ["-u", "HOME", "LOOP_GUARD_MODE=warn", "mcp-loop-guard", "--", "x"]),
        ("cmd", ["/c", "mcp-loop-guard.exe", "--", "x"]),
    ],
)
def test_entries_already_behind_the_guard_are_recognised_however_it_is_started(command: str, args: list[str]) -> None:
    """The guard started by path, by a package runner or as a module counts as wrapped: wrap leaves it alone."""
    text = '{"mcpServers": {"a": {"command": %s, "args": %s}}}' % (json_str(command), json_list(args))  # noqa: UP031
    assert _wrap(text) == text
    assert _details(text)["a"] == "left as is: already runs behind the guard"
    assert _details(text, undo=True)["a"].startswith("unwrapped")


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("npx", ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/src/mcp-loop-guard"]),
        ("uv", ["--directory", "/home/me/mcp-loop-guard", "run", "server.py"]),
        ("uv", ["run", "--directory", "/home/me/mcp-loop-guard", "server.py"]),
        ("uvx", ["--from", "/home/me/mcp-loop-guard", "other-server"]),
        ("mcp-server-git", ["--repository", "/home/me/mcp_loop_guard"]),
        ("python3", ["-m", "other_server", "--root", "mcp_loop_guard"]),
        ("python3", ["-c", "import mcp_loop_guard", "mcp-loop-guard"]),
    ],
)
def test_an_argument_named_like_the_guard_is_not_the_guard(command: str, args: list[str]) -> None:
    """A folder or value called mcp-loop-guard, not the program a launcher runs, leaves the entry to be wrapped."""
    text = '{"mcpServers": {"a": {"command": %s, "args": %s}}}' % (json_str(command), json_list(args))  # noqa: UP031
    wrapped = json.loads(_wrap(text))["mcpServers"]["a"]
    assert wrapped == {"command": GUARD[0], "args": ["--", command, *args]}
    assert _details(text, undo=True)["a"] == "left as is: not behind the guard"


def json_str(value: str) -> str:
    """A JSON string token."""
    return json.dumps(value)


def json_list(values: list[str]) -> str:
    """A JSON array of string tokens."""
    return "[" + ", ".join(map(json_str, values)) + "]"


def test_a_guard_command_of_several_words_is_written_and_recognised() -> None:
    """--guard-command "uvx mcp-loop-guard" writes uvx as the command and the rest before --; unwrap reverses it."""
    before = '{"mcpServers": {"a": {"command": "srv", "args": ["x"]}}}'
    wrapped = _wrap(before, prefix=("uvx", "mcp-loop-guard"))
    assert wrapped == '{"mcpServers": {"a": {"command": "uvx", "args": ["mcp-loop-guard", "--", "srv", "x"]}}}'
    assert _wrap(wrapped, prefix=("uvx", "mcp-loop-guard")) == wrapped
    assert _unwrap(wrapped) == before


@pytest.mark.parametrize(
    ("client", "entry", "reason"),
    [
        ("gemini", '{"url": "https://h/mcp", "type": "sse"}', "and this entry says sse"),
        ("vscode", '{"type": "http", "url": "https://h/events/sse"}', "and this entry says http"),
        ("vscode", '{"type": "websocket", "url": "wss://h/ws"}', "not an http(s) URL"),
        ("claude-code", '{"type": "ws", "url": "https://h/ws"}', "its type 'ws' is not a transport"),
        ("generic", '{"type": "streamable-http", "url": "https://h/mcp"}', 'write its type back as "http"'),
        ("generic", '{"url": "https://h/mcp", "headers": {"A": /* why */ "b"}}', "byte for byte"),
        ("generic", '{"url": "https://h/mcp", "headers": {"Bad Name": "b"}}', "cannot be passed as --header"),
        ("generic", '{"command": "x", "url": "https://h/mcp"}', "has both command and url"),
        ("generic", '{"disabled": true}', "neither command nor a URL"),
    ],
)
def test_entries_the_guard_cannot_front_are_left_with_the_reason(client: str, entry: str, reason: str) -> None:
    """Remote entries the guard would reach wrongly, or not at all, stay as they are, and the output says why."""
    chosen = GENERIC if client == "generic" else CLIENTS[client]
    section = "servers" if client == "vscode" else "mcpServers"
    text = f'{{"{section}": {{"s": {entry}}}}}'
    assert _wrap(text, chosen) == text
    assert reason in _details(text, chosen)["s"]


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("not json", "", "not JSON"),
        ('{"mcpServers": {"a": {"command": "x"}', "", "line 1, column 38: expected , or }"),
        ("[1, 2]", "", "expected a JSON object at the top"),
        ('{"servers": {}}', "", 'no server section ("mcpServers")'),
        ('{"mcpServers": []}', "mcpServers", "expected an object mapping server names"),
        ('{"mcpServers": {"a": "uvx x"}}', "mcpServers.a", "expected an object (a server entry)"),
        ('{"mcpServers": {"a": {"command": 1}}}', "mcpServers.a.command", "expected a string"),
        ('{"mcpServers": {"a": {"command": "x", "args": "y"}}}', "mcpServers.a.args", "expected a list of strings"),
        ('{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}', "mcpServers.a", "given twice"),
    ],
)
def test_a_file_that_is_not_what_wrap_expects_is_refused_naming_the_key(text: str, key: str, problem: str) -> None:
    """Not JSON, no server section or an entry of the wrong type: refused with the key path and the problem."""
    client = CLIENTS["claude-desktop"]
    with pytest.raises(RefusedError) as caught:
        rewrite(text, client, prefix=GUARD, undo=False)
    assert caught.value.key == key
    assert problem in caught.value.problem


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[mcp_servers.a\n", "not TOML"),
        ('model = "x"\n', "no server section ([mcp_servers.NAME] tables)"),
        ("mcp_servers = 3\n", "expected a table of servers"),
        ("[mcp_servers]\na = 1\n", "expected a table (a server entry)"),
    ],
)
def test_a_toml_file_that_is_not_what_wrap_expects_is_refused(text: str, problem: str) -> None:
    """A Codex file that is not TOML or holds no server tables is refused, saying why."""
    with pytest.raises(RefusedError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        rewrite(text, CLIENTS["codex"], prefix=GUARD, undo=False)


def test_only_wraps_the_named_servers_and_an_unknown_name_is_refused() -> None:
    """--only limits the change to the named servers; a name that is not in the file is an error listing the names."""
    text = '{"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}}'
    result = rewrite(text, GENERIC, prefix=GUARD, undo=False, only={"b"})
    assert [o.name for o in result.outcomes] == ["b"]
    assert '"a": {"command": "x"}' in result.text
    with pytest.raises(RefusedError, match=r"no server named c \(servers: a, b\)"):
        rewrite(text, GENERIC, prefix=GUARD, undo=False, only={"c"})


def test_claude_code_project_sections_are_wrapped_too() -> None:
    """In ~/.claude.json, servers of every projects.<path>.mcpServers are wrapped, and reported with their section."""
    text = '{"mcpServers": {}, "projects": {"/p": {"mcpServers": {"db": {"command": "pg"}}}}}'
    result = rewrite(text, CLIENTS["claude-code"], prefix=GUARD, undo=False)
    assert [(o.section, o.name, o.changed) for o in result.outcomes] == [("projects./p.mcpServers", "db", True)]


def test_unwrap_leaves_entries_not_behind_the_guard() -> None:
    """unwrap touches only entries that run the guard; the others are reported as not behind it."""
    text = '{"mcpServers": {"a": {"command": "uvx", "args": ["x"]}, "b": {"command": "mcp-loop-guard"}}}'
    assert _unwrap(text) == text
    assert _details(text, undo=True) == {
        "a": "left as is: not behind the guard",
        "b": "left as is: runs the guard without a server of its own to give back",
    }


def test_codex_remote_entries_with_sse_paths_or_empty_headers_are_left() -> None:
    """Codex speaks streamable HTTP only, and rejects http_headers on a command entry: such entries stay as they are."""
    text = (
        '[mcp_servers.a]\nurl = "https://h/sse"\n\n'
        '[mcp_servers.b]\nurl = "https://h/mcp"\nhttp_headers = {}\n\n'
        '[mcp_servers.c]\nurl = "https://h/mcp"\n[mcp_servers.c.http_headers]\nX = "y"\n'
    )
    details = _details(text, CLIENTS["codex"])
    assert "and this entry says http" in details["a"]
    assert "empty http_headers" in details["b"]
    assert "outside its [mcp_servers.NAME] table" in details["c"]
    assert _wrap(text, CLIENTS["codex"]) == text


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_codex_file_without_a_final_newline_round_trips(newline: str) -> None:
    """A server table on the last line of a file without a final newline gets its args line and loses it again."""
    text = f'model = "x"{newline}{newline}[mcp_servers.a]{newline}command = "srv"'
    wrapped = _wrap(text, CLIENTS["codex"])
    assert wrapped == text.replace('"srv"', f'"/usr/local/bin/mcp-loop-guard"{newline}args = ["--", "srv"]')
    assert _unwrap(wrapped, CLIENTS["codex"]) == text
