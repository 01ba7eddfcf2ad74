"""Config reload: SIGHUP or --watch-config apply a new file to running sessions; a bad file changes nothing."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.harness import (
    Callbacks,
    Connector,
    CountingUpstream,
    GuardProcess,
    Inbox,
    action,
    eventually,
    fixture_command,
    read_json_lines,
    texts,
)
from tests.http_harness import (
    Rig,
    ServerProcess,
    Transport,
    http_get,
    open_http_session,
    open_sse_session,
    serve_guard,
)

pytestmark = pytest.mark.anyio

PIPELINE = "build"
"""A pipeline the jobs fixture knows."""
RELOADED = "config reloaded from"
REJECTED = "config reload (SIGHUP) rejected"


def server_entry(counting: CountingUpstream, **guard: Any) -> dict[str, Any]:
    """A config entry running the counting fixture (with its log), with per-server loopGuard settings."""
    entry: dict[str, Any] = {"command": counting.command[0], "args": counting.command[1:], "env": counting.env}
    if guard:
        entry["loopGuard"] = guard
    return entry


def write(path: Path, servers: dict[str, Any], **guard: Any) -> None:
    """Replace the config file in one step, as editors and config management do."""
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps({"mcpServers": servers, "loopGuard": guard}), encoding="utf-8")
    staged.replace(path)


def stderr_of(guard: GuardProcess) -> str:
    return guard.connection.stderr.read_text(encoding="utf-8", errors="replace")


async def hangup(guard: GuardProcess, seen: int, marker: str = RELOADED) -> None:
    """SIGHUP, then wait until the guard logged the outcome once more than ``seen`` times."""
    os.kill(guard.process.pid, signal.SIGHUP)
    with anyio.fail_after(20):
        await eventually(lambda: stderr_of(guard).count(marker) > seen)


async def test_new_thresholds_judge_the_next_call_of_a_running_stdio_session(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Two identical calls; the file now refuses at 3: the third is refused, in the same session, same process."""
    config = tmp_path / "guard.json"
    write(config, {"counting": server_entry(counting)})
    async with connect.guard_process([], guard_args=["--config", str(config)]) as guard:
        with anyio.fail_after(30):
            before = [action(await guard.session.call_tool("echo", {"text": "same"})) for _ in range(2)]
            write(config, {"counting": server_entry(counting)}, warnThreshold=2, blockThreshold=3)
            await hangup(guard, 0)
            after = await guard.session.call_tool("echo", {"text": "same"})
    assert before == [None, None]
    assert action(after) == "block"  # the count of 2 was kept: this is the 3rd, refused under the new rules
    assert len(counting.calls("echo")) == 2


