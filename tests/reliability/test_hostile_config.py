"""Hostile config files: nested 100,000 deep, a FIFO, a device, a folder, too large, a number of 5,000 digits.

At start each stops the guard with one line naming the file and the problem (exit 2, no
traceback, nothing started). On reload (SIGHUP or ``--watch-config``) each is rejected,
logged, and the running config goes on serving: the guard neither dies nor freezes.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_loop_guard.config_file import MAX_CONFIG_BYTES
from tests.harness import Connector, CountingUpstream, GuardProcess, action, eventually, guard_argv, server_environment

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

REJECTED = "rejected, the running config stays"


def _deep(path: Path) -> None:
    path.write_text('{"mcpServers": {}, "loopGuard": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")


def _fifo(path: Path) -> None:
    os.mkfifo(path)


LARGE_DOCUMENT = '{"mcpServers": {"time": {"command": "mcp-server-time"}}}'


def _large(path: Path) -> None:
    """A valid config padded past the cap: refused for its size alone."""
    path.write_text(LARGE_DOCUMENT + " " * MAX_CONFIG_BYTES, encoding="utf-8")


def _digits(path: Path) -> None:
    path.write_text('{"loopGuard": {"warnThreshold": ' + "7" * 5000 + "}}", encoding="utf-8")


def _folder(path: Path) -> None:
    path.mkdir()


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deep": (_deep, "line 1: nested deeper than 100 levels"),
    "fifo": (_fifo, "not a regular file (a FIFO)"),
    "large": (_large, f"too large ({MAX_CONFIG_BYTES + len(LARGE_DOCUMENT):,} bytes; the limit is 4 MB)"),
    "digits": (_digits, "invalid JSON: a number of more than 4300 digits"),
    "folder": (_folder, "not a regular file (a folder)"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
async def test_a_hostile_config_stops_the_guard_at_start_with_one_line(
    kind: str, tmp_path: Path, process_marker: str
) -> None:
    """The guard exits 2 at once with one stderr line: the file and its problem, no traceback."""
    make, problem = HOSTILE[kind]
    config = tmp_path / "mcp.json"
    make(config)
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [*guard_argv(), "--config", str(config)],
            env=server_environment(process_marker, None),
            check=False,
        )
    lines = done.stderr.decode().splitlines()
    assert (done.returncode, done.stdout) == (2, b"")
    assert lines == [f"mcp-loop-guard: error: {config}: {problem}"]


def _device(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink(missing_ok=True)


def _replace(config: Path, make: Callable[[Path], None]) -> None:
    """Put a new file where the config was in one rename, as editors and config management do."""
    staged = config.with_name("staged")
    make(staged)
    staged.replace(config)


def _entry(counting: CountingUpstream) -> dict[str, Any]:
    return {"command": counting.command[0], "args": counting.command[1:], "env": counting.env}


def _stderr(guard: GuardProcess) -> str:
    return guard.connection.stderr.read_text(encoding="utf-8", errors="replace")


async def _still_serves(guard: GuardProcess) -> list[str | None]:
    """Three identical calls under the running config (warn from the 2nd): the guard is alive and judges."""
    return [action(await guard.session.call_tool("echo", {"text": "same"})) for _ in range(3)]


async def test_a_hostile_config_on_sighup_is_rejected_and_the_guard_serves_on(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """Every hostile file in turn, then SIGHUP: each is rejected with its problem logged; calls go on as before."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"c": _entry(counting)}, "loopGuard": {"warnThreshold": 2}}))
    kinds = [make for make, _ in HOSTILE.values()] + [_device]
    async with connect.guard_process([], guard_args=["--config", str(config)]) as guard:
        with anyio.fail_after(60):
            for seen, make in enumerate(kinds):
                _remove(config)
                make(config)
                os.kill(guard.process.pid, signal.SIGHUP)
                await eventually(lambda seen=seen: _stderr(guard).count(REJECTED) > seen)
            verdicts = await _still_serves(guard)
            alive = guard.process.returncode is None
    log = _stderr(guard)
    assert (verdicts, alive) == ([None, "warn", "warn"], True)
    for problem in [*(problem for _, problem in HOSTILE.values()), "not a regular file (a character device)"]:
        assert f"{config}: {problem}" in log
    assert "Traceback" not in log


async def test_watch_config_rejects_a_fifo_and_a_huge_file_without_freezing(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """With --watch-config, the config swapped for a FIFO, then for a file over the cap: both logged, calls answered."""
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"c": _entry(counting)}, "loopGuard": {"warnThreshold": 2}}))
    async with connect.guard_process([], guard_args=["--config", str(config), "--watch-config"]) as guard:
        with anyio.fail_after(60):
            _replace(config, _fifo)
            await eventually(lambda: _stderr(guard).count(REJECTED) > 0)
            _replace(config, _large)
            await eventually(lambda: _stderr(guard).count(REJECTED) > 1)
            verdicts = await _still_serves(guard)
    log = _stderr(guard)
    assert verdicts == [None, "warn", "warn"]
    assert f"{config}: not a regular file (a FIFO)" in log
    assert f"{config}: too large" in log
