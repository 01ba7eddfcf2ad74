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

from tests.harness import MARKER, action, counted_calls, eventually, texts
from tests.http_harness import (
    KEY_HEADER,
    LOCALHOST,
    SESSION_HEADER,
    Rig,
    ServerProcess,
    free_port,
    http_get,
    http_post,
    initialize_body,
    jsonrpc_payloads,
    open_http_session,
    payload_for,
    raw_call,
)
from tests.proxy.http_inproc import InProcessServer, serving_counting

LISTED = {KEY_HEADER: "c", "Mcp-Protocol-Version": "2025-11-25"}
"""A later request of the same key, without a session."""

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ECHO = {"text": "again"}
RELAYED = "opens no sessions: stateless requests are relayed as they are"


def _guard_args(rig: Rig, upstream: ServerProcess | InProcessServer) -> list[str]:
    return ["--stateless", "--config", str(rig.config({"counting": {"type": "http", "url": upstream.mcp_url}}))]


async def test_a_server_without_sessions_gets_each_request_as_it_came(rig: Rig, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    async with serving_counting(log, stateless=True) as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
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
    async with serving_counting(log, stateless=True) as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
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


async def test_a_server_with_sessions_gets_each_request_over_one_session_of_the_guard(rig: Rig, tmp_path: Path) -> None:
    """Such a server refuses requests without its session: each goes over the one the guard opened, under its id."""
    log = tmp_path / "calls.jsonl"
    async with serving_counting(log) as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
        async with open_http_session(guard.mcp_url, headers={KEY_HEADER: "agent-a"}) as client:
            assert client.initialize.server_info.name == "counting-server"  # the server's own answer
            with anyio.fail_after(20):
                tools = await client.session.list_tools()
                actions = [action(await client.session.call_tool("echo", ECHO)) for _ in range(5)]
        assert {tool.name for tool in tools.tools} >= {"echo", "slow"}
        assert actions == [None, None, "warn", "warn", "block"]
        assert client.session_ids == [], "no session id, the server's or the guard's"

        with anyio.fail_after(20):
            answers = [await raw_call(guard.mcp_url, "echo", {"text": "n"}, {KEY_HEADER: "b"}, n) for n in (41, 42)]
            stream = await http_get(guard.mcp_url, {"Accept": "text/event-stream", KEY_HEADER: "b"})
        assert [jsonrpc_payloads(answer)[0]["id"] for answer in answers] == [41, 42]
        assert all(SESSION_HEADER not in answer.headers for answer in answers)
        assert stream.status_code == 405  # no session, so no stream of its own
    calls = counted_calls(log, "echo")
    assert len(calls) == 6  # four identical calls before the refusal, and the two numbered ones
    ids = [call["id"] for call in calls]
    assert len(set(ids)) == 6, ids
    assert all(str(ident).startswith("mlg-") for ident in ids), ids  # the guard's own
    assert "opens a session per client" in guard.stderr.read_text()


async def test_requests_numbered_alike_at_once_never_meet_at_the_server(rig: Rig, tmp_path: Path) -> None:
    """Two agents' calls with the same id, in flight together, go over the one session under ids of the guard's own."""
    log = tmp_path / "calls.jsonl"
    async with serving_counting(log) as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
        answers: dict[str, str] = {}

        async def slow(key: str, seconds: float) -> None:
            answered = await raw_call(guard.mcp_url, "slow", {"seconds": seconds}, {KEY_HEADER: key}, request_id=1)
            (payload,) = jsonrpc_payloads(answered)
            answers[key] = payload["result"]["content"][0]["text"]

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow, "a", 1.0)
                tg.start_soon(slow, "b", 0.5)
    assert answers == {"a": "slept 1.0 seconds", "b": "slept 0.5 seconds"}
    ids = [call["id"] for call in counted_calls(log, "slow")]
    assert len(set(ids)) == 2, ids
    assert 1 not in ids, ids


async def test_a_server_restarted_under_the_guards_sessions_costs_no_request(rig: Rig, tmp_path: Path) -> None:
    """The restarted server knows not the guard's session: the request that finds out goes over a new one."""
    log = tmp_path / "calls.jsonl"
    port = free_port()
    config = rig.config({"counting": {"type": "http", "url": f"http://{LOCALHOST}:{port}/mcp"}})
    first = rig.counting_http(log, port=port)
    await first.__aenter__()
    try:
        async with rig.guard(["--stateless", "--config", str(config)]) as guard:
            with anyio.fail_after(20):
                before = await raw_call(guard.mcp_url, "echo", {"text": "before"}, {KEY_HEADER: "e"}, request_id=1)
            await first.__aexit__(None, None, None)
            first = None
            async with rig.counting_http(log, port=port):
                with anyio.fail_after(20):
                    after = await raw_call(guard.mcp_url, "echo", {"text": "after"}, {KEY_HEADER: "e"}, request_id=2)
    finally:
        if first is not None:
            await first.__aexit__(None, None, None)
    assert jsonrpc_payloads(before)[0]["result"]["content"][0]["text"] == "before"
    assert after.status_code == 200, after.text
    assert jsonrpc_payloads(after)[0]["result"]["content"][0]["text"] == "after"
    assert len(counted_calls(log, "echo")) == 2
    assert "forgot the session; opening another" in guard.stderr.read_text()


async def test_tasks_are_offered_as_the_server_offers_them_and_every_request_sees_the_same_session(rig: Rig) -> None:
    """server-everything offers tasks: behind a stateless guard its ``initialize`` answer is the same, tasks
    included, since every request reaches the one session where a task lives."""
    async with rig.everything_http() as upstream, rig.guard(_guard_args(rig, upstream)) as guard:
        with anyio.fail_after(20):
            direct = await http_post(upstream.mcp_url, initialize_body())
            guarded = await http_post(guard.mcp_url, initialize_body(), {KEY_HEADER: "c"})
            listed = await http_post(guard.mcp_url, {"jsonrpc": "2.0", "id": 2, "method": "tasks/list"}, LISTED)
    theirs = jsonrpc_payloads(direct)[0]["result"]
    ours = payload_for(guarded, 1)["result"]
    assert "tasks" in theirs["capabilities"]
    assert ours["capabilities"] == theirs["capabilities"]
    assert ours["serverInfo"] == theirs["serverInfo"]
    assert ours["instructions"] == theirs["instructions"]
    assert SESSION_HEADER not in guarded.headers
    # The shared session's notifications (server-everything says its tools changed) may ride the same stream.
    assert payload_for(listed, 2)["result"]["tasks"] == []


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