async def test_a_bad_file_is_rejected_and_the_running_config_stays(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """A typo in the file: SIGHUP logs why, naming the file and key, and the calls are judged as before."""
    config = tmp_path / "guard.json"
    write(config, {"counting": server_entry(counting)}, warnThreshold=2, blockThreshold=4)
    async with connect.guard_process([], guard_args=["--config", str(config)]) as guard:
        with anyio.fail_after(30):
            write(config, {"counting": server_entry(counting)}, warnThreshold="two")
            await hangup(guard, 0, REJECTED)
            config.write_text("{ not json", encoding="utf-8")
            await hangup(guard, 1, REJECTED)
            results = [action(await guard.session.call_tool("echo", {"text": "same"})) for _ in range(4)]
        log = stderr_of(guard)
    assert results == [None, "warn", "warn", "block"]
    assert f"loopGuard.warnThreshold='two' in {config}" in log
    assert str(config) in log
    assert guard.process.returncode is None or guard.process.returncode == 0


async def test_the_stdio_relay_restarts_a_changed_server_and_tells_the_client(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """The one server's command changes: the new one serves the same session, and the client gets list_changed."""
    config = tmp_path / "guard.json"
    write(config, {"work": server_entry(counting)})
    inbox = Inbox()
    jobs = fixture_command("jobs_server")
    async with connect.guard_process(
        [], guard_args=["--config", str(config)], callbacks=Callbacks(message_handler=inbox)
    ) as guard:
        with anyio.fail_after(30):
            before = {tool.name for tool in (await guard.session.list_tools()).tools}
            write(config, {"work": {"command": jobs[0], "args": jobs[1:]}})
            await hangup(guard, 0)
            await inbox.wait_for(types.ToolListChangedNotification)
            after = {tool.name for tool in (await guard.session.list_tools()).tools}
            started = await guard.session.call_tool("start_job", {"pipeline": PIPELINE})
    assert "echo" in before
    assert "start_job" in after
    assert "echo" not in after
    assert not started.is_error


async def test_servers_are_added_and_removed_under_a_running_session_with_watch_config(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Two servers, then three (added), then two again (one removed): tools follow, the client is told each time."""
    config = tmp_path / "guard.json"
    jobs = fixture_command("jobs_server")
    two = {"a": server_entry(counting), "b": server_entry(counting)}
    write(config, two)
    inbox = Inbox()
    async with connect.guard_process(
        [], guard_args=["--config", str(config), "--watch-config"], callbacks=Callbacks(message_handler=inbox)
    ) as guard:
        with anyio.fail_after(40):
            first = {tool.name for tool in (await guard.session.list_tools()).tools}
            write(config, {**two, "jobs": {"command": jobs[0], "args": jobs[1:]}})
            await eventually(lambda: stderr_of(guard).count(RELOADED) == 1)
            await inbox.wait_for(types.ToolListChangedNotification)
            added = {tool.name for tool in (await guard.session.list_tools()).tools}
            started = await guard.session.call_tool("jobs__start_job", {"pipeline": PIPELINE})
            notified = len(inbox.of_type(types.ToolListChangedNotification))
            write(config, {"a": server_entry(counting), "jobs": {"command": jobs[0], "args": jobs[1:]}})
            await eventually(lambda: stderr_of(guard).count(RELOADED) == 2)
            await inbox.wait_for(types.ToolListChangedNotification, lambda _: True)
            await eventually(lambda: len(inbox.of_type(types.ToolListChangedNotification)) > notified)
            removed = {tool.name for tool in (await guard.session.list_tools()).tools}
            with pytest.raises(MCPError, match="Unknown tool: b__echo"):
                await guard.session.call_tool("b__echo", {"text": "x"})
            kept = await guard.session.call_tool("a__echo", {"text": "x"})
    assert {"a__echo", "b__echo"} <= first
    assert "jobs__start_job" not in first
    assert "jobs__start_job" in added
    assert not started.is_error
    assert "b__echo" not in removed
    assert {"a__echo", "jobs__start_job"} <= removed
    assert not kept.is_error
    log = stderr_of(guard)
    assert "servers added jobs" in log
    assert "servers removed b" in log


async def test_going_from_one_server_to_several_needs_a_restart(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Adding a second server to a one-server guard would rename every tool: rejected, and the guard serves on."""
    config = tmp_path / "guard.json"
    write(config, {"a": server_entry(counting)})
    async with connect.guard_process([], guard_args=["--config", str(config)]) as guard:
        with anyio.fail_after(30):
            write(config, {"a": server_entry(counting), "b": server_entry(counting)})
            await hangup(guard, 0, REJECTED)
            still = await guard.session.call_tool("echo", {"text": "x"})
    assert not still.is_error
    assert "needs a restart" in stderr_of(guard)


async def test_an_http_guard_reloads_thresholds_and_servers_for_open_sessions(
    rig: Rig, counting: CountingUpstream, tmp_path: Path
) -> None:
    """HTTP: the open session's next identical call is refused under new thresholds; an added server's tools appear."""
    config = tmp_path / "guard.json"
    jobs = fixture_command("jobs_server")
    two = {"a": server_entry(counting), "b": server_entry(counting)}
    write(config, two)
    env = {"LOOP_GUARD_STATE": "memory"}
    inbox = Inbox()
    three = {**two, "jobs": {"command": jobs[0], "args": jobs[1:]}}
    async with (
        serve_guard(["--config", str(config)], marker=rig.marker, stderr=rig.log("guard"), env=env) as guard,
        open_http_session(guard.mcp_url, callbacks=Callbacks(message_handler=inbox)) as http,
    ):
        session = http.session
        with anyio.fail_after(40):
            before = [action(await session.call_tool("a__echo", {"text": "same"})) for _ in range(2)]
            write(config, three, warnThreshold=2, blockThreshold=3)
            await sighup_http(guard)
            refused = await session.call_tool("a__echo", {"text": "same"})
            await inbox.wait_for(types.ToolListChangedNotification)
            names = {tool.name for tool in (await session.list_tools()).tools}
    assert before == [None, None]
    assert action(refused) == "block"
    assert "jobs__start_job" in names


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_a_rotated_token_keeps_the_guard_ready(rig: Rig, tmp_path: Path, transport: Transport) -> None:
    """The server's token changes and the config follows: /readyz stays 200 past the next health check.

    The guard's own session with the server (what /readyz reports) must ask with the
    headers the relay sends; with the old token the server answers its pings with 401.
    Over ``http`` the relay's probe shares its headers; for legacy SSE clients (``sse``, a
    session at the server per client's) the reload starts the probe again with the new ones.
    """
    token = tmp_path / "token"
    token.write_text("old")
    config = tmp_path / "guard.json"

    def entry(secret: str) -> dict[str, Any]:
        return {"type": "http", "url": counting.mcp_url, "headers": {"Authorization": f"Bearer {secret}"}}

    calls = tmp_path / "calls.jsonl"
    async with rig.counting_http(calls, "--token-file", str(token)) as counting:
        write(config, {"counting": entry("old")})
        argv = ["--config", str(config), "--health-interval-seconds", "1"]
        async with serve_guard(argv, marker=rig.marker, stderr=rig.log("guard"), transport=transport) as guard:
            before = await http_get(guard.url("/readyz"))
            rotated = len(read_json_lines(calls))
            token.write_text("new")
            write(config, {"counting": entry("new")})
            await sighup_http(guard)
            with anyio.fail_after(20):  # a health check (every second here) asks with the new token
                await eventually(lambda: admitted_pings(calls, rotated) > 0)
            after = await http_get(guard.url("/readyz"))
            opened = open_http_session(guard.mcp_url) if transport == "http" else open_sse_session(guard.url("/sse"))
            async with opened as client:
                with anyio.fail_after(20):
                    echoed = await client.session.call_tool("echo", {"text": "rotated"})
    assert before.status_code == 200, before.text
    assert after.status_code == 200, after.text
    assert texts(echoed) == ["rotated"]


def admitted_pings(log: Path, after: int) -> int:
    """Pings the counting server let in (sent with the token its file held) among its log's lines from ``after`` on."""
    requests = [entry for entry in read_json_lines(log)[after:] if entry["event"] == "request"]
    return sum(1 for entry in requests if entry["method"] == "ping" and entry["admitted"])


async def sighup_http(guard: ServerProcess) -> None:
    os.kill(guard.process.pid, signal.SIGHUP)
    with anyio.fail_after(20):
        await eventually(lambda: RELOADED in guard.stderr_text())


async def test_a_lowered_budget_counts_the_calls_already_made(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Three different calls under a budget of 10, then the file says 4: one more goes through, the next is refused."""
    config = tmp_path / "guard.json"
    write(config, {"counting": server_entry(counting)}, budgets=[{"tools": "echo", "maxCalls": 10}])
    async with connect.guard_process([], guard_args=["--config", str(config)]) as guard:
        with anyio.fail_after(30):
            for n in range(3):
                await guard.session.call_tool("echo", {"text": str(n)})
            write(config, {"counting": server_entry(counting)}, budgets=[{"tools": "echo", "maxCalls": 4}])
            await hangup(guard, 0)
            fourth = await guard.session.call_tool("echo", {"text": "3"})
            fifth = await guard.session.call_tool("echo", {"text": "4"})
    assert not fourth.is_error
    assert fifth.is_error
    assert "budget of 4 calls to `echo` per session is used up" in fifth.content[0].text  # type: ignore[union-attr]
