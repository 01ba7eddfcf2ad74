"""Broken output from the upstream: junk on stdout, answers of the wrong shape or to nobody,
answers too large to relay, and floods of notifications. The affected call gets an error
result, the guard stays up and keeps serving, and its log says what happened once.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_loop_guard.redaction import program_name
from tests.harness import MARKER, command_process, fixture_command
from tests.reliability.wire import RawConnector, RawGuard, is_response, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

GARBAGE = fixture_command("garbage_server")
FLOOD = fixture_command("flood_server")
linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="reads a process's peak memory and its pipes' flags in /proc, and pipe sizes, which only Linux lets a "
    "process set (the guard grows its pipes there only)",
)


def peak_rss(pid: int) -> int:
    """The most resident memory the process ever had, in bytes (Linux's VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    msg = f"no VmHWM in /proc/{pid}/status"
    raise AssertionError(msg)


def _is_guard_error(answer: dict[str, Any]) -> bool:
    result = answer.get("result") or {}
    texts = result_texts(answer)
    return result.get("isError") is True and len(texts) == 1 and texts[0].startswith(MARKER)


async def test_junk_on_stdout_is_ignored_and_logged_once(raw_guard: RawConnector) -> None:
    """Lines on the upstream's stdout that are not JSON-RPC (a banner, text, binary) are skipped, logged once."""
    async with raw_guard(GARBAGE) as guard:
        with anyio.fail_after(10):
            answers = [await guard.call_tool("garbage", {"lines": lines}) for lines in (200, 201, 202)]
            await guard.assert_serving()
        log = guard.guard_lines()

    assert [result_texts(answer) for answer in answers] == [["clean answer"]] * 3
    noted = [line for line in log if "not JSON-RPC" in line]
    assert len(noted) == 1, log
    assert f"upstream `{program_name(GARBAGE[0])}`" in noted[0]  # as clients name it: never its command line
    assert [message for message in guard.messages if "method" in message] == [], "junk reached the client"


async def test_result_of_the_wrong_shape_gives_an_error_result(raw_guard: RawConnector) -> None:
    """An answer whose result is not a tools/call result gives that call an isError result saying "wrong shape"."""
    kinds = ["content", "number", "list"]
    async with raw_guard(GARBAGE) as guard:
        ids: dict[str, str] = {}
        for kind in kinds:
            ids[kind] = guard.new_id()
            await guard.send(
                {
                    "jsonrpc": "2.0",
                    "id": ids[kind],
                    "method": "tools/call",
                    "params": {"name": "wrong_shape", "arguments": {"kind": kind}},
                }
            )
        with anyio.move_on_after(5):
            for request_id in ids.values():
                await guard.response(request_id)
        answers = {kind: guard.responses(request_id) for kind, request_id in ids.items()}
        with anyio.fail_after(10):
            await guard.assert_serving()

    unanswered = [kind for kind, found in answers.items() if not found]
    assert unanswered == [], f"no answer within 5 s to the wrong-shape result kinds {unanswered}: {answers}"
    for kind, found in answers.items():
        assert len(found) == 1, (kind, found)
        assert _is_guard_error(found[0]), (kind, found)
        assert "wrong shape" in result_texts(found[0])[0], (kind, found)


async def test_answers_to_unknown_ids_are_ignored(raw_guard: RawConnector) -> None:
    """Responses from the upstream to ids nobody used never reach the client; the call in flight is answered."""
    async with raw_guard(GARBAGE) as guard:
        with anyio.fail_after(10):
            answer = await guard.call_tool("stray", {})
            await guard.assert_serving()

    assert result_texts(answer) == ["after strays"]
    strays = [message for message in guard.messages if message.get("id") in (987654, "nobody-asked")]
    assert strays == []


LIMIT = 1024 * 1024
"""LOOP_GUARD_MAX_MESSAGE_BYTES in the oversized-answer tests."""


async def _oversized(guard: RawGuard, size: int) -> dict[str, dict[str, Any]]:
    """Two answers of ``size`` bytes, their id first and last, called in turn."""
    with anyio.fail_after(60):
        return {
            order: await guard.call_tool("huge", {"size": size, "order": order}, within=60)
            for order in ("id-first", "id-last")
        }


async def test_oversized_answer_gives_an_error_result_naming_the_limit(raw_guard: RawConnector) -> None:
    """An answer over LOOP_GUARD_MAX_MESSAGE_BYTES is dropped; the call gets an error naming it; the next one fits."""
    async with raw_guard(GARBAGE, env={"LOOP_GUARD_MAX_MESSAGE_BYTES": str(LIMIT)}) as guard:
        answers = await _oversized(guard, 4 * LIMIT)
        with anyio.fail_after(10):
            fits = await guard.call_tool("huge", {"size": LIMIT // 2})
            await guard.assert_serving()

    for order, answer in answers.items():
        assert _is_guard_error(answer), (order, answer)
        text = result_texts(answer)[0]
        assert str(LIMIT) in text, text
        assert "LOOP_GUARD_MAX_MESSAGE_BYTES" in text, text
    assert result_texts(fits) == ["x" * (LIMIT // 2)]


@linux_only
async def test_an_oversized_answer_streams_by_without_being_held(raw_guard: RawConnector) -> None:
    """Two 64 MiB answers over the limit pass through the guard's memory without either being held whole."""
    async with raw_guard(GARBAGE, env={"LOOP_GUARD_MAX_MESSAGE_BYTES": str(LIMIT)}) as guard:
        with anyio.fail_after(10):
            await guard.assert_serving()
        before = peak_rss(command_process(guard.process.pid).pid)
        answers = await _oversized(guard, 64 * 1024 * 1024)
        after = peak_rss(command_process(guard.process.pid).pid)
    assert all(_is_guard_error(answer) for answer in answers.values()), answers
    # Holding one would have taken at least 64 MiB.
    assert after - before < 16 * 1024 * 1024, f"peak RSS grew by {(after - before) / 2**20:.1f} MiB"


def _write_pipe_sizes(pid: int) -> set[int]:
    """The buffer sizes of the pipes a process writes to (its client's, its upstream's stdin)."""
    sizes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        flags = int(Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text().split("flags:")[1].split()[0], 8)
        if os.readlink(fd).startswith("pipe:") and flags & os.O_ACCMODE == os.O_WRONLY:
            opened = os.open(fd, os.O_WRONLY | os.O_NONBLOCK)
            try:
                sizes.add(fcntl.fcntl(opened, fcntl.F_GETPIPE_SZ))
            finally:
                os.close(opened)
    return sizes


@linux_only
async def test_the_pipe_to_the_client_grows_to_a_megabyte_for_a_large_result(raw_guard: RawConnector) -> None:
    """A large result is handed to the client at once, not 64 KB per wake-up of the guard.

    The pipe grows only when a message does not fit: Linux counts pipe buffers per user, and
    a user over its allowance gets one-page pipes everywhere.
    """
    async with raw_guard(GARBAGE) as guard:
        with anyio.fail_after(10):
            await guard.assert_serving()
        before = _write_pipe_sizes(command_process(guard.process.pid).pid)
        with anyio.fail_after(30):
            answer = await guard.call_tool("huge", {"size": 256 * 1024})
        after = _write_pipe_sizes(command_process(guard.process.pid).pid)
    assert result_texts(answer) == ["x" * 256 * 1024]
    assert before == {64 * 1024, 1 << 20}, "the client's pipe as it came, the upstream's enlarged at its start"
    assert after == {1 << 20}


async def _ping_time(guard: RawGuard) -> float:
    started = anyio.current_time()
    request_id = guard.new_id()
    start = len(guard.messages)
    await guard.send({"jsonrpc": "2.0", "id": request_id, "method": "ping"})
    await guard.wait_for(lambda message: is_response(message, request_id), start=start, within=30)
    return anyio.current_time() - started


async def test_notification_flood_is_relayed_and_the_guard_stays_responsive(raw_guard: RawConnector) -> None:
    """20,000 log notifications sent as fast as a pipe takes them all reach the client in order; pings still answer."""
    count = 20_000
    async with raw_guard(FLOOD) as guard:
        request_id = guard.new_id()
        start = len(guard.messages)
        await guard.send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "flood", "arguments": {"count": count}},
            }
        )
        await guard.wait_for(lambda message: message.get("method") == "notifications/message", start=start)
        during = await _ping_time(guard)
        answer = await guard.response(request_id, start=start, within=60)
        after = await _ping_time(guard)
        with anyio.fail_after(10):
            await guard.assert_serving()
        rss = command_process(guard.process.pid).memory_info().rss
        log = guard.guard_lines()

    numbers = [message["params"]["data"]["n"] for message in guard.messages if message.get("method")]
    assert result_texts(answer) == [f"flooded {count}"]
    assert numbers == list(range(count))
    assert during < 10, f"a ping during the flood took {during:.1f}s"
    assert after < 1, f"a ping after the flood took {after:.1f}s"
    assert len(log) < 10, log
    assert rss < 300 * 1024 * 1024, f"the guard holds {rss / 2**20:.0f} MiB after the flood"
