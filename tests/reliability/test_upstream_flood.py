"""An upstream that floods its client with requests and never reads its stdin again.

The guard refuses what is over ``LOOP_GUARD_MAX_PENDING_REQUESTS`` by writing errors to the
upstream's stdin, and the client's answers go there too: a pipe that fills up and is never
read. Nothing may wait on it: the guard keeps reading the upstream's flood and the client's
lines (its end of file included), the call that started the flood gets an error in bounded
time, and the warnings it causes are collapsed instead of filling stderr.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests.harness import eventually, fixture_command, read_json_lines
from tests.reliability.wire import RawConnector, RawGuard, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

FLOODER = fixture_command("request_flood_server")
STDERR_BYTES = 20_000
"""What the guard may write to stderr in such a session (it wrote 10 MB in 30 s)."""
FLAT_OUT = 20_000
"""Requests the fixture sends as fast as the guard reads them (over 1 MB of refusals on its stdin), before it paces
them: the tests wait seconds on the guard, not on its CPU."""
DEAF = {"name": "flood_deaf", "arguments": {"flat_out": FLAT_OUT}}
ANSWERED = 1000
"""Pings the client answers (then it stops, as a busy one would: the test keeps few messages in memory)."""


async def answer_pings(guard: RawGuard, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
    """Answers the pings the guard passes on, as a client does, up to ANSWERED; started once 64 were answered."""
    seen, answered = 0, 0
    while answered < ANSWERED:
        try:
            message = await guard.wait_for(lambda _: True, start=seen, within=120)
        except AssertionError:  # the guard closed its stdout
            return
        seen += 1  # the message at ``seen``: every message matches
        if message.get("method") == "ping":
            await guard.send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
            answered += 1
            if answered == 64:
                task_status.started()


async def test_the_flooding_call_gets_an_error_and_eof_still_ends_the_guard(raw_guard: RawConnector) -> None:
    """Without a call timeout: the upstream is stopped as stuck, the call gets that error; EOF exits 0; stderr small."""
    async with raw_guard(FLOODER) as guard:
        call = guard.new_id()
        await guard.send({"jsonrpc": "2.0", "id": call, "method": "tools/call", "params": DEAF})
        async with anyio.create_task_group() as tg:
            await tg.start(answer_pings, guard)
            answer = await guard.response(call, within=60)
            tg.cancel_scope.cancel()
        await guard.close_stdin()
        status = await guard.wait_exit(within=15)
        stderr = guard.stderr_text()

    assert answer.get("result", {}).get("isError") is True, answer
    (text,) = result_texts(answer)
    assert "read none of its input" in text, text
    assert status == 0, stderr[-1000:]
    assert len(stderr.encode()) < STDERR_BYTES, f"{len(stderr)} bytes of stderr: {stderr[:500]}"


async def test_stdin_eof_ends_the_guard_while_the_upstream_floods(raw_guard: RawConnector, line_log: Path) -> None:
    """With the upstream's stdin full, the client answers what it got and closes stdin: the guard exits 0."""
    async with raw_guard(FLOODER, env={"LINE_SERVER_LOG": str(line_log)}) as guard:
        await guard.send({"jsonrpc": "2.0", "id": "flood", "method": "tools/call", "params": DEAF})
        # 20,000 requests sent: the guard has refused thousands of them on the upstream's stdin, over its 1 MB.
        with anyio.fail_after(30):
            await eventually(lambda: sent(line_log) >= FLAT_OUT)
        for ping in [message for message in guard.messages if message.get("method") == "ping"]:
            await guard.send({"jsonrpc": "2.0", "id": ping["id"], "result": {}})
        await guard.close_stdin()
        status = await guard.wait_exit(within=15)
        stderr = guard.stderr_text()

    assert status == 0, stderr[-1000:]
    assert len(stderr.encode()) < STDERR_BYTES, f"{len(stderr)} bytes of stderr: {stderr[:500]}"


def sent(log: Path) -> int:
    """How many requests the flooding fixture has written so far."""
    counts = [entry["count"] for entry in read_json_lines(log) if entry.get("event") == "sent"]
    return counts[-1] if counts else 0
