"""How the guard process starts, ends and survives its upstream: exit codes and leftover processes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from tests.harness import (
    ABORT_EXIT_CODE,
    MARKER,
    Callbacks,
    Connector,
    CountingUpstream,
    GuardProcess,
    Inbox,
    describe,
    eventually,
    texts,
    verdict,
    wait_processes_gone,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

# A signal-killed upstream may be reported as -9, signal 9 or SIGKILL.
KILLED_STATUS = re.compile(r"-9\b|signal 9\b|SIGKILL", re.IGNORECASE)


def _names_command(text: str, command: list[str]) -> bool:
    """Whether an error text names the upstream command (its executable or its script)."""
    return any(Path(part).name in text for part in command)


async def _assert_nothing_left(guard: GuardProcess) -> None:
    survivors = await wait_processes_gone(guard.marker, within=5)
    assert survivors == [], f"processes left behind: {describe(survivors)}"


async def _still_answers(guard: GuardProcess) -> None:
    """Asserts the guard still answers requests: a ping gets a response, success or error."""
    try:
        await guard.session.send_ping()
    except MCPError as error:
        code = error.error.code
    else:
        return
    assert code != types.CONNECTION_CLOSED, "the guard closed the connection"


async def test_abort_after_three_refusals(connect: Connector, counting: CountingUpstream) -> None:
    """The 3rd refusal gets its result, then the session closes, the guard exits 3 and no process is left."""
    command = [*counting.command, "--spawn-grandchild"]
    async with connect.guard_process(command, env=counting.env) as guard:
        with anyio.fail_after(15):
            results = [await guard.session.call_tool("constant", {}) for _ in range(7)]
        with anyio.fail_after(5), pytest.raises(MCPError) as closed:
            await guard.session.send_ping()
        with anyio.fail_after(10):
            status = await guard.wait_exit()
        await _assert_nothing_left(guard)
        stderr = guard.connection.stderr_text()

    assert closed.value.error.code == types.CONNECTION_CLOSED
    actions = [None if (found := verdict(result)) is None else found["action"] for result in results]
    assert actions[:5] == [None, None, "warn", "warn", "block"]
    assert actions[5] == "block"
    assert actions[6] in {"block", "abort"}
    assert all(result.is_error for result in results[4:])
    assert texts(results[6])[0].startswith(MARKER)
    assert status == ABORT_EXIT_CODE, stderr
    aborted_lines = [line for line in stderr.splitlines() if "aborted" in line.lower()]
    assert len(aborted_lines) == 1, stderr
    assert len(counting.calls()) == 4


async def test_closing_stdin_ends_everything(connect: Connector, counting: CountingUpstream) -> None:
    """When the client closes stdin, the guard ends its upstream's whole process group and exits 0."""
    inbox = Inbox()
    command = [*counting.command, "--spawn-grandchild"]
    async with connect.guard_process(
        command, env=counting.env, guard_args=["--log-level", "debug"], callbacks=Callbacks(message_handler=inbox)
    ) as guard:
        with anyio.fail_after(5):
            echoed = await guard.session.call_tool("echo", {"text": "hello"})
        upstream = guard.upstream()
        assert len(upstream.children()) == 1, "the counting server should have started its grandchild"
        await guard.close_stdin()
        with anyio.fail_after(10):
            status = await guard.wait_exit()
        await _assert_nothing_left(guard)
        stderr = guard.connection.stderr_text()

    assert texts(echoed) == ["hello"]
    assert status == 0, stderr
    assert "counting-server: grandchild pid" in stderr, "the upstream's stderr should reach the guard's stderr"
    assert [message for message in inbox.messages if isinstance(message, Exception)] == [], (
        "stdout must carry only protocol messages"
    )


async def test_upstream_crash_reported(connect: Connector, counting: CountingUpstream) -> None:
    """An upstream dying mid-call gives that call and later ones a clear error naming it, and the guard stays up."""
    async with connect.guard_process(counting.command, env=counting.env) as guard:
        with anyio.fail_after(3):
            crashed = await guard.session.call_tool("crash", {})
        with anyio.fail_after(3):
            later = await guard.session.call_tool("echo", {"text": "anyone there?"})
        with anyio.fail_after(3):
            await _still_answers(guard)
        assert guard.process.returncode is None, "the guard must stay up when its upstream dies"

    for result in (crashed, later):
        assert result.is_error
        text = " ".join(texts(result))
        assert _names_command(text, counting.command), text
        assert re.search(r"\b17\b", text), text
    assert [call["tool"] for call in counting.calls()] == ["crash"]


