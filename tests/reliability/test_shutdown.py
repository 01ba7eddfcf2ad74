"""Shutdown on stdio: SIGTERM, SIGINT and stdin EOF stop every upstream process group and the
guard exits promptly, with 128 + the signal's number after a signal. On stdin EOF the upstream's
stdin is closed, then SIGTERM and SIGKILL follow after a grace each; a signal reaches the group
as SIGTERM at once. Every process is counted before and after.
"""

from __future__ import annotations

import json
import signal
import sys
from contextlib import suppress
from pathlib import Path

import anyio
import psutil
import pytest

from tests.harness import (
    FIXTURES_DIR,
    command_process,
    describe,
    eventually,
    fixture_command,
    marked_processes,
    read_json_lines,
    wait_processes_gone,
)
from tests.reliability.wire import RawConnector, RawGuard, received

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

HOW = ["SIGTERM", "SIGINT", "stdin EOF"]
EXPECTED_STATUS = {"SIGTERM": 128 + signal.SIGTERM, "SIGINT": 128 + signal.SIGINT, "stdin EOF": 0}
UPSTREAM_SEES = {"SIGTERM": ("signal", "SIGTERM"), "SIGINT": ("signal", "SIGTERM"), "stdin EOF": ("eof", None)}
"""How a server that exits on stdin EOF and on signals learns that the guard stops: a signal is passed on at once."""


async def _stop(guard: RawGuard, how: str) -> None:
    if how == "stdin EOF":
        await guard.close_stdin()
    else:
        guard.signal(signal.Signals[how])


async def _family_of_three(guard: RawGuard) -> list[psutil.Process]:
    """The guard, its upstream and the upstream's grandchild, once all three run."""
    with anyio.fail_after(10):
        await eventually(lambda: len(guard.family()) == 3)
    family = guard.family()
    assert sorted(p.pid for p in family) == sorted(p.pid for p in marked_processes(guard.marker)), describe(family)
    return family


@pytest.mark.parametrize("how", HOW)
async def test_stop_ends_every_upstream_process(raw_guard: RawConnector, how: str) -> None:
    """The guard, its upstream and the upstream's grandchild run; after the stop, none does, within 5 s."""
    command = fixture_command("counting_server", "--spawn-grandchild")
    async with raw_guard(command) as guard:
        with anyio.fail_after(10):
            await guard.assert_serving()
        before = await _family_of_three(guard)
        stopped_at = anyio.current_time()
        await _stop(guard, how)
        status = await guard.wait_exit(within=5)
        took = anyio.current_time() - stopped_at
        survivors = await wait_processes_gone(guard.marker, within=1)

    assert survivors == [], f"left running: {describe(survivors)} (before: {describe(before)})"
    assert status == EXPECTED_STATUS[how], guard.stderr_text()
    assert took < 5, f"exited {took:.1f}s after {how}"


async def test_stubborn_upstream_is_killed_after_the_grace(raw_guard: RawConnector) -> None:
    """An upstream (and grandchild) ignoring stdin EOF and SIGTERM, with a call in flight, is SIGKILLed in time."""
    command = fixture_command("hanging_server", "--stubborn", "--spawn-grandchild")
    async with raw_guard(command) as guard:
        await guard.send({"jsonrpc": "2.0", "id": "stuck", "method": "tools/call", "params": {"name": "hang"}})
        with anyio.fail_after(10):
            await guard.assert_serving()
        before = await _family_of_three(guard)
        stopped_at = anyio.current_time()
        guard.signal(signal.SIGTERM)
        status = await guard.wait_exit(within=10)
        took = anyio.current_time() - stopped_at
        survivors = await wait_processes_gone(guard.marker, within=1)

    assert survivors == [], f"left running: {describe(survivors)} (before: {describe(before)})"
    assert status == EXPECTED_STATUS["SIGTERM"], guard.stderr_text()
    # A grace after stdin closes, another after SIGTERM to the group: about 4 s, then SIGKILL.
    assert took < 8, f"exited {took:.1f}s after SIGTERM"


