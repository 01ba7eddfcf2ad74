"""Where the guard runs: Linux and macOS; anywhere else, one line says so."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from mcp_loop_guard.posix import group_runs, signal_group, unsupported


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_linux_and_macos_are_supported(platform: str) -> None:
    """``sys.platform`` of Linux and macOS: no refusal."""
    assert unsupported(platform) is None


@pytest.mark.parametrize("platform", ["win32", "cygwin", "freebsd14", "aix", "emscripten"])
def test_any_other_system_gets_one_line_naming_it(platform: str) -> None:
    """Windows and the rest: one line naming the system and where the guard runs (WSL on Windows)."""
    line = unsupported(platform)
    assert line is not None
    assert "\n" not in line
    assert line.startswith("mcp-loop-guard: error: ")
    assert f"({platform})" in line
    assert "Linux and macOS" in line
    assert "WSL" in line


def test_a_group_of_ended_processes_not_yet_reaped_runs_no_more() -> None:
    """A group whose only member has ended but is not reaped (a zombie) still takes signals, yet runs no more."""
    ended = subprocess.Popen(["true"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(ended.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child did not end"
            time.sleep(0.01)
        assert signal_group(ended.pid, 0), "a zombie is still a member of its group"
        assert group_runs(ended.pid) is (sys.platform != "linux")  # only Linux shows the state
    finally:
        ended.wait(10)
    assert not group_runs(ended.pid)
