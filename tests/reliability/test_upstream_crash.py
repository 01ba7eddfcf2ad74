"""An upstream that dies: calls in flight fail fast with the reason, the next call after a
backoff delay restarts it, the client hears if its tools changed, and loop state survives.
In HTTP mode a supervisor restarts a shared stdio upstream and /readyz shows it. What the
model reads names the server and how it ended; its command line and last stderr lines
(which may hold a path or a secret) are in the guard's log only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_loop_guard.redaction import program_name
from tests.harness import MARKER, Callbacks, Inbox, fixture_command, read_json_lines, texts
from tests.http_harness import Rig, http_get, open_http_session, poll
from tests.reliability.wire import RawConnector, RawGuard, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

CRASHING = fixture_command("crashing_server")
PROGRAM = program_name(CRASHING[0])
"""How the guard names a server started as ``-- COMMAND`` to clients: its program alone."""
LAST_WORDS = ("crashing-server: about to fail", "crashing-server: simulated disk failure")
VERDICT_KEY = "mcp-loop-guard/verdict"
SECRET = "sk-live-ARGUMENT-9d41c7"  # noqa: S105 - a made-up key whose leaks the test looks for


@pytest.fixture
def starts(tmp_path: Path) -> Path:
    """The file where the crashing server notes each of its starts."""
    return tmp_path / "starts.txt"


def _start_count(starts: Path) -> int:
    return len(starts.read_text(encoding="utf-8").splitlines()) if starts.exists() else 0


def _assert_names_the_crash(answer: dict[str, Any], status: int, name: str = PROGRAM) -> None:
    """The answer is the guard's isError result naming the server and its exit status, not its command or stderr."""
    result = answer.get("result") or {}
    assert result.get("isError") is True, answer
    [text] = result_texts(answer)
    assert text.startswith(MARKER), text
    assert f"upstream `{name}` exited with status {status}" in text, text
    assert "crashing_server.py" not in text, text
    for line in LAST_WORDS:
        assert line not in text, text


