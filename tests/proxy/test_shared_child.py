"""The HTTP guard's shared stdio child, opened with the guard's own handshake: small real children, no SDK."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_loop_guard.config import StdioServer
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.upstream.backoff import Backoff
from mcp_loop_guard.proxy.upstream.shared_child import SharedChild

pytestmark = pytest.mark.anyio

# A line server: logs each message it reads to argv[1]; its tools are named after how many
# times it was started (the count in argv[2]), and its first process exits after tools/list.
_SERVER = """
import json, sys
log, counter = sys.argv[1], sys.argv[2]
starts = int(open(counter).read() or 0) + 1 if __import__("os").path.exists(counter) else 1
open(counter, "w").write(str(starts))
def send(message):
    sys.stdout.write(json.dumps(message) + "\\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    with open(log, "a") as out:
        out.write(json.dumps({"start": starts, **message}) + "\\n")
    method = message.get("method")
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "small", "version": str(starts)}}
        send({"jsonrpc": "2.0", "id": message["id"], "result": result})
    elif method == "notifications/initialized":
        send({"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"})
    elif method == "tools/list":
        tools = [{"name": f"tool-{starts}", "inputSchema": {"type": "object"}}]
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": tools}})
        if starts == 1 and len(sys.argv) > 3:
            sys.exit(5)
"""
_REFUSING = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        error = {"code": -32602, "message": "unsupported protocol version"}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}) + "\\n")
        sys.stdout.flush()
"""


@asynccontextmanager
async def supervised(folder: Path, script: str, *args: str) -> AsyncIterator[SharedChild]:
    """A shared child running ``script``, supervised (restarts after a hundredth of a second) until the block ends."""
    path = folder / "server.py"
    path.write_text(script)
    spec = StdioServer(name="small", command=sys.executable, args=("-S", str(path), *args))
    child = SharedChild(spec, Limits(), backoff=Backoff(initial=0.01, cap=0.05))
    async with anyio.create_task_group() as tg:
        await tg.start(child.supervise)
        try:
            yield child
        finally:
            tg.cancel_scope.cancel()


async def until(condition: Callable[[], bool]) -> None:
    """Wait for something a child process does (a file it writes), asked again every hundredth of a second."""
    with anyio.fail_after(20):
        while not condition():  # noqa: ASYNC110 - a child's file has no event to wait on
            await anyio.sleep(0.01)


def logged(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


async def test_the_guard_opens_the_child_once_and_refuses_what_no_client_can_answer(tmp_path: Path) -> None:
    """One ``initialize`` of the guard's own, then ``initialized``; a request of the child with no caller is refused."""
    log = tmp_path / "log.jsonl"
    async with supervised(tmp_path, _SERVER, str(log), str(tmp_path / "starts")) as child:
        await until(lambda: any(entry.get("id") == "ask-1" for entry in logged(log)))
        identity = child.mux.identity if child.mux is not None else None
        status = child.status
    (initialize, initialized, *rest) = logged(log)
    assert initialize["method"] == "initialize"
    assert initialize["params"]["clientInfo"]["name"] == "mcp-loop-guard"
    assert set(initialize["params"]["capabilities"]) == {"sampling", "elicitation"}, "no roots: one process, many"
    assert initialized["method"] == "notifications/initialized"
    (refusal,) = [entry for entry in rest if entry.get("id") == "ask-1"]
    assert refusal["error"]["message"].endswith("no client has a request in flight"), refusal
    assert status == "ready"
    assert identity is not None
    assert identity["serverInfo"] == {"name": "small", "version": "1"}


async def test_a_restarted_child_listing_other_tools_says_so(tmp_path: Path) -> None:
    """The first child exits after listing its tools; the next one lists others: its readiness says they changed."""
    changes: list[tuple[str, bool]] = []
    log, starts = tmp_path / "log.jsonl", tmp_path / "starts"
    async with supervised(tmp_path, _SERVER, str(log), str(starts), "exit-once") as child:
        child.on_change(lambda slot, tools_changed: changes.append((slot.status, tools_changed)))
        await until(lambda: ("ready", True) in changes)
        restarts, reason = child.restarts, child.reason
    assert changes[0][0] in ("ready", "down"), changes
    assert ("down", False) in changes, changes
    assert restarts >= 1
    assert reason == "connected"


async def test_a_child_refusing_the_handshake_is_down_with_what_it_said_and_started_again(tmp_path: Path) -> None:
    """An error for ``initialize``: down, ``/readyz`` told it refused, the log told what it said, and retried."""
    async with supervised(tmp_path, _REFUSING) as child:
        await until(lambda: child.restarts >= 2)
        status, reason, detail, mux = child.status, child.reason, child.detail, child.mux
    assert status == "down"
    assert reason == "refused initialize"
    assert "unsupported protocol version" in detail
    assert mux is None


# Answers the handshake and tools/list, then stops reading its input and asks the guard something.
_DEAF = """
import json, os, sys, time
line = sys.stdin.readline()
message = json.loads(line)
result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
          "serverInfo": {"name": "deaf", "version": "1"}}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\\n")
sys.stdout.flush()
sys.stdin.readline()
listing = json.loads(sys.stdin.readline())
tools = [{"name": "deaf", "inputSchema": {"type": "object"}}]
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": listing["id"], "result": {"tools": tools}}) + "\\n")
sys.stdout.flush()
os.close(0)
time.sleep(0.2)
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": "ask-1", "method": "roots/list"}) + "\\n")
sys.stdout.flush()
open(sys.argv[1], "w").close()
time.sleep(30)
"""


async def test_a_child_that_stopped_reading_keeps_its_reader_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The refusal of its request cannot be written: no traceback, and what the child writes next is still read
    (a child that exits after answering is then down for its exit, with its answers taken)."""
    asked = tmp_path / "asked"
    async with supervised(tmp_path, _DEAF, str(asked)) as child:
        await until(asked.exists)
        await anyio.sleep(0.5)  # the refusal is tried as soon as the request is read; nothing to wait on when it fails
        status, restarts = child.status, child.restarts
    assert "unexpectedly" not in caplog.text, caplog.text
    assert (status, restarts) == ("ready", 0)
