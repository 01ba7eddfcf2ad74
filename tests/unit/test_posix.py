"""Where the guard runs: Linux and macOS; anywhere else, one line says so."""

from __future__ import annotations

import pytest

from mcp_loop_guard.posix import unsupported


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
