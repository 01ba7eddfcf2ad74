"""The command line's edges a new user meets first: the demo's help and settings, a misspelt subcommand."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from tests.harness import REAL_STATE, guard_argv, server_environment, stored

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def _run(marker: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``python -m mcp_loop_guard ARGS``: exit status, stdout, stderr."""
    with anyio.fail_after(90):
        done = await anyio.run_process(
            [*guard_argv(), *args],
            env=server_environment(marker, {"COLUMNS": "200", **(env or {})}),
            input=b"",
            check=False,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def _verdicts(timeline: str) -> list[str]:
    """The verdict column of the demo's timeline, one per call."""
    rows = [line.split("│") for line in timeline.splitlines() if line.startswith("│")]
    return [row[4].strip() for row in rows if row[1].strip().isdigit()]


async def test_demo_help_prints_the_demos_usage_and_runs_nothing(process_marker: str) -> None:
    """`demo --help` prints the demo's usage and its setting flags, exit 0, and starts no session nor loads the SDK
    (a second and a half of imports)."""
    status, out, err = await _run(process_marker, "demo", "--help")
    assert (status, err) == (0, "")
    assert out.startswith("usage: mcp-loop-guard demo")
    assert "--warn-threshold" in out
    assert "Timeline" not in out
    _, _, timed = await _run(process_marker, "demo", "--help", env={"PYTHONPROFILEIMPORTTIME": "1"})
    imported = {line.rpartition("|")[2].strip() for line in timed.splitlines() if line.startswith("import time:")}
    assert "argparse" in imported, timed[-2000:]  # the import times were written
    assert {"mcp", "mcp_types"}.isdisjoint(imported)


@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("environment", ["pass"] * 15),
        ("flag", ["pass"] * 9 + ["warn"] * 6),
    ],
)
async def test_the_demos_guard_takes_the_environment_and_flags(
    how: str, expected: list[str], process_marker: str, state_home: Path
) -> None:
    """LOOP_GUARD_MODE=shadow: no call warned or refused; --mode warn: warned, never refused; state kept where asked."""
    key = f"demo-{uuid.uuid4().hex}"
    env = {"LOOP_GUARD_AGENT_KEY": key}
    if how == "environment":
        env["LOOP_GUARD_MODE"] = "shadow"
    args = ["demo", "--mode", "warn"] if how == "flag" else ["demo"]
    status, out, err = await _run(process_marker, *args, env=env)
    assert status == 0, err
    assert _verdicts(out) == expected
    assert "Your settings change the rules (mode)" in out
    assert stored(state_home / "mcp-loop-guard", key)
    assert not stored(REAL_STATE, key)


@pytest.mark.parametrize(("typed", "meant"), [("stat", "state"), ("sttae", "state"), ("deno", "demo"), ("wrp", "wrap")])
async def test_a_first_word_one_edit_from_a_subcommand_is_refused(typed: str, meant: str, process_marker: str) -> None:
    """`mcp-loop-guard stat` does not run the system's stat as the server: it asks "did you mean `state`?", exit 2."""
    status, out, err = await _run(process_marker, typed, "list")
    assert (status, out) == (2, "")
    assert err.splitlines() == [
        f"mcp-loop-guard: error: unknown command `{typed}`: did you mean `{meant}`? "
        f"(to guard a program of that name, put -- first: mcp-loop-guard -- {typed} list)"
    ]


async def test_a_command_after_the_dashes_is_run_whatever_its_name(process_marker: str, tmp_path: Path) -> None:
    """`mcp-loop-guard -- stat FILE` runs stat as the server: its own output reaches the guard's log."""
    status, _, err = await _run(process_marker, "--", "stat", str(tmp_path / "missing"))
    assert "did you mean" not in err
    assert "stat: cannot statx" in err or "stat: cannot stat" in err
    assert status == 0
