"""Floods that must not grow the guard without bound: requests nobody answers, made-up names, deep nesting.

An upstream sending thousands of server-to-client requests the client never answers
(``LOOP_GUARD_MAX_PENDING_REQUESTS``), a client calling hundreds of tools that do not
exist (the names must not become metric labels), and a message nested 100,000 levels
deep: each is answered, and the session goes on.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest

from tests.harness import fixture_command
from tests.http_harness import (
    MCP_POST_HEADERS,
    FloodConnection,
    Rig,
    http_client,
    http_get,
    http_post,
    jsonrpc_payloads,
    payload_for,
    raw_session,
    tool_call_body,
)
from tests.reliability.wire import RawConnector, error_code, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

MB = 1024 * 1024
FLOOD = 10_000
MAX_PENDING = 100


async def test_unanswered_server_requests_are_bounded(rig: Rig) -> None:
    """10,000 sampling requests to a client that never answers: the excess is refused upstream, memory is bounded."""
    env = {"LOOP_GUARD_MAX_PENDING_REQUESTS": str(MAX_PENDING)}
    async with rig.guard(["--", *fixture_command("request_flood_server")], env=env) as guard:
        headers = await raw_session(guard.mcp_url, capabilities={"sampling": {}})
        before = guard.rss()
        peak = before
        relayed = 0
        answer: dict[str, Any] | None = None
        flood = {"count": FLOOD, "within": 15, "enough": FLOOD - MAX_PENDING}
        body = json.dumps(tool_call_body("flood_requests", flood, 5))
        with anyio.fail_after(60):
            async with (
                http_client(timeout=httpx2.Timeout(10, read=60)) as client,
                client.stream("POST", guard.mcp_url, content=body, headers=MCP_POST_HEADERS | headers) as response,
            ):
                # Read everything the guard sends on the call's stream, answer nothing.
                async for line in response.aiter_lines():
                    if not line.startswith("data:") or not line.removeprefix("data:").strip():
                        continue
                    message = json.loads(line.removeprefix("data:"))
                    if message.get("method") == "sampling/createMessage":
                        relayed += 1
                        if relayed % 1000 == 0:
                            peak = max(peak, guard.rss())
                    elif message.get("id") == 5:
                        answer = message
        peak = max(peak, guard.rss())
        with anyio.fail_after(10):
            after = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "still here"}, 6), headers)

    assert answer is not None, f"the flooding call got no answer ({relayed} requests relayed)"
    report = json.loads(answer["result"]["content"][0]["text"])
    print(f"relayed {relayed}, upstream got {report}, RSS {before / MB:.1f} -> peak {peak / MB:.1f} MB")
    assert report["errors"] >= FLOOD - MAX_PENDING, f"the excess was not refused to the upstream: {report}"
    assert peak - before < 50 * MB, f"resident memory grew by {(peak - before) / MB:.1f} MB"
    assert result_texts(payload_for(after, 6)) == ["still here"]


async def test_made_up_tool_names_never_become_metric_labels(rig: Rig) -> None:
    """500 calls to tools that do not exist: /metrics grows by under 4 KB and names none of them."""
    names = [f"made-up-tool-{n:03d}" for n in range(500)]
    async with rig.guard(["--", *fixture_command("erroring_server")]) as guard:
        headers = await raw_session(guard.mcp_url)
        call_headers = MCP_POST_HEADERS | headers
        with anyio.fail_after(20):
            await http_post(guard.mcp_url, tool_call_body("echo", {"text": "warm"}, 1), headers)
            before = (await http_get(guard.url("/metrics"))).text
        connection = FloodConnection(guard.port)
        with anyio.fail_after(120):
            answers = [
                await connection.post("/mcp", json.dumps(tool_call_body(name, {}, n + 2)).encode(), call_headers)
                for n, name in enumerate(names)
            ]
            after = (await http_get(guard.url("/metrics"))).text
        await connection.aclose()

    grown = len(after.encode()) - len(before.encode())
    assert [status for status, _ in answers] == [200] * len(names)
    assert grown < 4096, f"/metrics grew by {grown} bytes, from {len(before)}"
    assert [name for name in names if name in after] == []


def nested_call(request_id: int, depth: int) -> str:
    """A tools/call whose ``params`` hold ``depth`` nested arrays (typed out, not built by json.dumps)."""
    deep = "[" * depth + "]" * depth
    return (
        f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call",'
        f'"params":{{"name":"echo","arguments":{{"text":"deep","x":{deep}}}}}}}'
    )


DEPTH = 100_000


async def test_deeply_nested_json_over_http_gets_an_error_with_its_id(rig: Rig) -> None:
    """HTTP: a request with 100,000 nested arrays and id 7 gets -32700 or -32600 with id 7; the session goes on."""
    async with rig.guard(["--", *fixture_command("erroring_server")]) as guard:
        headers = await raw_session(guard.mcp_url)
        with anyio.fail_after(20):
            deep = await http_post_raw(guard.mcp_url, nested_call(7, DEPTH), headers)
            after = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "after"}, 8), headers)

    answers = [message for message in jsonrpc_payloads(deep) if message.get("id") == 7]
    assert answers, f"no JSON-RPC answer with id 7: {deep.status_code} {deep.text[:300]}"
    assert error_code(answers[0]) in {-32700, -32600}, answers[0]
    assert result_texts(payload_for(after, 8)) == ["after"]


async def http_post_raw(url: str, body: str, headers: dict[str, str]) -> httpx2.Response:
    """One POST of a body given as text (not re-encoded), read in full."""
    async with http_client(timeout=10) as client:
        return await client.post(url, content=body.encode(), headers=MCP_POST_HEADERS | headers)


async def test_deeply_nested_json_over_stdio_gets_an_error_with_its_id(raw_guard: RawConnector) -> None:
    """stdio: a line with 100,000 nested arrays and id 7 gets -32700 or -32600 with id 7; the session goes on."""
    async with raw_guard(fixture_command("erroring_server")) as guard:
        start = len(guard.messages)
        await guard.send_line(nested_call(7, DEPTH))
        answer = await guard.wait_for(lambda message: "method" not in message, start=start)
        await guard.assert_serving()

    assert answer.get("id") == 7, answer
    assert error_code(answer) in {-32700, -32600}, answer
