"""Loop states kept for requests without an MCP session expire, and shutdown closes them, without the guard crashing.

Requests without a session (``--stateless``, or any request naming the 2026-07-28
protocol) get a loop state keyed by ``X-Loop-Guard-Key`` (or the client's address). It
expires after ``LOOP_GUARD_SESSION_IDLE_SECONDS`` and is closed at shutdown; neither may
take the guard down or print a traceback.
"""

from __future__ import annotations

import json
import signal

import anyio
import pytest

from tests.http_harness import (
    KEY_HEADER,
    MCP_POST_HEADERS,
    MODERN_VERSION,
    FloodConnection,
    Rig,
    ServerProcess,
    http_get,
    http_post,
    initialize_body,
    open_http_session,
    payload_for,
    payload_verdict,
    raw_call,
    time_command,
    tool_names,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TIME_ARGS = ["--", *time_command()]
CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"}
"""Arguments whose result never changes, so repeating them builds a streak."""
IDLE_SECONDS = 0.25
EXPIRY_WAIT = 1.5
"""Long enough for a keyed state idle for IDLE_SECONDS to be swept (sweeps run every IDLE_SECONDS): six sweeps."""
SIGTERM_STATUS = 128 + signal.SIGTERM


async def keyed_convert(guard: ServerProcess, key: str) -> str | None:
    """One convert_time call under a key, without a session; its verdict action."""
    with anyio.fail_after(10):
        response = await raw_call(guard.mcp_url, "convert_time", CONVERT, {KEY_HEADER: key})
    assert response.status_code == 200, response.text
    message = payload_for(response, 1)
    assert "result" in message, message
    return payload_verdict(message)


async def test_stateless_keyed_state_expires_and_the_guard_keeps_serving(rig: Rig) -> None:
    """--stateless: a key idle past LOOP_GUARD_SESSION_IDLE_SECONDS is forgotten; the guard stays up and serves it."""
    env = {"LOOP_GUARD_SESSION_IDLE_SECONDS": str(IDLE_SECONDS)}
    async with rig.guard(["--stateless", *TIME_ARGS], env=env) as guard:
        before = [await keyed_convert(guard, "agent-1") for _ in range(2)]
        await guard.stays_up(EXPIRY_WAIT)
        with anyio.fail_after(10):
            health = await http_get(guard.url("/healthz"))
        after = await keyed_convert(guard, "agent-1")
        await guard.stays_up(0.5)

    assert before == [None, None]
    assert health.status_code == 200
    assert after is None, "the third identical call was judged against state that should have expired"
    assert "Traceback" not in guard.stderr_text(), guard.stderr_tail()


async def test_modern_request_state_expires_in_stateful_mode(rig: Rig) -> None:
    """Stateful mode: one request naming MCP-Protocol-Version 2026-07-28 leaves keyed state whose expiry is harmless."""
    env = {"LOOP_GUARD_SESSION_IDLE_SECONDS": str(IDLE_SECONDS)}
    async with rig.guard(TIME_ARGS, env=env) as guard:
        with anyio.fail_after(10):
            modern = await http_post(
                guard.mcp_url,
                {"jsonrpc": "2.0", "id": 1, "method": "ping"},
                {"Mcp-Protocol-Version": MODERN_VERSION, KEY_HEADER: "modern-agent"},
            )
        await guard.stays_up(EXPIRY_WAIT)
        with anyio.fail_after(20):
            health = await http_get(guard.url("/healthz"))
            opened = await http_post(guard.mcp_url, initialize_body())
        assert opened.status_code == 200, f"a new session after the expiry: {opened.status_code} {opened.text}"
        with anyio.fail_after(20):
            async with open_http_session(guard.mcp_url) as client:
                listed = tool_names(await client.session.list_tools())
        await guard.stays_up(0.5)

    assert modern.status_code < 500, modern.text
    assert health.status_code == 200
    assert "convert_time" in listed
    assert "Traceback" not in guard.stderr_text(), guard.stderr_tail()


async def test_sigterm_with_keyed_state_exits_cleanly(rig: Rig) -> None:
    """SIGTERM while keyed loop states exist: exit status 143 within a few seconds and no traceback."""
    async with rig.guard(["--stateless", *TIME_ARGS]) as guard:
        for key in ("agent-1", "agent-2"):
            await keyed_convert(guard, key)
        guard.process.send_signal(signal.SIGTERM)
        status = await guard.wait_exit(5)

    assert status == SIGTERM_STATUS, guard.stderr_tail()
    assert "Traceback" not in guard.stderr_text(), guard.stderr_tail()


async def test_sigterm_after_thousands_of_keys_exits_promptly(rig: Rig) -> None:
    """After 2,000 distinct X-Loop-Guard-Key values, SIGTERM still ends the guard within 10 s, without a traceback."""
    keys, connections = 2000, 16
    async with rig.guard(["--stateless", *TIME_ARGS]) as guard:
        statuses: list[int] = []

        async def ping(numbers: range) -> None:
            connection = FloodConnection(guard.port)
            for n in numbers:
                body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}).encode()
                status, _ = await connection.post("/mcp", body, MCP_POST_HEADERS | {KEY_HEADER: f"flood-{n}"})
                statuses.append(status)
            await connection.aclose()

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for first in range(connections):
                    tg.start_soon(ping, range(first, keys, connections))
        guard.process.send_signal(signal.SIGTERM)
        status = await guard.wait_exit(10)

    assert statuses.count(200) == keys, sorted(set(statuses))
    assert status == SIGTERM_STATUS, guard.stderr_tail()
    assert "Traceback" not in guard.stderr_text(), guard.stderr_tail()