@pytest.mark.parametrize("how", ["SIGTERM", "stdin EOF"])
async def test_stop_while_the_upstream_never_answered_initialize(
    raw_guard: RawConnector, line_log: Path, how: str
) -> None:
    """With the client's initialize stuck on an upstream that never answers, a stop still ends everything at once."""
    command = fixture_command("silent_server")
    async with raw_guard(command, env={"LINE_SERVER_LOG": str(line_log)}, initialize=False) as guard:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "stuck", "version": "0"}}
        await guard.send({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": params})
        with anyio.fail_after(10):
            await eventually(lambda: any(m.get("method") == "initialize" for m in received(line_log)))
        assert len(guard.family()) == 2, describe(guard.family())
        stopped_at = anyio.current_time()
        await _stop(guard, how)
        with suppress(TimeoutError):
            await guard.wait_exit(within=5)
        status = guard.process.returncode
        took = anyio.current_time() - stopped_at
        survivors = await wait_processes_gone(guard.marker, within=1)

    assert status is not None, f"the guard was still running {took:.1f}s after {how}: {guard.stderr_text()}"
    assert status == EXPECTED_STATUS[how], guard.stderr_text()
    assert survivors == [], f"left running: {describe(survivors)}"


@pytest.mark.parametrize("how", HOW)
async def test_an_upstream_is_gone_before_the_guard_by_eof_or_the_signal_passed_on(
    raw_guard: RawConnector, line_log: Path, how: str
) -> None:
    """On EOF the upstream's stdin closes first and it exits unsignalled; a signal reaches it as SIGTERM at once."""
    command = fixture_command("lifecycle_server")
    async with raw_guard(command, env={"LINE_SERVER_LOG": str(line_log)}) as guard:
        upstream = guard.upstream()
        await _stop(guard, how)
        status = await guard.wait_exit(within=5)
        upstream_left = upstream.is_running() and upstream.status() != psutil.STATUS_ZOMBIE
        events = [(entry["event"], entry.get("name")) for entry in read_json_lines(line_log) if "event" in entry]

    assert status == EXPECTED_STATUS[how], guard.stderr_text()
    assert not upstream_left, f"the upstream outlived the guard: {describe([upstream])}"
    # On EOF it saw its stdin close and ended by itself: no SIGTERM or SIGKILL was needed, so no grace was
    # waited. On a signal the client is in a hurry (a second signal or SIGKILL follows): SIGTERM, and nothing else.
    assert events == [("start", None), UPSTREAM_SEES[how]], events


@pytest.mark.parametrize("how", HOW)
async def test_several_upstreams_are_gone_before_the_guard_by_eof_or_the_signal_passed_on(
    raw_guard: RawConnector, tmp_path: Path, how: str
) -> None:
    """Two stdio upstreams (the aggregating path): both see their stdin close (or get SIGTERM) and exit first."""
    logs = {name: tmp_path / f"{name}.jsonl" for name in ("first", "second")}
    servers = {
        name: {
            "command": sys.executable,
            "args": [str(FIXTURES_DIR / "lifecycle_server.py")],
            "env": {"LINE_SERVER_LOG": str(log)},
        }
        for name, log in logs.items()
    }
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    async with raw_guard([], guard_args=["--config", str(config)]) as guard:
        upstreams = [child for child in command_process(guard.process.pid).children() if child.is_running()]
        await _stop(guard, how)
        status = await guard.wait_exit(within=5)
        left = [process for process in upstreams if process.is_running() and process.status() != psutil.STATUS_ZOMBIE]

    assert status == EXPECTED_STATUS[how], guard.stderr_text()
    assert len(upstreams) == 2, describe(upstreams)
    assert left == [], f"upstreams outlived the guard: {describe(left)}"
    for log in logs.values():
        events = [(entry["event"], entry.get("name")) for entry in read_json_lines(log) if "event" in entry]
        assert events == [("start", None), UPSTREAM_SEES[how]], events
