"""``--stateless`` in front of one streamable HTTP server: relayed as they are when the server opens no sessions.

A stateless server takes requests that carry no session, so the guard passes each one on as
it came (its JSON-RPC id included) and judges it by its key's agent. A server that gives
each client a session would refuse them: those requests go through the SDK path and its
session of the guard's own at the server, as before.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import pytest

from tests.harness import MARKER, VERDICT_KEY, action, counted_calls, eventually, texts
from tests.http_harness import (
    KEY_HEADER,
    LOCALHOST,
    SESSION_HEADER,
    Rig,
    ServerProcess,
    free_port,
    http_post,
    initialize_body,
    jsonrpc_payloads,
    open_http_session,
    raw_call,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ECHO = {"text": "again"}
RELAYED = "opens no sessions: stateless requests are relayed as they are"


def _guard_args(rig: Rig, upstream: ServerProcess) -> list[str]:
    return ["--stateless", "--config", str(rig.config({"counting": {"type": "http", "url": upstream.mcp_url}}))]


async def test_a_server_without_sessions_gets_each_request_as_it_came(rig: Rig, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    async with rig.counting_http(log, "--stateless") as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
        with anyio.fail_after(20):  # asked at start-up, before any request
            await eventually(lambda: RELAYED in guard.stderr.read_text())
        async with open_http_session(guard.mcp_url, headers={KEY_HEADER: "agent-a"}) as client:
            assert client.initialize.server_info.name == "counting-server"  # the server's own answer
            with anyio.fail_after(20):
                tools = await client.session.list_tools()
                actions = [action(await client.session.call_tool("echo", ECHO)) for _ in range(6)]
                other = await client.session.call_tool("echo", {"text": "something else"})
        assert {tool.name for tool in tools.tools} >= {"echo", "slow"}
        assert actions == [None, None, "warn", "warn", "block", "block"]
        assert texts(other) == ["something else"]
        assert client.session_ids == [], "no session id, from the guard or the server"

        with anyio.fail_after(20):
            answered = await raw_call(guard.mcp_url, "echo", {"text": "numbered"}, {KEY_HEADER: "b"}, request_id=4242)
        assert answered.status_code == 200, answered.text
        assert SESSION_HEADER not in answered.headers
        (payload,) = jsonrpc_payloads(answered)
        assert payload["id"] == 4242
        assert payload["result"]["content"][0]["text"] == "numbered"
    calls = counted_calls(log, "echo")
    assert len(calls) == 6  # four identical calls before the refusals, the other one, the numbered one
    assert calls[-1]["id"] == 4242  # its own id, not one the guard numbered
    assert guard.stderr.read_text().count(RELAYED) == 1  # asked once


async def test_a_looping_key_is_aborted_and_then_refused_before_the_server(rig: Rig, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    async with rig.counting_http(log, "--stateless") as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
        with anyio.fail_after(30):
            answers = [await raw_call(guard.mcp_url, "echo", ECHO, {KEY_HEADER: "looper"}, n) for n in range(1, 8)]
            after = await raw_call(guard.mcp_url, "echo", {"text": "new"}, {KEY_HEADER: "looper"}, request_id=8)
            bystander = await raw_call(guard.mcp_url, "echo", ECHO, {KEY_HEADER: "bystander"}, request_id=9)
        results = [jsonrpc_payloads(answer)[0]["result"] for answer in answers]
        assert [bool(result.get("isError")) for result in results] == [False] * 4 + [True] * 3
        assert results[-1]["content"][0]["text"].startswith(MARKER)
        assert after.status_code == 429
        assert "retry-after" in after.headers
        assert jsonrpc_payloads(bystander)[0]["result"]["content"][0]["text"] == "again"
    assert [call["id"] for call in counted_calls(log, "echo")] == [1, 2, 3, 4, 9]


async def test_a_server_with_sessions_is_served_through_a_session_of_the_guard(rig: Rig, tmp_path: Path) -> None:
    """Such a server refuses requests without its session, so they take the SDK path; nothing changes for the client."""
    log = tmp_path / "calls.jsonl"
    async with rig.counting_http(log) as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
        with anyio.fail_after(20):
            opened = await http_post(guard.mcp_url, initialize_body(), {KEY_HEADER: "a"})
            answers = [await raw_call(guard.mcp_url, "echo", ECHO, {KEY_HEADER: "a"}, n) for n in (41, 42, 43)]
        assert opened.status_code == 200, opened.text
        assert SESSION_HEADER not in opened.headers
        results = [jsonrpc_payloads(answer)[0] for answer in answers]
        assert [result["id"] for result in results] == [41, 42, 43]
        assert [result["result"]["content"][0]["text"] for result in results] == ["again"] * 3
        assert results[-1]["result"]["_meta"][VERDICT_KEY]["action"] == "warn"
    calls = counted_calls(log, "echo")
    assert len(calls) == 3
    assert not {call["id"] for call in calls} & {41, 42, 43}  # numbered by the guard's own session
    assert "opens a session per client" in guard.stderr.read_text()


async def test_a_server_that_comes_up_late_is_asked_again_and_then_relayed(rig: Rig, tmp_path: Path) -> None:
    """Unreachable at first, the server cannot say whether it opens sessions; it is asked again a little later."""
    log = tmp_path / "calls.jsonl"
    port = free_port()
    config = rig.config({"counting": {"type": "http", "url": f"http://{LOCALHOST}:{port}/mcp"}})
    async with rig.guard(["--stateless", "--config", str(config)]) as guard:
        with anyio.fail_after(30):
            early = await raw_call(guard.mcp_url, "echo", {"text": "early"}, {KEY_HEADER: "d"}, request_id=5)
        (failed,) = jsonrpc_payloads(early)
        assert "error" in failed or failed["result"]["isError"], failed  # reported, not hung on
        async with rig.counting_http(log, "--stateless", port=port):
            with anyio.fail_after(30):
                for n in itertools.count():
                    answered = await raw_call(guard.mcp_url, "echo", {"text": f"late {n}"}, {KEY_HEADER: "d"}, 77)
                    if log.exists() and any(call["id"] == 77 for call in counted_calls(log)):
                        break
                    await anyio.sleep(0.5)
        assert jsonrpc_payloads(answered)[0]["result"]["content"][0]["text"] == f"late {n}"
    assert "could not ask upstream 'counting' whether it opens sessions" in guard.stderr.read_text()
