"""Config file: the mcpServers JSON, its loopGuard sections, and errors naming file and key."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mcp_loop_guard.config import (
    SERVER_NAME,
    ConfigError,
    GuardConfig,
    HttpServer,
    StdioServer,
    stdio_command_config,
    url_config,
)
from mcp_loop_guard.config_file import load_config
from mcp_loop_guard.core import Policy
from mcp_loop_guard.plan import plan
from mcp_loop_guard.policies import policy_for
from mcp_loop_guard.settings import SettingsError, load_settings

CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LOOP_GUARD_* variable leaks in; the variables the examples use are unset."""
    for name in list(os.environ):
        if name.upper().startswith("LOOP_GUARD_") or name in {"GITHUB_TOKEN", "REPO_DIR", "TOKEN"}:
            monkeypatch.delenv(name)


@pytest.fixture
def write(tmp_path: Path) -> Any:
    """Write a document (or raw text) to mcp.json and return its path."""

    def write(document: object) -> Path:
        path = tmp_path / "mcp.json"
        path.write_text(document if isinstance(document, str) else json.dumps(document), encoding="utf-8")
        return path

    return write


def servers(**entries: object) -> dict[str, Any]:
    """An mcpServers document."""
    return {"mcpServers": entries}


def error_of(path: Path) -> str:
    """The message load_config raises for ``path``."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


def test_a_stdio_server_keeps_command_args_env_and_cwd(write: Any) -> None:
    """The Claude Desktop shape loads as a StdioServer with every field."""
    path = write(servers(time={"command": "mcp-server-time", "args": ["-v"], "env": {"TZ": "UTC"}, "cwd": "/srv"}))
    config = load_config(path)
    assert config.path == path
    assert config.servers == (StdioServer("time", "mcp-server-time", ("-v",), {"TZ": "UTC"}, "/srv", {}),)
    assert config.settings == {}


@pytest.mark.parametrize(
    ("entry", "transport"),
    [
        ({"type": "http"}, "http"),
        ({"type": "streamable-http"}, "http"),
        ({"type": "streamableHttp"}, "http"),
        ({"transport": "streamableHttp"}, "http"),
        ({"type": "sse"}, "sse"),
        ({"transport": "sse", "type": "sse"}, "sse"),
        ({}, "http"),
    ],
)
def test_remote_transports_are_normalised(write: Any, entry: dict[str, str], transport: str) -> None:
    """Every client spelling of streamable HTTP means http; sse means sse; no type means http here."""
    config = load_config(write(servers(remote={"url": "https://example.com/mcp", **entry})))
    assert config.servers == (HttpServer("remote", "https://example.com/mcp", transport, {}, {}),)  # type: ignore[arg-type]


def test_a_remote_server_without_type_is_sse_when_its_path_ends_in_sse(write: Any) -> None:
    """Cursor-style entries with only a url: /sse means the legacy SSE transport."""
    config = load_config(write(servers(old={"url": "http://localhost:8000/sse"})))
    assert isinstance(config.servers[0], HttpServer)
    assert config.servers[0].transport == "sse"


def test_type_stdio_and_vs_code_servers_key_are_accepted(write: Any) -> None:
    """VS Code's top-level "servers" and "type": "stdio" load like mcpServers with a command."""
    config = load_config(write({"inputs": [], "servers": {"git": {"type": "stdio", "command": "mcp-server-git"}}}))
    assert config.servers == (StdioServer("git", "mcp-server-git"),)


def test_client_specific_keys_are_ignored_and_disabled_servers_dropped(write: Any) -> None:
    """autoApprove, alwaysAllow, timeout are ignored; a disabled server is dropped unchecked."""
    path = write(
        servers(
            time={"command": "mcp-server-time", "autoApprove": ["x"], "alwaysAllow": [], "timeout": 60},
            broken={"disabled": True, "command": 5, "url": "x", "type": "websocket"},
            kept={"disabled": False, "url": "http://a/mcp"},
        )
    )
    assert [server.name for server in load_config(path).servers] == ["time", "kept"]


