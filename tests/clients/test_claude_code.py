"""Claude Code (``claude -p``) looping through the guard, driven by a scripted fake model.

Claude Code starts the guard again after the guard closed a looping session, so these
runs show whether a loop stays stopped across the restarts a real client makes.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.clients.claude_code import ClaudeCode, ClaudeRun
from tests.clients.fake_anthropic import FakeAnthropicAPI, Script, SeenResult
from tests.harness import MARKER, CountingUpstream, fixture_command, guard_argv, guard_command, read_json_lines

pytestmark = [pytest.mark.e2e, pytest.mark.anyio, pytest.mark.timeout(420)]

SERVER = "counting"
PROMPT = "Use the counting server's tool until you have what you need, then answer."
REAL_TEXT = "always the same"
"""What the counting server's ``constant`` tool returns."""
ABORT_NOTE = "closing this session"
"""Part of the refusal after which the guard closes the session."""
RESTARTED = 4
"""Guards Claude Code starts, at least, over a loop of 20 identical calls: the loop outlives several restarts."""
CONNECTION_CLOSED = SeenResult(("MCP error -32000: Connection closed",), is_error=True)
"""What Claude Code gives the model for a call that was in flight when the server exited."""


async def _drive(
    claude_code: ClaudeCode, counting: CountingUpstream, guard_env: dict[str, str], tool: str, calls: int
) -> tuple[list[SeenResult], ClaudeRun]:
    """Runs Claude Code with the guard in front of the counting server, the model calling one tool `calls` times."""
    config = claude_code.mcp_config(SERVER, guard_command(counting.command), guard_env)
    script = Script(tool=f"mcp__{SERVER}__{tool}", arguments={}, calls=calls)
    api = FakeAnthropicAPI(script)
    with api.serving():
        run = await claude_code.run_served(PROMPT, api, mcp_config=config, allowed_tools=[script.tool])
    seen = api.results()
    context = f"{run.describe()}\n--- API requests ---\n{api.describe()}"
    assert run.returncode == 0, context
    assert run.result().get("result") == script.final_text, context
    assert len(seen) == calls, context
    return seen, run


def _assert_stopped_at_fifth(seen: list[SeenResult], counting: CountingUpstream, run: ClaudeRun) -> None:
    """The real result at calls 1-2, plus a warning at 3-4, refusals from 5 on, and 4 calls upstream."""
    shown = "\n".join(f"call {n}: error={result.is_error} {result.text!r}" for n, result in enumerate(seen, 1))
    context = f"what the model saw:\n{shown}\nClaude Code started the server {run.server_starts(SERVER)} times"
    for real in seen[:2]:
        assert real == SeenResult((REAL_TEXT,), is_error=False), context
    for warned in seen[2:4]:
        assert not warned.is_error, context
        assert warned.texts[0] == REAL_TEXT, context
        assert [text.startswith(MARKER) for text in warned.texts[1:]] == [True], context
    for refused in seen[4:7]:
        assert refused.is_error, context
        assert refused.text.startswith(MARKER), context
    assert ABORT_NOTE in seen[6].text, context
    after_abort = [n for n, result in enumerate(seen, 1) if n > 7 and (not result.is_error or REAL_TEXT in result.text)]
    reached = len(counting.calls("constant"))
    assert (reached, after_abort) == (4, []), (
        f"{reached} calls reached the upstream; the real result came back after the abort at calls {after_abort}\n"
        f"{context}"
    )


async def test_twenty_identical_calls_stay_stopped(
    claude_code: ClaudeCode, counting: CountingUpstream, guard_env: dict[str, str]
) -> None:
    """20 identical calls from Claude Code: warned at 3, refused from 5, and across its restarts of the server
    only 4 ever reach the upstream."""
    # Each restart after the abort costs the guard's 2 s abort linger (Claude Code does not close the
    # guard's stdin when its stdout ends): 20 calls make about 6 restarts, each like the one before.
    seen, run = await _drive(claude_code, counting, guard_env, "constant", 20)
    _assert_stopped_at_fifth(seen, counting, run)
    assert run.server_starts(SERVER) >= RESTARTED, run.describe()


