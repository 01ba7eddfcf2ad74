"""The guard over legacy SSE, and both protocol eras (2025-11-25 handshake, 2026-07-28) over streamable HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.harness import MARKER, action, everything_command, texts
from tests.http_harness import (
    HANDSHAKE_VERSION,
    KEY_HEADER,
    MODERN_VERSION,
    Rig,
    ServerProcess,
    http_streams,
    mcp_http_client,
    open_sse_session,
    poll,
    tool_names,
)
from tests.proxy.http_inproc import InProcessGuard, serving_ready

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

EVERYTHING_ARGS = ["--", *everything_command("stdio")]
ECHO = {"message": "again"}
RESET_AFTER_SECONDS = 2


@asynccontextmanager
async def modern_client(
    guard: ServerProcess | InProcessGuard, key: str | None = None, responses: list[httpx2.Response] | None = None
) -> AsyncIterator[Client]:
    """An ``mcp.Client`` in auto mode (it speaks 2026-07-28 to a server that can), optionally with a key header.

    Every HTTP response it gets is appended to ``responses`` when given.
    """
    headers = {KEY_HEADER: key} if key is not None else {}

    async def record(response: httpx2.Response) -> None:
        if responses is not None:
            responses.append(response)

    async with (
        mcp_http_client(headers) as http,
        Client(streamable_http_client(guard.mcp_url, http_client=http), mode="auto", read_timeout_seconds=20) as client,
    ):
        http.event_hooks["response"].append(record)
        yield client


async def echo_actions(client: Client, times: int) -> list[str | None]:
    """Calls echo with the same arguments several times; the verdict actions."""
    with anyio.fail_after(10 + times):
        return [action(await client.call_tool("echo", ECHO)) for _ in range(times)]


async def test_sse_smoke(rig: Rig) -> None:
    """Over /sse + /messages/: tools are listed, a call works, and the third identical call is warned."""
    async with (
        rig.guard(EVERYTHING_ARGS, transport="sse") as guard,
        open_sse_session(guard.url("/sse")) as client,
    ):
        with anyio.fail_after(15):
            listed = tool_names(await client.session.list_tools())
            results = [await client.session.call_tool("echo", ECHO) for _ in range(3)]
            summed = await client.session.call_tool("get-sum", {"a": 20, "b": 22})

    assert client.initialize.server_info.name == "mcp-servers/everything", "one upstream: the guard is transparent"
    assert {"echo", "get-sum", "trigger-long-running-operation"} <= listed
    assert [action(result) for result in results] == [None, None, "warn"]
    assert texts(results[0]) == ["Echo: again"]
    assert texts(results[2])[0] == "Echo: again"
    assert texts(results[2])[1].startswith(MARKER)
    assert "42" in texts(summed)[0]


async def test_both_protocol_eras(rig: Rig) -> None:
    """A 2026-07-28 client and a 2025-11-25 handshake client are both served, each with its own loop state."""
    async with serving_ready(EVERYTHING_ARGS) as guard:
        async with modern_client(guard, key="modern-agent") as modern:
            modern_actions = await echo_actions(modern, 5)
            with anyio.fail_after(10):
                modern_sum = await modern.call_tool("get-sum", {"a": 1, "b": 2})
            modern_version = modern.protocol_version
        async with Client(http_streams(guard.mcp_url), mode="legacy", read_timeout_seconds=20) as legacy:
            legacy_actions = await echo_actions(legacy, 3)
            legacy_version = legacy.protocol_version

    assert modern_version == MODERN_VERSION
    assert modern_actions == [None, None, "warn", "warn", "block"]
    assert "3" in texts(modern_sum)[0]
    assert legacy_version == HANDSHAKE_VERSION
    assert legacy_actions == [None, None, "warn"]


async def test_modern_requests_keyed_by_header(rig: Rig) -> None:
    """2026-07-28 requests are judged per X-Loop-Guard-Key; an aborted key gets 429 with Retry-After, then recovers."""
    env = {"LOOP_GUARD_RESET_AFTER_SECONDS": str(RESET_AFTER_SECONDS)}
    responses: list[httpx2.Response] = []

    async def call_after_refusal(client: Client) -> types.CallToolResult | MCPError:
        try:
            return await client.call_tool("echo", {"message": "a new approach"})
        except MCPError as error:
            return error

    async with (
        serving_ready(EVERYTHING_ARGS, env) as guard,
        modern_client(guard, key="looper", responses=responses) as looper,
        modern_client(guard, key="bystander") as bystander,
    ):
        looped = await echo_actions(looper, 4)
        bystander_actions = await echo_actions(bystander, 1)
        looped += await echo_actions(looper, 3)
        with anyio.fail_after(10):
            refused = await call_after_refusal(looper)
        refused_at = anyio.current_time()
        refusal = responses[-1]
        bystander_actions += await echo_actions(bystander, 1)
        with anyio.fail_after(RESET_AFTER_SECONDS + 10):
            again = await poll(lambda: call_after_refusal(looper), lambda found: not isinstance(found, MCPError), 0.1)
        waited = anyio.current_time() - refused_at

    assert looped == [None, None, "warn", "warn", "block", "block", "abort"]
    assert isinstance(refused, MCPError), refused
    assert refusal.status_code == 429, refusal.text
    retry_after = int(refusal.headers.get("retry-after", "0"))
    assert 1 <= retry_after <= RESET_AFTER_SECONDS + 1, refusal.headers
    assert waited <= retry_after + 1, f"still refused {waited:.1f}s after a Retry-After of {retry_after}s"
    assert bystander_actions == [None, None]
    assert isinstance(again, types.CallToolResult)
    assert not again.is_error, texts(again)
    assert action(again) is None


async def test_handshake_era_sampling_on_a_modern_connection_is_refused_not_hung(rig: Rig) -> None:
    """A handshake-era upstream's sampling request during a 2026-07-28 client's call cannot reach that client.

    2026-07-28 has no server-to-client requests, so the guard answers the upstream with an
    error: the call ends with the upstream's own account of it, the client's sampling
    callback is never asked, and the session goes on.
    """
    asked: list[types.CreateMessageRequestParams] = []

    async def sample(context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="x"), model="m")

    async with (
        serving_ready(EVERYTHING_ARGS) as guard,
        mcp_http_client({}) as http,
        Client(
            streamable_http_client(guard.mcp_url, http_client=http),
            mode="auto",
            read_timeout_seconds=20,
            sampling_callback=sample,
        ) as client,
    ):
        assert client.protocol_version == MODERN_VERSION
        with anyio.fail_after(20):
            result = await client.call_tool("trigger-sampling-request", {"prompt": "colour?", "maxTokens": 5})
            after = await client.call_tool("echo", ECHO)
    assert asked == []
    assert result.is_error, result
    assert "no back-channel for server-initiated requests" in texts(result)[0]
    assert texts(after) == ["Echo: again"]