async def test_killed_upstream_fails_pending_call(connect: Connector, counting: CountingUpstream) -> None:
    """Killing the upstream during a long call answers that call with a clear error within two seconds."""
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    async with connect.guard_process(counting.command, env=counting.env) as guard:
        result: types.CallToolResult | None = None

        async def call_slow() -> None:
            nonlocal result
            result = await guard.session.call_tool("slow", {"seconds": 60}, progress_callback=on_progress)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_slow)
            with anyio.fail_after(10):
                await progressed.wait()
            guard.upstream().send_signal(signal.SIGKILL)
            with anyio.fail_after(2):
                await eventually(lambda: result is not None, interval=0.01)
        with anyio.fail_after(3):
            await _still_answers(guard)
        assert guard.process.returncode is None, "the guard must stay up when its upstream dies"

    assert result is not None
    assert result.is_error
    text = " ".join(texts(result))
    assert _names_command(text, counting.command), text
    assert KILLED_STATUS.search(text), text


async def test_use_terminate_aborts_at_first_refusal(connect: Connector, counting: CountingUpstream) -> None:
    """With --use-terminate the first refusal ends the session: its result arrives, then the guard exits 3."""
    async with connect.guard_process(counting.command, env=counting.env, guard_args=["--use-terminate"]) as guard:
        with anyio.fail_after(10):
            results = [await guard.session.call_tool("constant", {}) for _ in range(5)]
        with anyio.fail_after(10):
            status = await guard.wait_exit()
        await _assert_nothing_left(guard)
        stderr = guard.connection.stderr_text()
    assert [result.is_error for result in results] == [False, False, False, False, True]
    assert texts(results[4])[0].startswith(MARKER)
    assert status == ABORT_EXIT_CODE, stderr
    assert len(counting.calls()) == 4


async def test_cwd_flag_sets_upstream_directory(connect: Connector, counting: CountingUpstream, tmp_path: Path) -> None:
    """--cwd runs the upstream in the given directory."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()
    async with connect(counting.command, env=counting.env, guard_args=["--cwd", str(workdir)]) as conn:
        with anyio.fail_after(5):
            result = await conn.session.call_tool("cwd", {})
    assert texts(result) == [str(workdir)]


_HTTP_CLIENT = (
    "mcp_loop_guard.proxy.upstream.http_lines",
    "mcp_loop_guard.proxy.upstream.sse_lines",
    "mcp_loop_guard.proxy.upstream.http11",
)


async def test_stdio_guard_loads_only_what_a_stdio_server_needs(connect: Connector, counting: CountingUpstream) -> None:
    """In front of a stdio server the guard loads neither the MCP SDK, its own HTTP client nor the router of several
    servers: every module is memory in each of the guards a user runs (one per server)."""
    server = ["env", "-u", "PYTHONPROFILEIMPORTTIME", *counting.command]  # the server's imports are not the guard's
    async with connect(server, env={**counting.env, "PYTHONPROFILEIMPORTTIME": "1"}) as conn:
        with anyio.fail_after(10):
            first = await conn.session.call_tool("echo", {"text": "one"})
            second = await conn.session.call_tool("echo", {"text": "two"})
        lines = conn.stderr_text().splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    assert texts(first) == ["one"]
    assert texts(second) == ["two"]
    assert "mcp_loop_guard.proxy.relay.pipe" in imported  # the import list is the guard's, and complete
    assert {name for name in imported if name.split(".")[0] in ("mcp", "mcp_types")} == set()
    assert imported.isdisjoint(_HTTP_CLIENT)
    assert {name for name in imported if name.startswith("mcp_loop_guard.proxy.upstream.router")} == set()


async def test_on_an_unsupported_system_the_guard_starts_nothing_and_says_so_in_one_line(tmp_path: Path) -> None:
    """As on Windows (``sys.platform`` set before the CLI runs): exit 2, one stderr line, no traceback, no upstream."""
    started = tmp_path / "upstream-started"
    upstream = [sys.executable, "-c", f"open({str(started)!r}, 'w').close()"]
    as_windows = "import sys; sys.platform = 'win32'; from mcp_loop_guard.cli import main; raise SystemExit(main())"
    with anyio.fail_after(30):
        result = await anyio.run_process(
            [sys.executable, "-c", as_windows, "--", *upstream], stdin=subprocess.DEVNULL, check=False
        )
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1, lines
    assert "(win32) is not supported" in lines[0], lines
    assert result.stdout == b""
    assert not started.exists(), "the upstream was started"
