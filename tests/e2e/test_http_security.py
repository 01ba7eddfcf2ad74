"""The guard's HTTP front door: bearer token, DNS-rebinding protection and the request size limit."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from tests.harness import kill_marked, texts
from tests.http_harness import (
    MCP_POST_HEADERS,
    Rig,
    ServerProcess,
    http_client,
    http_get,
    http_post,
    initialize_body,
    jsonrpc_payloads,
    open_http_session,
    time_command,
    tool_names,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio, pytest.mark.usefixtures("guard_log")]

TOKEN = secrets.token_urlsafe(24)
TIME_ARGS = ["--", *time_command()]


LIMIT = 4096
SETTINGS = {
    "LOOP_GUARD_AUTH_TOKEN": TOKEN,
    "LOOP_GUARD_ALLOWED_HOSTS": "guard.example.com:*",
    "LOOP_GUARD_ALLOWED_ORIGINS": "https://app.example.com",
    "LOOP_GUARD_MAX_REQUEST_BYTES": str(LIMIT),
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Runs the module on asyncio, in one event loop, so the tests can share one guard."""
    return "asyncio"


@pytest.fixture(scope="module")
async def guard(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    """One guard for the module in front of mcp-server-time, with a token, extra allowed hosts and a body limit."""
    marker = uuid.uuid4().hex
    rig = Rig(tmp_path_factory.mktemp("http-security"), marker)
    try:
        async with rig.guard(TIME_ARGS, env=SETTINGS) as guard:
            yield guard
    finally:
        kill_marked(marker)


def bearer(token: str = TOKEN) -> dict[str, str]:
    """An Authorization header carrying token."""
    return {"Authorization": f"Bearer {token}"}


async def test_token_required(guard: ServerProcess) -> None:
    """With a token set, /mcp, /readyz and /metrics answer 401 without it and work with it; /healthz stays open."""
    with anyio.fail_after(20):
        health = await http_get(guard.url("/healthz"))
        anonymous = await http_post(guard.mcp_url, initialize_body())
        wrong = await http_post(guard.mcp_url, initialize_body(), bearer("not-the-token"))
        bare_scheme = await http_post(guard.mcp_url, initialize_body(), {"Authorization": TOKEN})
        ready_anonymous = await http_get(guard.url("/readyz"))
        metrics_anonymous = await http_get(guard.url("/metrics"))
        authorized = await http_post(guard.mcp_url, initialize_body(), bearer())
        ready = await http_get(guard.url("/readyz"), bearer())
        metrics = await http_get(guard.url("/metrics"), bearer())
        async with open_http_session(guard.mcp_url, headers=bearer()) as client:
            listed = tool_names(await client.session.list_tools())
            now = await client.session.call_tool("get_current_time", {"timezone": "UTC"})

    assert health.status_code == 200
    for refused in (anonymous, wrong, bare_scheme, ready_anonymous, metrics_anonymous):
        assert refused.status_code == 401, (refused.request.url, refused.text)
        assert refused.headers.get("www-authenticate", "").lower().startswith("bearer")
    assert authorized.status_code == 200, authorized.text
    assert "result" in jsonrpc_payloads(authorized)[0], authorized.text
    assert ready.status_code == 200, ready.text
    assert metrics.status_code == 200
    assert "get_current_time" in listed
    assert not now.is_error, texts(now)
    assert TOKEN not in guard.stderr_text()


async def test_foreign_host_and_origin_refused(guard: ServerProcess) -> None:
    """A Host or Origin that is neither loopback nor allowed is refused (421 and 403); allowed ones pass."""

    async def initialize(headers: dict[str, str]) -> httpx2.Response:
        return await http_post(guard.mcp_url, initialize_body(), bearer() | headers)

    with anyio.fail_after(20):
        foreign_host = await initialize({"Host": "evil.example.net"})
        foreign_origin = await initialize({"Origin": "http://evil.example.net"})
        rebound = await initialize(
            {"Host": f"evil.example.net:{guard.port}", "Origin": f"http://evil.example.net:{guard.port}"}
        )
        loopback = await initialize({"Host": f"localhost:{guard.port}", "Origin": f"http://localhost:{guard.port}"})
        allowed_host = await initialize({"Host": "guard.example.com:8080"})
        allowed_origin = await initialize({"Origin": "https://app.example.com"})

    assert foreign_host.status_code == 421, foreign_host.text
    assert foreign_origin.status_code == 403, foreign_origin.text
    assert rebound.status_code in {403, 421}, rebound.text
    for accepted in (loopback, allowed_host, allowed_origin):
        assert accepted.status_code == 200, (accepted.request.headers, accepted.text)


async def test_oversized_body_refused(guard: ServerProcess) -> None:
    """A body over LOOP_GUARD_MAX_REQUEST_BYTES gets 413 with a message naming the limit, declared or streamed."""
    padded = initialize_body(client_name="x" * (2 * LIMIT))
    padded_bytes = json.dumps(padded).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(padded_bytes), 1024):
            yield padded_bytes[start : start + 1024]

    with anyio.fail_after(20):
        declared = await http_post(guard.mcp_url, padded, bearer())
        async with http_client(timeout=10) as client:
            streamed = await client.post(guard.mcp_url, content=chunks(), headers=MCP_POST_HEADERS | bearer())
        small = await http_post(guard.mcp_url, initialize_body(), bearer())
        async with open_http_session(guard.mcp_url, headers=bearer()) as session:
            with pytest.raises(MCPError):
                await session.session.call_tool("get_current_time", {"timezone": "x" * (2 * LIMIT)})
            after = await session.session.call_tool("get_current_time", {"timezone": "UTC"})

    assert declared.status_code == 413, f"Content-Length over the limit: {declared.text}"
    assert str(LIMIT) in declared.text
    assert "content-length" not in streamed.request.headers, "the streamed body should be sent chunked"
    assert streamed.status_code == 413, f"chunked body over the limit: {streamed.text}"
    assert str(LIMIT) in streamed.text
    assert small.status_code == 200, small.text
    assert not after.is_error, texts(after)
