"""The message relay's restartable stdio upstream, with real child processes."""

from __future__ import annotations

import sys

import anyio
import pytest

from mcp_loop_guard.config import StdioServer
from mcp_loop_guard.proxy.upstream.stdio import StdioUpstream
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import OWN_ID_PREFIX, BadLine, Message, RequestId

pytestmark = pytest.mark.anyio


class Heard:
    """Stands where the relay would: keeps the ids of the messages the upstream passed on."""

    def __init__(self) -> None:
        self.ids: list[object] = []
        self.got = anyio.Event()

    async def from_upstream(self, item: Message | BadLine | Oversized) -> None:
        if isinstance(item, Message):
            self.ids.append(item.id)
            self.got.set()

    async def upstream_lost(self, reason: str) -> None:
        """A child's end is not what these tests look at."""

    async def upstream_failed(self, ident: RequestId, reason: str) -> None:
        """Nor a failed request."""

    async def upstream_restarted(self) -> None:
        """Nor a restart."""


# Exits at stdin EOF, but a detached grandchild keeps its stdout open for half a second after,
# so the guard reads that child's end only once its successor has been started.
_HOLDER = """
import os, sys, time
for _ in range(500):
    try:
        os.kill(int(sys.argv[1]), 0)
    except OSError:
        break
    time.sleep(0.02)
time.sleep(0.5)
"""
_SLOW_TO_CLOSE = f"""
import os, subprocess, sys
subprocess.Popen([sys.executable, "-c", {_HOLDER!r}, str(os.getpid())], start_new_session=True)
sys.stdin.read()
"""
# Answers the first request (the replayed initialize) a second after it came.
_SLOW_TO_ANSWER = """
import json, sys, time
request = json.loads(sys.stdin.readline())
time.sleep(1.0)
result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "new", "version": "1"}}
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\\n")
sys.stdout.flush()
sys.stdin.read()
"""


async def test_a_replaced_childs_late_end_leaves_its_successors_handshake_alone() -> None:
    """A config reload's new child completes the replayed handshake even when the old one's output ends later."""

    old = StdioServer(name="work", command=sys.executable, args=("-c", _SLOW_TO_CLOSE))
    new = StdioServer(name="work", command=sys.executable, args=("-c", _SLOW_TO_ANSWER))
    upstream = StdioUpstream(old, Heard(), max_bytes=1 << 20)
    upstream.initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(upstream.run)
            await upstream.replace(new)
            replaced = upstream.down_reason()
            tg.cancel_scope.cancel()
    assert replaced is None
    assert upstream.child is not None
    assert upstream.child.command[-1] == _SLOW_TO_ANSWER


# Answers every request line with an empty result under the request's id.
_ANSWERING = """
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {}}) + "\\n")
    sys.stdout.flush()
"""


async def test_an_outer_guards_own_request_is_answered_to_the_outer_guard() -> None:
    """Behind another guard, answers to that guard's own requests pass on; only this guard's own are kept."""
    heard = Heard()
    spec = StdioServer(name="work", command=sys.executable, args=("-c", _ANSWERING))
    upstream = StdioUpstream(spec, heard, max_bytes=1 << 20)
    outer = f"{OWN_ID_PREFIX}another-guard-1"  # the outer guard's own id: the same prefix, another nonce
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(upstream.run)
            mine = await upstream.request("tools/list", None, within=10)
            await upstream.send(Message({"jsonrpc": "2.0", "id": outer, "method": "tools/list"}).line())
            await heard.got.wait()
            tg.cancel_scope.cancel()
    assert mine is not None
    assert mine["result"] == {}
    assert heard.ids == [outer]