def test_variables_are_expanded_in_values(write: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """${VAR}, ${VAR:-default} and ${env:VAR} are replaced in command, args, env, url and headers."""
    monkeypatch.setenv("TOKEN", "t0k3n")
    monkeypatch.setenv("EMPTY", "")
    monkeypatch.delenv("UNSET", raising=False)
    path = write(
        servers(
            local={
                "command": "server",
                "args": ["--dir", "${UNSET:-/srv/data}", "${EMPTY:-fallback}", "x${EMPTY}y", "${input:kept}"],
                "env": {"API_KEY": "${TOKEN}"},
            },
            remote={"url": "https://example.com/mcp?key=${env:TOKEN}", "headers": {"Authorization": "Bearer ${TOKEN}"}},
        )
    )
    local, remote = load_config(path).servers
    assert isinstance(local, StdioServer)
    assert local.args == ("--dir", "/srv/data", "fallback", "xy", "${input:kept}")
    assert local.env == {"API_KEY": "t0k3n"}
    assert isinstance(remote, HttpServer)
    assert remote.url == "https://example.com/mcp?key=t0k3n"
    assert remote.headers == {"Authorization": "Bearer t0k3n"}


def test_a_missing_variable_names_the_key_and_never_a_value(write: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unset variable without default is an error naming the key and the variable, not the values."""
    monkeypatch.setenv("TOKEN", "t0k3n")
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    path = write(servers(github={"url": "https://x/mcp?a=${TOKEN}", "headers": {"Authorization": "${GITHUB_TOKEN}"}}))
    message = error_of(path)
    assert message == (
        f"{path}: mcpServers.github.headers.Authorization: environment variable GITHUB_TOKEN is not set "
        "(or write ${GITHUB_TOKEN:-default})"
    )


def test_reprs_hide_header_env_and_url_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """repr() of servers shows keys but not header or env values, URL credentials or queries."""
    remote = HttpServer("r", "https://user:pa55@x.example/mcp?key=s3cr3t", "http", {"Authorization": "Bearer s3cr3t"})
    local = StdioServer("l", "server", env={"API_KEY": "s3cr3t"})
    for text in (repr(remote), repr(local), repr(GuardConfig(None, (remote, local), {}))):
        assert "s3cr3t" not in text
        assert "pa55" not in text
    assert "'Authorization': '***'" in repr(remote)
    assert "url='https://x.example/mcp'" in repr(remote)
    assert "user" not in repr(remote)
    assert "'API_KEY': '***'" in repr(local)


def test_the_loop_guard_section_becomes_snake_case_settings(write: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """camelCase and snake_case keys both load, and the section sits below the environment."""
    path = write({**servers(a={"command": "x"}), "loopGuard": {"warnThreshold": 2, "block_threshold": 4, "port": 9}})
    config = load_config(path)
    assert config.settings == {"warn_threshold": 2, "block_threshold": 4, "port": 9}
    monkeypatch.setenv("LOOP_GUARD_PORT", "10")
    settings = load_settings(config.settings)
    assert (settings.warn_threshold, settings.block_threshold, settings.port) == (2, 4, 10)


def test_a_bad_loop_guard_value_is_reported_with_the_file_key(write: Any) -> None:
    """A loopGuard value of the wrong type fails in load_settings, naming the key as written and the file."""
    path = write({**servers(a={"command": "x"}), "loopGuard": {"warnThreshold": "often"}})
    with pytest.raises(SettingsError, match=f"loopGuard.warnThreshold='often' in {path} is not valid"):
        load_settings(load_config(path).settings)


def test_per_server_overrides_build_that_servers_policy(write: Any) -> None:
    """A server's loopGuard (either spelling) is validated at load and applied by policy_for."""
    path = write(
        servers(
            git={"command": "git-server", "loopGuard": {"warnThreshold": 2, "blockThreshold": 3}},
            web={"url": "http://web/mcp", "loopGuard": {"ignore_tools": "fetch, get_*", "ignoreErrors": True}},
            raw={"command": "raw", "loopGuard": {"enabled": False}},
        )
    )
    git, web, raw = load_config(path).servers
    assert git.policy == {"warn_threshold": 2, "block_threshold": 3}
    assert web.policy == {"ignore_tools": ("fetch", "get_*"), "ignore_errors": True}
    settings = load_settings()
    assert policy_for(settings, git.policy) == Policy(warn_threshold=2, block_threshold=3)
    assert policy_for(settings, web.policy, prefix="web__").ignore_tools == ("web__fetch", "web__get_*")
    assert not policy_for(settings, raw.policy).active


def test_a_server_override_that_crosses_thresholds_names_its_key(write: Any) -> None:
    """blockThreshold at or under the session's warn is rejected by policy_for, with the file key."""
    path = write(servers(git={"command": "g", "loopGuard": {"blockThreshold": 2}}))
    (git,) = load_config(path).servers
    with pytest.raises(SettingsError, match=f"mcpServers.git.loopGuard.blockThreshold in {path}: warn threshold"):
        policy_for(load_settings(), git.policy)


def test_a_tool_override_that_crosses_thresholds_names_its_key_and_file(write: Any) -> None:
    """A server's per-tool blockThreshold at or under the warn threshold stops the plan, naming where it was written."""
    path = write(servers(git={"command": "g", "loopGuard": {"tools": {"log_*": {"blockThreshold": 2}}}}))
    config = load_config(path)
    with pytest.raises(
        SettingsError, match=rf"mcpServers\.git\.loopGuard\.tools\.log_\*\.blockThreshold in {path}: warn"
    ):
        plan(config, load_settings(config.settings))


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([], "expected a JSON object at the top, got a list"),
        ({}, 'no servers: give at least one enabled server under "mcpServers"'),
        (servers(a={"command": "x", "disabled": True}), "no servers"),
        ({"mcpServers": [], "loopGuard": {}}, "mcpServers: expected an object mapping server names to servers"),
        ({"mcpServers": {}, "servers": {}}, 'both "mcpServers" and "servers" are given (keep one)'),
        (servers(a="x"), "mcpServers.a: expected an object, got a string"),
        (servers(a={"command": "x", "disabled": "yes"}), "mcpServers.a.disabled: expected true or false"),
        (servers(**{"my server": {"command": "x"}}), "mcpServers.my server: server names must match"),
        (servers(**{"a" * 65: {"command": "x"}}), "server names must match ^[a-zA-Z0-9_-]{1,64}$"),
        (servers(a={"args": ["x"]}), 'mcpServers.a: needs "command" (a local server) or "url" (a remote one)'),
        (servers(a={"command": "x", "url": "http://a"}), 'mcpServers.a: has both "command" and "url"'),
        (servers(a={"command": ""}), "mcpServers.a.command: must not be empty"),
        (servers(a={"command": ["npx", "x"]}), "mcpServers.a.command: expected a string, got a list"),
        (servers(a={"command": "x", "args": "--flag"}), "mcpServers.a.args: expected a list, got a string"),
        (servers(a={"command": "x", "args": ["a", 3]}), "mcpServers.a.args[1]: expected a string, got a number"),
        (servers(a={"command": "x", "env": {"N": 1}}), "mcpServers.a.env.N: expected a string, got a number"),
        (servers(a={"command": "x", "env": []}), "mcpServers.a.env: expected an object, got a list"),
        (servers(a={"url": "http://a", "headers": {"H": None}}), "mcpServers.a.headers.H: expected a string, got null"),
        (
            servers(a={"url": "ws://a", "type": "websocket"}),
            "mcpServers.a.type: unknown transport 'websocket' (accepted: stdio, http, streamable-http, "
            "streamableHttp, sse)",
        ),
        (servers(a={"url": "http://a", "transport": "grpc"}), "mcpServers.a.transport: unknown transport 'grpc'"),
        (servers(a={"url": "http://a", "type": "sse", "transport": "http"}), '"type" (sse) and "transport" (http)'),
        (servers(a={"type": "stdio", "url": "http://a"}), 'mcpServers.a: transport "stdio" needs "command"'),
        (servers(a={"type": "sse", "command": "x"}), 'mcpServers.a: transport "sse" needs "url", not "command"'),
        (servers(a={"url": "ftp://a/mcp"}), "mcpServers.a.url: expected an http:// or https:// URL with a host"),
        (servers(a={"url": "/mcp"}), "mcpServers.a.url: expected an http:// or https:// URL with a host"),
        (servers(a={"command": "x", "loopGuard": []}), "mcpServers.a.loopGuard: expected an object, got a list"),
        (servers(a={"command": "x", "args": None}), "mcpServers.a.args: expected a list, got null"),
        (servers(a={"url": "", "headers": "h"}), "mcpServers.a.url: must not be empty; mcpServers.a.headers: expected"),
        (servers(a={"command": "x", "callTimeoutSeconds": "5"}), "callTimeoutSeconds: expected a number, got a string"),
        (
            servers(a={"command": "x", "callTimeoutSeconds": True}),
            "callTimeoutSeconds: expected a number, got true/false",
        ),
        (
            servers(a={"command": "x", "callTimeoutSeconds": 0}),
            "mcpServers.a.callTimeoutSeconds: must be greater than 0",
        ),
        (
            servers(a={"command": "x", "loopGuard": {"warnTreshold": 2}}),
            "mcpServers.a.loopGuard.warnTreshold: unknown setting (known: enabled, warnThreshold, blockThreshold, ",
        ),
        (
            servers(a={"command": "x", "loopGuard": {"abortThreshold": 1}}),
            "mcpServers.a.loopGuard.abortThreshold: applies to the whole session (set it in the top-level "
            "loopGuard section)",
        ),
        (servers(a={"command": "x", "loopGuard": {"warnThreshold": 0}}), "warnThreshold: must be at least 1"),
        (servers(a={"command": "x", "loopGuard": {"warnThreshold": "2"}}), "expected an integer, got a string"),
        (servers(a={"command": "x", "loopGuard": {"enabled": 1}}), "enabled: expected true or false, got a number"),
        (
            servers(a={"command": "x", "loopGuard": {"warnThreshold": 2, "warn_threshold": 2}}),
            "mcpServers.a.loopGuard.warn_threshold: given twice (also as warnThreshold)",
        ),
        ({**servers(a={"command": "x"}), "loopGuard": []}, "loopGuard: expected an object, got a list"),
        ({**servers(a={"command": "x"}), "loopGuard": {"treshold": 1}}, "loopGuard.treshold: unknown setting"),
    ],
)
def test_bad_files_name_the_file_the_key_and_the_problem(write: Any, document: object, expected: str) -> None:
    """Each mistake is one line: the file, the dotted key path and what is wrong."""
    path = write(document)
    message = error_of(path)
    assert message.startswith(f"{path}: ")
    assert expected in message
    assert "\n" not in message


