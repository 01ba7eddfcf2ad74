"""Operating the HTTP guard: readiness that follows the shared upstream child, shutdown, and JSON logs."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types

from tests.harness import Callbacks, Inbox, describe, eventually, fixture_command, texts, verdict
from tests.http_harness import (
    TIME_BIN,
    Rig,
    everything_stdio_entry,
    http_get,
    open_http_session,
    poll,
    time_entry,
    wait_gone,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def stdio_config(rig: Rig) -> Path:
    """A config with two stdio upstreams: mcp-server-time and server-everything."""
    return rig.config({"time": time_entry(), "everything_stdio": everything_stdio_entry()})


def json_lines(text: str) -> list[Any]:
    """Every non-empty line parsed as JSON; a line that is not JSON fails the test, naming it."""
    parsed: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"stderr line {number} is not JSON: {line!r}")
    return parsed


async def test_readyz_follows_a_killed_stdio_upstream(rig: Rig) -> None:
    """Killing the shared time server makes /readyz 503 naming it; once restarted it is 200 again and calls work."""
    inbox = Inbox()
    async with (
        rig.guard(["--config", str(stdio_config(rig))]) as guard,
        open_http_session(guard.mcp_url, callbacks=Callbacks(message_handler=inbox)) as client,
    ):
        with anyio.fail_after(10):
            ready_before = await http_get(guard.url("/readyz"))
        first_child = guard.child(TIME_BIN.name)
        first_child.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            down = await poll(
                lambda: http_get(guard.url("/readyz")), lambda response: response.status_code != 200, 0.02
            )
        with anyio.fail_after(30):
            back = await poll(lambda: http_get(guard.url("/readyz")), lambda response: response.status_code == 200)
            await inbox.wait_for(types.ToolListChangedNotification)
        with anyio.fail_after(10):
            now = await client.session.call_tool("time__get_current_time", {"timezone": "UTC"})
        second_child = guard.child(TIME_BIN.name)

    assert ready_before.status_code == 200, ready_before.text
    assert ready_before.json()["ready"] is True
    assert {name: entry["status"] for name, entry in ready_before.json()["upstreams"].items()} == {
        "time": "ready",
        "everything_stdio": "ready",
    }
    assert down.status_code == 503, down.text
    down_body = down.json()
    assert down_body["ready"] is False
    assert down_body["upstreams"]["time"]["status"] in {"down", "starting"}, down_body
    assert down_body["upstreams"]["everything_stdio"]["status"] == "ready", down_body
    back_body = back.json()
    assert back_body["ready"] is True
    assert back_body["upstreams"]["time"]["restarts"] >= 1, back_body
    assert second_child.pid != first_child.pid
    assert not now.is_error, texts(now)


async def test_sigterm_stops_upstreams_before_exit(rig: Rig) -> None:
    """On SIGTERM (what an init forwards) the guard stops its stdio upstreams and their process groups, then exits.

    The counting server leaves a grandchild that ignores stdin, so only the guard
    ending the upstream's process group stops it.
    """
    counting = fixture_command("counting_server", "--spawn-grandchild")
    config = rig.config({"time": time_entry(), "counting": {"command": counting[0], "args": counting[1:]}})
    async with rig.guard(["--config", str(config)]) as guard:
        with anyio.fail_after(10):
            await eventually(lambda: len(guard.descendants()) == 3)
        family = guard.descendants()
        names = describe(family)
        guard.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            status = await guard.process.wait()
        left = await wait_gone(family, 1)

    assert any(TIME_BIN.name in name for name in names), names
    assert any("counting_server.py" in name for name in names), names
    assert left == [], f"left running after the guard exited with status {status}: {describe(left)}"
    assert status in {0, 128 + signal.SIGTERM}, guard.stderr_text()


async def test_json_logs_from_the_guard(rig: Rig) -> None:
    """With LOOP_GUARD_LOG_FORMAT=json every stderr line of the guard is one JSON object with level and message."""
    env = {"LOOP_GUARD_LOG_FORMAT": "json", "LOOP_GUARD_LOG_LEVEL": "info"}
    args = ["--", str(TIME_BIN), "--local-timezone", "UTC"]
    async with rig.guard(args, env=env) as guard, open_http_session(guard.mcp_url) as client:
        with anyio.fail_after(15):
            results = [await client.session.call_tool("convert_time", _CONVERT) for _ in range(5)]
    entries = json_lines(guard.stderr_text())

    assert [None if (found := verdict(result)) is None else found["action"] for result in results] == [
        None,
        None,
        "warn",
        "warn",
        "block",
    ]
    assert entries, "the guard logged nothing"
    assert all(isinstance(entry, dict) for entry in entries)
    assert all({"level", "message"} <= entry.keys() for entry in entries), entries
    messages = " ".join(entry["message"] for entry in entries)
    assert "serving" in messages.lower(), messages
    assert any(entry["level"] == "warning" and "convert_time" in entry["message"] for entry in entries), entries


async def test_json_logs_include_upstream_stderr(rig: Rig) -> None:
    """With LOOP_GUARD_LOG_FORMAT=json, a stdio upstream's stderr lines also come out as JSON objects."""
    env = {"LOOP_GUARD_LOG_FORMAT": "json"}
    async with rig.guard(["--config", str(stdio_config(rig))], env=env) as guard:
        with anyio.fail_after(10):
            ready = await http_get(guard.url("/readyz"))
    text = guard.stderr_text()

    assert ready.status_code == 200, ready.text
    assert "Starting default (STDIO) server" in text, "server-everything announces itself on stderr"
    entries = json_lines(text)
    assert all(isinstance(entry, dict) for entry in entries)


_CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"}
