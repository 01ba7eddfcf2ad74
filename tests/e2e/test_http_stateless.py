"""Stateless streamable HTTP: loop state keyed by the X-Loop-Guard-Key header, and a looping key refused for a while."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.harness import MARKER, action, everything_command, texts
from tests.http_harness import (
    HANDSHAKE_VERSION,
    KEY_HEADER,
    HttpSession,
    Rig,
    http_post,
    jsonrpc_payloads,
    open_http_session,
    poll,
    tool_call_body,
)
from tests.proxy.http_inproc import InProcessGuard, serving_ready

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

RESET_AFTER_SECONDS = 2
EVERYTHING_ARGS = ["--stateless", "--", *everything_command("stdio")]
ECHO = {"message": "again"}


async def echo(client: HttpSession, times: int = 1) -> list[str | None]:
    """Calls echo with the same arguments several times; the verdict actions."""
    with anyio.fail_after(10 + times):
        return [action(await client.session.call_tool("echo", ECHO)) for _ in range(times)]


async def raw_echo(guard: InProcessGuard, key: str) -> httpx2.Response:
    """One tools/call as a bare HTTP request with the key header, no session."""
    with anyio.fail_after(10):
        return await http_post(
            guard.mcp_url, tool_call_body("echo", ECHO), {KEY_HEADER: key, "Mcp-Protocol-Version": HANDSHAKE_VERSION}
        )


async def test_keys_have_separate_loop_state(rig: Rig) -> None:
    """Two agents with different keys repeating the same call are judged separately; no session id is given."""
    async with (
        serving_ready(EVERYTHING_ARGS) as guard,
        open_http_session(guard.mcp_url, headers={KEY_HEADER: "agent-a"}) as first,
        open_http_session(guard.mcp_url, headers={KEY_HEADER: "agent-b"}) as second,
    ):
        a_actions = await echo(first, 4)
        b_actions = await echo(second, 2)
        a_actions += await echo(first)
        b_actions += await echo(second)
        with anyio.fail_after(10):
            blocked = await first.session.call_tool("echo", ECHO)

    assert first.session_ids == [], "stateless mode hands out no session id"
    assert a_actions == [None, None, "warn", "warn", "block"]
    assert b_actions == [None, None, "warn"]
    assert blocked.is_error
    assert texts(blocked)[0].startswith(MARKER)


async def test_aborted_key_refused_until_window_passes(rig: Rig) -> None:
    """After the abort, that key gets 429 with Retry-After until the window passes; other keys are served."""
    env = {"LOOP_GUARD_RESET_AFTER_SECONDS": str(RESET_AFTER_SECONDS)}
    async with (
        serving_ready(EVERYTHING_ARGS, env) as guard,
        open_http_session(guard.mcp_url, headers={KEY_HEADER: "looper"}) as looper,
        open_http_session(guard.mcp_url, headers={KEY_HEADER: "bystander"}) as bystander,
    ):
        looped = await echo(looper, 7)
        refused = await raw_echo(guard, "looper")
        refused_at = anyio.current_time()
        with anyio.fail_after(10), pytest.raises(MCPError):
            await looper.session.call_tool("echo", {"message": "a new approach"})
        served = await raw_echo(guard, "bystander")
        bystander_actions = await echo(bystander)

        retry_after = int(refused.headers.get("retry-after", "0"))
        with anyio.fail_after(RESET_AFTER_SECONDS + 10):
            await poll(lambda: raw_echo(guard, "looper"), lambda response: response.status_code != 429, 0.1)
        waited = anyio.current_time() - refused_at
        with anyio.fail_after(10):
            again = await looper.session.call_tool("echo", {"message": "a new approach"})

    assert looped == [None, None, "warn", "warn", "block", "block", "abort"]
    assert refused.status_code == 429, refused.text
    assert 1 <= retry_after <= RESET_AFTER_SECONDS + 1, refused.headers
    assert waited <= retry_after + 1, f"still refused {waited:.1f}s after a Retry-After of {retry_after}s"
    assert served.status_code == 200, served.text
    assert "result" in jsonrpc_payloads(served)[0], served.text
    assert bystander_actions == [None]
    assert not again.is_error, texts(again)
    assert action(again) is None