@pytest.mark.parametrize("key", ["pollSeconds", "quiet_seconds"])
@pytest.mark.parametrize(
    ("where", "at"),
    [
        (lambda lg: {**servers(a={"command": "x"}), "loopGuard": lg}, "loopGuard"),
        (lambda lg: servers(a={"command": "x", "loopGuard": lg}), "mcpServers.a.loopGuard"),
        (lambda lg: {**servers(a={"command": "x"}), "loopGuard": {"tools": {"t": lg}}}, "loopGuard.tools.t"),
        (lambda lg: servers(a={"command": "x", "loopGuard": {"tools": {"t": lg}}}), "mcpServers.a.loopGuard.tools.t"),
    ],
)
def test_a_removed_setting_is_refused_at_every_level_saying_what_took_its_place(
    write: Any, key: str, where: Any, at: str
) -> None:
    """pollSeconds / quietSeconds, top level, per server or per tool: refused at its key, naming what replaced it."""
    message = error_of(write(where({key: 5})))
    assert f"{at}.{key}: was removed: a wall-clock wait no longer exempts a repeat" in message
    assert "`pollable: true` on a tool" in message


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {**servers(a={"command": "x"}), "loopGuard": {"pollable": True}},
            "loopGuard.pollable: applies to tools (set it in a server's loopGuard section or in a tools section)",
        ),
        (
            servers(a={"command": "x", "loopGuard": {"tools": {"t": {"ignoreTools": ["x"]}}}}),
            "mcpServers.a.loopGuard.tools.t.ignoreTools: applies to a whole server",
        ),
        (
            servers(a={"command": "x", "loopGuard": {"tools": {"t": {"mode": "warn"}}}}),
            "mcpServers.a.loopGuard.tools.t.mode: applies to the whole session",
        ),
        (
            servers(a={"command": "x", "loopGuard": {"tools": {"t": {"warnThreshold": "2"}}}}),
            "mcpServers.a.loopGuard.tools.t.warnThreshold: expected an integer, got a string",
        ),
        (
            servers(a={"command": "x", "loopGuard": {"tools": {"t": {"scrub": "nanoseconds"}}}}),
            "mcpServers.a.loopGuard.tools.t.scrub: Value error, unknown scrub preset 'nanoseconds'",
        ),
        (servers(a={"command": "x", "loopGuard": {"tools": []}}), "mcpServers.a.loopGuard.tools: expected an object"),
    ],
)
def test_a_key_in_the_wrong_section_says_where_it_belongs(write: Any, document: object, expected: str) -> None:
    """A setting where it may not be set (a server's tools sections too) is named by its key, with where it goes."""
    assert expected in error_of(write(document))