async def _send_call(guard: RawGuard, name: str, arguments: dict[str, Any]) -> str:
    request_id = guard.new_id()
    await guard.send(
        {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    )
    return request_id


async def test_crash_fails_every_call_in_flight_within_two_seconds(
    raw_guard: RawConnector, starts: Path, tmp_path: Path
) -> None:
    """When the upstream dies, each call in flight gets an error naming it, its exit status and last stderr lines."""
    log = tmp_path / "line-server.jsonl"
    env = {"CRASHING_SERVER_STARTS": str(starts), "LINE_SERVER_LOG": str(log)}
    async with raw_guard(CRASHING, env=env) as guard:
        waiting = [await _send_call(guard, "wait", {"seconds": 60}) for _ in range(3)]
        crash = await _send_call(guard, "crash", {"status": 23})
        crashed_at = anyio.current_time()
        answers = [await guard.response(request_id, within=2) for request_id in (*waiting, crash)]
        within = anyio.current_time() - crashed_at
        assert guard.process.returncode is None, "the guard must outlive its upstream"

    for answer in answers:
        _assert_names_the_crash(answer, 23)
    assert within < 2
    logged = guard.stderr_text()
    assert f"upstream `{PROGRAM}` (`{CRASHING[0]}" in logged, "the log names the command line"
    for line in LAST_WORDS:
        assert line in logged
    received = [entry["message"].get("params", {}).get("name") for entry in read_json_lines(log)]
    assert received.count("wait") == 3


async def test_restart_after_backoff_keeps_loop_state_and_announces_new_tools(
    raw_guard: RawConnector, starts: Path
) -> None:
    """Calls fail at once until a backoff delay (>= 1 s) has passed; then one restarts the upstream, a streak
    built before the crash goes on, and the client gets list_changed for the restarted server's other tools."""
    env = {"CRASHING_SERVER_STARTS": str(starts), "CRASHING_SERVER_VARY_TOOLS": "1"}
    async with raw_guard(CRASHING, env=env) as guard:
        with anyio.fail_after(10):
            listed_before = await guard.request("tools/list")
            streak = [await guard.call_tool("constant", {}) for _ in range(2)]
            crashed = await guard.call_tool("crash", {})
        crashed_at = anyio.current_time()
        failed: list[tuple[float, dict[str, Any]]] = []
        with anyio.fail_after(10):
            while True:
                asked = anyio.current_time()
                after = await guard.call_tool("constant", {})
                if not (after.get("result") or {}).get("isError"):
                    break
                failed.append((anyio.current_time() - asked, after))
                await anyio.sleep(0.05)
        restarted_after = anyio.current_time() - crashed_at
        with anyio.fail_after(10):
            changed = await guard.wait_for(lambda message: message.get("method") == "notifications/tools/list_changed")
            listed_after = await guard.request("tools/list")
        started = _start_count(starts)

    assert [answer["result"].get("_meta") for answer in streak] == [None, None]
    _assert_names_the_crash(crashed, 17)
    assert failed, "a call right after the crash must fail, not restart the upstream at once"
    for seconds, answer in failed:
        _assert_names_the_crash(answer, 17)
        assert seconds < 0.5, f"a call during the backoff waited {seconds:.2f}s instead of failing at once"
    assert restarted_after >= 1.0, f"restarted {restarted_after:.2f}s after the crash"
    assert restarted_after < 6.0, f"restarted only {restarted_after:.2f}s after the crash"
    assert started == 2, f"{started} starts: the upstream was restarted more than once"
    # The identical call after the restart is the third in a row: the streak survived the crash.
    verdict = (after["result"].get("_meta") or {}).get(VERDICT_KEY) or {}
    assert (verdict.get("action"), verdict.get("streak")) == ("warn", 3), after
    assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    names_before = {tool["name"] for tool in listed_before["result"]["tools"]}
    names_after = {tool["name"] for tool in listed_after["result"]["tools"]}
    assert names_before - names_after == {"generation_1"}
    assert names_after - names_before == {"generation_2"}


async def test_http_supervisor_restarts_a_shared_upstream(rig: Rig, starts: Path) -> None:
    """Over HTTP the call in flight gets the crash reason, /readyz turns 503 with it, then 200 after a restart."""
    entry = {"command": CRASHING[0], "args": CRASHING[1:], "env": {"CRASHING_SERVER_STARTS": str(starts)}}
    config = rig.config({"crashy": entry})
    inbox = Inbox()
    async with (
        rig.guard(["--config", str(config)]) as guard,
        open_http_session(guard.mcp_url, callbacks=Callbacks(message_handler=inbox)) as client,
    ):
        with anyio.fail_after(10):
            ready_before = await http_get(guard.url("/readyz"))
        crashed_at = anyio.current_time()
        with anyio.fail_after(2):
            crashed = await client.session.call_tool("crash", {"status": 17})
        with anyio.fail_after(5):
            down = await poll(
                lambda: http_get(guard.url("/readyz")), lambda response: response.status_code != 200, 0.02
            )
        with anyio.fail_after(15):
            back = await poll(lambda: http_get(guard.url("/readyz")), lambda response: response.status_code == 200)
        restarted_after = anyio.current_time() - crashed_at
        with anyio.fail_after(10):
            echoed = await client.session.call_tool("echo", {"text": "back"})

    assert ready_before.status_code == 200, ready_before.text
    assert crashed.is_error
    _assert_names_the_crash({"result": crashed.model_dump(mode="json", by_alias=True)}, 17, "crashy")
    assert down.status_code == 503, down.text
    detail = down.json()["upstreams"]["crashy"]
    assert detail["status"] in {"down", "starting"}, detail
    assert "exited with status 17" in json.dumps(detail), detail
    assert back.json()["upstreams"]["crashy"]["restarts"] == 1, back.text
    assert restarted_after >= 0.5, f"restarted {restarted_after:.2f}s after the crash: no backoff"
    assert texts(echoed) == ["back"]
    assert _start_count(starts) == 2
    assert not [message for message in inbox.messages if isinstance(message, Exception)]


@pytest.mark.parametrize("front", ["stdio guard", "HTTP guard, one server", "HTTP guard, two servers"])
async def test_a_secret_in_the_command_or_its_stderr_reaches_only_the_log(
    raw_guard: RawConnector, rig: Rig, front: str
) -> None:
    """A key in a server's arguments, echoed on its stderr as it dies: in the guard's log, not what the model reads."""
    command = [*CRASHING, "--api-key", SECRET]
    if front == "stdio guard":
        async with raw_guard(command) as guard:
            with anyio.fail_after(10):
                crashed = await guard.call_tool("crash", {"status": 9})
                after = await guard.call_tool("constant", {})
            told = json.dumps([crashed, after])
            logged = guard.stderr_text()
        name = PROGRAM
    else:
        servers = {"crashy": {"command": command[0], "args": command[1:]}}
        if front == "HTTP guard, two servers":
            servers["other"] = {"command": CRASHING[0], "args": CRASHING[1:]}
        prefix = "" if len(servers) == 1 else "crashy__"
        async with (
            rig.guard(["--config", str(rig.config(servers))]) as guard,
            open_http_session(guard.mcp_url) as client,
        ):
            with anyio.fail_after(10):
                result = await client.session.call_tool(f"{prefix}crash", {"status": 9})
                later = await client.session.call_tool(f"{prefix}constant", {})
            told = json.dumps([result.model_dump(mode="json"), later.model_dump(mode="json")])
            with anyio.fail_after(10):
                while SECRET not in guard.stderr_text():  # noqa: ASYNC110 - another process writes it
                    await anyio.sleep(0.05)
            logged = guard.stderr_text()
        name = "crashy"
    assert f"upstream `{name}` exited with status 9" in told, told
    assert SECRET not in told, told
    assert "crashing_server.py" not in told, told
    assert f"--api-key {SECRET}" in logged, "the command line is in the guard's log"
    assert f"crashing-server: started with --api-key {SECRET}" in logged, "so are its last stderr lines"