async def test_polling_tool_never_warned(
    claude_code: ClaudeCode, counting: CountingUpstream, guard_env: dict[str, str]
) -> None:
    """A tool whose result changes on every call passes 10 times from Claude Code with no note and no refusal."""
    seen, _ = await _drive(claude_code, counting, guard_env, "ticker", 10)
    # Claude Code 2.1 shows the model a result's structuredContent, as JSON, when it has one.
    assert seen == [SeenResult((json.dumps({"tick": n}, separators=(",", ":")),), is_error=False) for n in range(1, 11)]
    assert len(counting.calls("ticker")) == 10


async def test_server_lifecycle_under_claude_code(claude_code: ClaudeCode, tmp_path: Path) -> None:
    """Claude Code runs each server as its own direct child, starts another after one quits, stops it with SIGINT."""
    log = tmp_path / "lifecycle.jsonl"
    env = {"LINE_SERVER_LOG": str(log), "LIFECYCLE_SERVER_FLAG": str(tmp_path / "quit-once.flag")}
    config = claude_code.mcp_config("probe", fixture_command("lifecycle_server"), env)
    script = Script(tool="mcp__probe__quit_once", arguments={}, calls=3)
    api = FakeAnthropicAPI(script)
    with api.serving():
        run = await claude_code.run(PROMPT, api_url=api.url, mcp_config=config, allowed_tools=[script.tool])
    events = [entry for entry in read_json_lines(log) if "event" in entry]
    seen = api.results()
    context = f"events: {events}\nseen: {seen}\n{run.describe()}"
    assert run.returncode == 0, context
    starts = [entry for entry in events if entry["event"] == "start"]
    # A direct child of the claude process, in its process group and session: no shell, no setsid.
    assert [(s["ppid"], s["pgid"], s["sid"]) for s in starts] == [(run.pid, run.pid, run.pid)] * 2, context
    first, second = (start["pid"] for start in starts)
    # The first ended on its own, after answering; the second was still running when Claude Code exited.
    assert [(e["event"], e.get("status")) for e in events if e["pid"] == first][1:] == [("exit", 3)], context
    assert seen[0] == SeenResult(("quitting",), is_error=False), context
    # A call sent while the first server was exiting gets an error; a call made after it ended starts a new one.
    assert seen[1] in (SeenResult(("still here",), is_error=False), CONNECTION_CLOSED), context
    assert seen[2] == SeenResult(("still here",), is_error=False), context
    # At its own exit, for a "type": "stdio" server, Claude Code sends SIGINT before anything else.
    assert [(e["event"], e.get("name")) for e in events if e["pid"] == second][1:] == [("signal", "SIGINT")], context


async def test_a_wrapped_project_config_runs_its_server_behind_the_guard(
    claude_code: ClaudeCode, counting: CountingUpstream, guard_env: dict[str, str], tmp_path: Path
) -> None:
    """``wrap --write`` on a project's .mcp.json: Claude Code then runs the server behind the guard; unwrap undoes."""
    plain = claude_code.mcp_config(SERVER, counting.command, guard_env)
    config = tmp_path / "project" / ".mcp.json"
    config.parent.mkdir()
    original = plain.read_bytes()
    config.write_bytes(original)
    wrapped = await _cli("wrap", "--write", str(config))
    entry = json.loads(config.read_text(encoding="utf-8"))["mcpServers"][SERVER]
    assert Path(entry["command"]).name == "mcp-loop-guard", wrapped
    assert entry["args"] == ["--", *counting.command]

    script = Script(tool=f"mcp__{SERVER}__constant", arguments={}, calls=5)
    api = FakeAnthropicAPI(script)
    with api.serving():
        run = await claude_code.run_served(PROMPT, api, mcp_config=config, allowed_tools=[script.tool])
    seen = api.results()
    assert run.returncode == 0, run.describe()
    assert [result.is_error for result in seen] == [False, False, False, False, True], seen
    assert [any(text.startswith(MARKER) for text in result.texts) for result in seen] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert len(counting.calls("constant")) == 4

    await _cli("unwrap", "--write", str(config))
    assert config.read_bytes() == original


async def _cli(*args: str) -> str:
    """``mcp-loop-guard ARGS`` as a user runs it; what it printed (it must succeed)."""
    with anyio.fail_after(60):
        done = await anyio.run_process([*guard_argv(), *args], check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()