def test_every_problem_in_a_file_is_reported_at_once(write: Any) -> None:
    """Two bad servers give one message naming both keys, the file once."""
    path = write(servers(a={"command": 1}, b={"url": "http://b", "type": "ws"}))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.file == str(path)
    assert [key for key, _ in caught.value.problems] == ["mcpServers.a.command", "mcpServers.b.type"]
    assert str(caught.value).count(str(path)) == 1


def test_invalid_json_names_line_and_column(write: Any) -> None:
    """A syntax error gives the file, line and column."""
    path = write('{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n')
    assert error_of(path).startswith(f"{path}: invalid JSON at line 3, column 26: ")


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing file is reported as such, not as a traceback."""
    path = tmp_path / "missing.json"
    assert error_of(path) == f"{path}: cannot read it: No such file or directory"


def test_config_errors_are_settings_errors() -> None:
    """Code that reports SettingsError at start-up also reports ConfigError."""
    assert issubclass(ConfigError, SettingsError)


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["mcp-server-time"], "mcp-server-time"),
        (["/usr/local/bin/mcp-server-git", "--repository", "."], "mcp-server-git"),
        (["C:\\Tools\\server.exe"], "server"),
        (["uvx", "mcp-server-time"], "mcp-server-time"),
        (["uvx", "mcp-server-git@2026.1.0"], "mcp-server-git"),
        (["npx", "-y", "@modelcontextprotocol/server-everything"], "server-everything"),
        (["pipx", "run", "some-server"], "some-server"),
        (["npx"], "npx"),
        (["python3.11", "server.py"], "python3_11"),
    ],
)
def test_the_command_form_names_its_server_after_the_program(command: list[str], name: str) -> None:
    """`-- COMMAND`: the basename, or the package a runner starts, made a valid server name."""
    config = stdio_command_config(command, "/work")
    assert config.path is None
    assert config.servers == (
        StdioServer(name, command[0], tuple(command[1:]), {}, "/work", {}, display=shlex.join(command)),
    )
    assert config.settings == {}


@given(st.lists(st.text(max_size=80), min_size=1, max_size=4).filter(lambda command: command[0] != ""))
@example(["🙂"])
@example(["x" * 200])
def test_a_command_always_yields_a_valid_server_name(command: list[str]) -> None:
    """Whatever the command, the derived name matches ^[a-zA-Z0-9_-]{1,64}$."""
    assert SERVER_NAME.match(stdio_command_config(command, None).servers[0].name)


def test_an_empty_command_is_an_error() -> None:
    """No command after -- is a ConfigError, not an IndexError."""
    with pytest.raises(ConfigError, match="give the upstream server command after --"):
        stdio_command_config([], None)


@pytest.mark.parametrize(
    ("url", "transport", "expected"),
    [
        ("http://everything:3001/mcp", None, HttpServer("everything", "http://everything:3001/mcp", "http")),
        ("https://a.example.com/sse", None, HttpServer("a-example-com", "https://a.example.com/sse", "sse")),
        ("https://a.example.com/sse/", None, HttpServer("a-example-com", "https://a.example.com/sse/", "sse")),
        ("http://127.0.0.1:8000/events", "sse", HttpServer("127-0-0-1", "http://127.0.0.1:8000/events", "sse")),
        ("http://[::1]:8000/mcp", None, HttpServer("--1", "http://[::1]:8000/mcp", "http")),
    ],
)
def test_the_upstream_url_form_guesses_the_transport(url: str, transport: Any, expected: HttpServer) -> None:
    """`--upstream URL`: one remote server; a path ending in /sse means SSE unless told otherwise."""
    assert url_config(url, transport) == GuardConfig(None, (expected,), {})


@pytest.mark.parametrize("url", ["everything:3001/mcp", "ftp://host/mcp", "http:///mcp", ""])
def test_the_upstream_url_must_be_http(url: str) -> None:
    """A URL that is not http(s) with a host is reported under --upstream."""
    with pytest.raises(ConfigError, match=r"^--upstream: expected an http:// or https:// URL"):
        url_config(url)


def test_header_flags_become_the_upstreams_headers() -> None:
    """--header "Name: value" values are sent as given (client variables already expanded), split at the first colon."""
    config = url_config("https://h/mcp", headers=["Authorization: Bearer a:b", "X-Team:tools ", "X-Empty:"])
    (server,) = config.servers
    assert isinstance(server, HttpServer)
    assert dict(server.headers) == {"Authorization": "Bearer a:b", "X-Team": "tools", "X-Empty": ""}


@pytest.mark.parametrize("header", ["no colon", ": value", "Bad Name: value"])
def test_a_header_flag_needs_a_name_and_a_colon(header: str) -> None:
    """A --header that is not "Name: value" is reported under --header."""
    with pytest.raises(ConfigError, match=r'^--header: expected "Name: value"'):
        url_config("https://h/mcp", headers=[header])


def test_a_header_whose_value_would_end_the_header_is_refused(write: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A configured header with CR/LF (from ${VAR}), or a bad name, names the file and key, never the value."""
    monkeypatch.setenv("SMUGGLING", "Bearer s3cr3t\r\nX-Other: injected")
    headers = {"Authorization": "${SMUGGLING}", "Bad Name": "v", "X-Far": "\u20ac"}
    path = write(servers(r={"url": "https://h/mcp", "headers": headers}))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ")
    assert "mcpServers.r.headers.Authorization: the value holds a control character" in message
    assert "mcpServers.r.headers.Bad Name: not an HTTP header name" in message
    assert "mcpServers.r.headers.X-Far: the value holds characters an HTTP header cannot carry" in message
    assert "s3cr3t" not in message
    assert "injected" not in message


