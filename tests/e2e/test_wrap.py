"""wrap for real: the wrapped entry started as a client starts it, the guard in front, and unwrap restoring the file."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from mcp_loop_guard.wrap import jsonc
from mcp_loop_guard.wrap.spans import plain
from tests.harness import BIN_DIR, Connector, guard_argv, open_stdio_session, verdict
from tests.http_harness import serve_guard

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

CONVERSION = {"source_timezone": "Europe/Paris", "time": "09:30", "target_timezone": "America/New_York"}
TOKEN = "s3cret-token"  # noqa: S105 - the token the test's own upstream asks for
MINIMAL_PATH = "/usr/bin:/bin"
"""The PATH a GUI client such as Claude Desktop gives the servers it starts."""


async def _cli(*args: str) -> tuple[int, str, str]:
    """Runs ``mcp-loop-guard ARGS`` as a user would, with a PATH that does not hold the guard."""
    env = os.environ | {"PATH": MINIMAL_PATH}
    with anyio.fail_after(60):
        done = await anyio.run_process([*guard_argv(), *args], env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _entry(path: Path, section: str, name: str) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))[section][name]
    return entry


async def test_wrapped_server_runs_behind_the_guard_and_unwrap_restores_the_file(
    tmp_path: Path, time_server: list[str], process_marker: str
) -> None:
    """wrap --write fronts mcp-server-time with the guard: its tools come through, the 3rd identical call is warned."""
    config = tmp_path / "claude_desktop_config.json"
    original = json.dumps(
        {"mcpServers": {"time": {"command": time_server[0], "args": time_server[1:], "env": {"TZ": "UTC"}}}}, indent=2
    ).encode()
    config.write_bytes(original)

    status, out, err = await _cli("wrap", "--write", str(config))
    assert status == 0, err
    entry = _entry(config, "mcpServers", "time")
    guard = str(BIN_DIR / "mcp-loop-guard")
    assert entry == {"command": guard, "args": ["--", *time_server], "env": {"TZ": "UTC"}}
    assert f"guard command: {guard} (not on PATH; the one installed beside this Python)" in out
    backups = [path async for path in anyio.Path(tmp_path).glob("claude_desktop_config.json.bak-mcp-loop-guard-*")]
    assert [await backup.read_bytes() for backup in backups] == [original]

    command = [entry["command"], *entry["args"]]
    stderr = tmp_path / "wrapped-time.stderr"
    env = {**entry["env"], "PATH": MINIMAL_PATH}
    async with open_stdio_session(command, marker=process_marker, stderr=stderr, env=env) as connection:
        tools = await connection.session.list_tools()
        assert {"get_current_time", "convert_time"} <= {tool.name for tool in tools.tools}
        with anyio.fail_after(15):
            results = [await connection.session.call_tool("convert_time", CONVERSION) for _ in range(3)]
    assert [None if (found := verdict(result)) is None else found["action"] for result in results] == [
        None,
        None,
        "warn",
    ], connection.stderr_text()

    status, out, err = await _cli("wrap", "--write", str(config))
    assert (status, err) == (0, "")
    assert "Nothing to wrap" in out

    status, _, err = await _cli("unwrap", "--write", str(config))
    assert status == 0, err
    assert await anyio.Path(config).read_bytes() == original


async def test_wrapped_remote_entry_sends_its_headers_to_the_upstream(
    tmp_path: Path, time_server: list[str], process_marker: str, connect: Connector
) -> None:
    """A VS Code http entry with an Authorization header, wrapped, reaches an upstream that requires that header."""
    async with serve_guard(
        ["--", *time_server],
        marker=process_marker,
        stderr=tmp_path / "upstream.stderr",
        env={"LOOP_GUARD_AUTH_TOKEN": TOKEN},
    ) as upstream:
        config = tmp_path / ".vscode" / "mcp.json"
        config.parent.mkdir()
        original = (
            "{\n"
            "\t// a remote server that wants a bearer token\n"
            '\t"servers": {\n'
            '\t\t"time": {\n'
            '\t\t\t"type": "http",\n'
            f'\t\t\t"url": "{upstream.mcp_url}",\n'
            f'\t\t\t"headers": {{ "Authorization": "Bearer {TOKEN}" }},\n'
            "\t\t},\n"
            "\t},\n"
            "}\n"
        )
        config.write_text(original, encoding="utf-8")
        status, out, err = await _cli(
            "wrap", "--write", "--guard-command", f"{sys.executable} -m mcp_loop_guard", str(config)
        )
        assert status == 0, err
        assert "time  wrapped: remote, the guard reaches it over streamable HTTP" in out
        text = config.read_text(encoding="utf-8")
        assert '\t\t\t"type": "stdio",\n' in text
        assert f'"args": [ "-m", "mcp_loop_guard", "--upstream", "{upstream.mcp_url}", "--header", ' in text

        entry = plain(jsonc.parse(text))["servers"]["time"]  # type: ignore[index]
        assert entry["args"][-2:] == ["--header", f"Authorization: Bearer {TOKEN}"]
        async with connect([entry["command"], *entry["args"]]) as connection:
            with anyio.fail_after(15):
                result = await connection.session.call_tool("convert_time", CONVERSION)
        assert not result.is_error
        assert result.structured_content is not None

        status, _, err = await _cli("unwrap", "--write", str(config))
        assert status == 0, err
        assert await anyio.Path(config).read_text(encoding="utf-8") == original


async def test_header_flag_is_what_lets_the_guard_in(
    tmp_path: Path, time_server: list[str], process_marker: str
) -> None:
    """--upstream URL --header "Authorization: Bearer T" passes an upstream's token check; without it the call fails."""
    async with serve_guard(
        ["--", *time_server],
        marker=process_marker,
        stderr=tmp_path / "upstream.stderr",
        env={"LOOP_GUARD_AUTH_TOKEN": TOKEN},
    ) as upstream:
        base = [*guard_argv(), "--upstream", upstream.mcp_url]
        with_header = [*base, "--header", f"Authorization: Bearer {TOKEN}"]
        async with open_stdio_session(with_header, marker=process_marker, stderr=tmp_path / "ok.stderr") as connection:
            with anyio.fail_after(15):
                tools = await connection.session.list_tools()
        assert "convert_time" in {tool.name for tool in tools.tools}

        refusals: list[str] = []
        try:
            async with open_stdio_session(
                base, marker=process_marker, stderr=tmp_path / "refused.stderr"
            ) as connection:
                with anyio.fail_after(15):
                    await connection.session.list_tools()
        except* MCPError as group:
            refusals += [str(error) for error in _leaves(group)]
        assert refusals == ["Unauthorized: a valid bearer token is required"]


def _leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    """The errors inside a (nested) exception group."""
    found: list[MCPError] = []
    for error in group.exceptions:
        found += _leaves(error) if isinstance(error, BaseExceptionGroup) else [error]
    return found