def test_a_header_flag_with_a_control_character_is_refused() -> None:
    """A --header value with a CR, LF or NUL is refused, naming the header and not its value."""
    for value in ("a\rb", "a\nb", "a\x00b"):
        with pytest.raises(
            ConfigError, match=r"^--header: Authorization: the value holds a control character"
        ) as raised:
            url_config("https://h/mcp", headers=[f"Authorization: Bearer s3cr3t{value}"])
        assert "s3cr3t" not in str(raised.value)


def test_every_example_guard_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/*.json load with load_config, their servers and settings parse."""
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_example")
    loaded = {path.name: load_config(path) for path in sorted(CONFIGS.glob("*.json"))}
    assert set(loaded) >= {"mcp.json", "multi.json"}
    for name, config in loaded.items():
        assert config.servers, name
        load_settings(config.settings)
        for server in config.servers:
            policy_for(load_settings(), server.policy, prefix=f"{server.name}__")
    assert loaded["mcp.json"].servers == (
        StdioServer("time", "mcp-server-time", ("--local-timezone", "UTC")),
        HttpServer("everything", "http://everything:3001/mcp", "http"),
    )
    multi = {server.name: server for server in loaded["multi.json"].servers}
    assert sorted(multi) == ["git", "github", "search"]
    assert isinstance(multi["github"], HttpServer)
    assert multi["github"].headers == {"Authorization": "Bearer ghp_example"}
    assert isinstance(multi["search"], HttpServer)
    assert multi["search"].transport == "sse"


def test_client_snippets_run_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """configs/clients/*.json are client configs: each server runs mcp-loop-guard or reaches a guard's /mcp."""
    monkeypatch.setenv("LOOP_GUARD_AUTH_TOKEN", "example")
    paths = sorted((CONFIGS / "clients").glob("*.json"))
    assert {path.stem for path in paths} >= {"claude-desktop", "cursor", "vscode"}
    for path in paths:
        for server in load_config(path).servers:
            if isinstance(server, StdioServer):
                assert server.command == "mcp-loop-guard", path
            else:
                assert server.url.endswith("/mcp"), path


_LOADED = """
import sys
from pathlib import Path
from mcp_loop_guard.config_file import load_config
from mcp_loop_guard.plan import plan
from mcp_loop_guard.settings import load_settings

config = load_config(Path(sys.argv[1]))
plan(config, load_settings(config.settings))
print(",".join(sorted({name.split(".")[0] for name in sys.modules} & {"pydantic", "mcp_loop_guard"})))
"""


@pytest.mark.parametrize(
    ("section", "loaded"),
    [
        ({}, "mcp_loop_guard"),
        ({"loopGuard": {"warnThreshold": 2}}, "mcp_loop_guard"),
        ({"loopGuard": {"budgets": "search_*=5"}}, "mcp_loop_guard,pydantic"),
        ({"mcpServers": {"a": {"command": "x", "loopGuard": {"warnThreshold": 2}}}}, "mcp_loop_guard,pydantic"),
    ],
)
def test_a_file_without_overrides_or_budgets_loads_no_pydantic(
    write: Any, section: dict[str, Any], loaded: str
) -> None:
    """Servers and top-level settings are read without pydantic; per-server or per-tool overrides and budgets load
    it, at their first use."""
    document = {**servers(a={"command": "x", "args": ["y"]}, b={"url": "http://h/mcp"}), **section}
    command = [sys.executable, "-c", _LOADED, str(write(document))]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == loaded
