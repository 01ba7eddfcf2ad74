"""The HTTP guard in front of one streamable HTTP server: each request relayed as it came, tool calls judged.

Parity tests run twice, straight to the server and through the guard, with the same
assertions; the rest check what only the guard does: loops warned, refused and aborted
(the session ends for the client and for the server), sessions bound to their token, a
broken upstream answered, the call timeout.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPError

from tests.harness import VERDICT_KEY, ClientUser, Inbox, action, counted_calls, everything_tour, texts, wire
from tests.http_harness import (
    SESSION_HEADER,
    Rig,
    ServerProcess,
    everything_http_entry,
    free_port,
    http_get,
    http_post,
    http_streams,
    initialize_body,
    metric_value,
    open_http_session,
    payload_for,
    payload_verdict,
    poll,
    raw_session,
    sdk_modules,
    tool_call_body,
)
from tests.proxy.http_inproc import InProcessGuard, InProcessServer, serving_cli, serving_counting

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

Mode = Literal["direct", "guarded"]


def guard_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """The environment of a guard served in this process (and of what it starts), for this test."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)


ECHO = {"message": "the same"}


@pytest.fixture(params=["direct", "guarded"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """Straight to server-everything over HTTP, or through the guard in front of it."""
    mode: Mode = request.param
    return mode


@asynccontextmanager
async def everything_url(rig: Rig, mode: Mode, *args: str) -> AsyncIterator[tuple[str, ServerProcess]]:
    """The URL a client uses (the server's own, or the guard's in front of it), and the server."""
    async with rig.everything_http() as everything:
        if mode == "direct":
            yield everything.mcp_url, everything
            return
        config = rig.config({"everything": everything_http_entry(everything.mcp_url)})
        async with serving_cli(["--config", str(config), *args], state=None) as guard:
            yield guard.mcp_url, everything


# --- parity: the same through the guard as directly ---------------------------------------------


async def test_identity_tools_and_results(rig: Rig, mode: Mode) -> None:
    """The server's identity, capabilities, tools, resources, prompts and results reach the client as it gave them."""
    async with everything_url(rig, mode) as (url, _), open_http_session(url) as opened:
        with anyio.fail_after(20):
            tour = await everything_tour(opened.session)
    assert opened.initialize.server_info.name == "mcp-servers/everything"
    assert opened.initialize.capabilities.tools is not None
    assert {"echo", "get-sum", LONG_RUNNING} <= {tool.name for tool in tour.tools.tools}
    assert texts(tour.echoed) == ["Echo: hello"]
    assert not tour.summed.is_error
    assert "5" in texts(tour.summed)[0]
    assert tour.read.contents
    assert tour.prompts.prompts


LONG_RUNNING = "trigger-long-running-operation"


async def test_progress_and_sampling(rig: Rig, mode: Mode) -> None:
    """Progress and the server's sampling request on the call's own stream reach the client."""
    inbox = Inbox()
    user = ClientUser()
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with everything_url(rig, mode) as (url, _), open_http_session(url, callbacks=user.callbacks(inbox)) as opened:
        session = opened.session
        with anyio.fail_after(30):
            # The server adds its sampling tool once it has seen the client's capabilities.
            while "trigger-sampling-request" not in {tool.name for tool in (await session.list_tools()).tools}:  # noqa: ASYNC110 - asking is the only way to know
                await anyio.sleep(0.05)
            finished = await session.call_tool(LONG_RUNNING, {"duration": 1, "steps": 3}, progress_callback=on_progress)
            sampled = await session.call_tool("trigger-sampling-request", {"prompt": "Name a colour", "maxTokens": 5})
    assert progress == [1, 2, 3]
    assert not finished.is_error
    assert not sampled.is_error, texts(sampled)
    assert len(user.sampling_requests) == 1


async def test_the_session_id_is_the_servers(rig: Rig, mode: Mode) -> None:
    """The client's session is the server's own: the guard hands out no ids of its own."""
    async with everything_url(rig, mode) as (url, everything), open_http_session(url) as opened:
        with anyio.fail_after(20):
            await opened.session.list_tools()
        straight = await http_post(
            everything.mcp_url,
            {"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
            {SESSION_HEADER: opened.session_id, "Mcp-Protocol-Version": opened.initialize.protocol_version},
        )
    assert straight.status_code == 200, straight.text
    assert "result" in payload_for(straight, 9)


# --- what only the guard does ------------------------------------------------------------------


@asynccontextmanager
async def counting_guard(rig: Rig, tmp_path: Path, *args: str) -> AsyncIterator[tuple[InProcessGuard, InProcessServer]]:
    """The counting fixture over HTTP, and the guard in front of it, both in process."""
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        async with serving_cli(["--config", str(config), *args], state=None) as guard:
            yield guard, counting


async def test_loop_warned_refused_and_aborted_then_the_session_ends(rig: Rig, tmp_path: Path) -> None:
    """Warned at 3, refused from 5 without reaching the server, aborted at 7; then the session is gone on both sides."""
    async with counting_guard(rig, tmp_path) as (guard, counting):
        async with open_http_session(guard.mcp_url) as opened:
            with anyio.fail_after(30):
                verdicts = [action(await opened.session.call_tool("echo", {"text": "same"})) for _ in range(7)]
                with pytest.raises(MCPError):
                    await opened.session.call_tool("echo", {"text": "something else"})
            headers = {SESSION_HEADER: opened.session_id, "Mcp-Protocol-Version": opened.initialize.protocol_version}
        again = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "new"}), headers)
        at_server = await http_post(counting.mcp_url, tool_call_body("echo", {"text": "new"}), headers)
        metrics = (await http_get(guard.at("/metrics"))).text
    assert verdicts == [None, None, "warn", "warn", "block", "block", "abort"]
    assert len(counted_calls(tmp_path / "calls.jsonl", "echo")) == 4
    assert again.status_code == 404
    assert at_server.status_code == 404, "the guard ends an aborted session at the server too"
    assert metric_value(metrics, "mcp_loop_guard_sessions") == 0


async def test_a_polling_call_whose_result_changes_is_never_judged_a_loop(rig: Rig, tmp_path: Path) -> None:
    """The same call with a new result each time is polling: ten calls, no warning, all reach the server."""
    async with counting_guard(rig, tmp_path) as (guard, _), open_http_session(guard.mcp_url) as opened:
        with anyio.fail_after(30):
            verdicts = [action(await opened.session.call_tool("ticker", {})) for _ in range(10)]
    assert verdicts == [None] * 10
    assert len(counted_calls(tmp_path / "calls.jsonl", "ticker")) == 10


async def test_a_session_belongs_to_the_token_that_opened_it(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another token's client cannot use (or judge itself by) a session it did not open."""
    env = {"LOOP_GUARD_AUTH_TOKENS": "alice:secret-a,bob:secret-b"}
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        guard_env(monkeypatch, env)
        async with serving_cli(["--config", str(config)], state=None) as guard:
            alice = await raw_session(guard.mcp_url, {"Authorization": "Bearer secret-a"})
            as_bob = {**alice, "Authorization": "Bearer secret-b"}
            stolen = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "x"}), as_bob)
            own = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "x"}), alice)
    assert stolen.status_code == 404
    assert own.status_code == 200
    assert payload_for(own, 1)["result"]["content"][0]["text"] == "x"
    assert len(counted_calls(tmp_path / "calls.jsonl")) == 1


async def test_an_unreachable_upstream_is_answered_and_the_guard_stays_up(rig: Rig) -> None:
    """Nothing listens at the URL: initialize gets an error naming the server, /readyz says so, the guard serves on."""
    config = rig.config({"gone": {"type": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"}})
    async with serving_cli(["--config", str(config)], state=None) as guard:
        opened = await http_post(guard.mcp_url, initialize_body())
        ready = await http_get(guard.at("/readyz"))
        await guard.stays_up(0.5)
    error = payload_for(opened, 1)["error"]
    assert "upstream 'gone' is unreachable" in error["message"]
    assert ready.status_code == 503
    assert ready.json()["upstreams"]["gone"]["status"] == "down"
    assert ready.json()["upstreams"]["gone"]["reason"] == "unreachable"


async def test_readyz_follows_the_server_down_and_back_and_names_a_refusal(rig: Rig, tmp_path: Path) -> None:
    """The guard's own session with the server is pinged (every second here): a killed server turns /readyz 503,
    its return 200 again.

    A server that refuses ``initialize`` (401) is named by its status, never by its URL.
    """
    port = free_port()
    async with rig.counting_http(tmp_path / "calls.jsonl", port=port) as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        async with rig.guard(["--config", str(config), "--health-interval-seconds", "1"]) as guard:
            up = await http_get(guard.url("/readyz"))
            await counting.kill()
            with anyio.fail_after(30):
                down = await poll(lambda: http_get(guard.url("/readyz")), lambda answer: answer.status_code == 503)
            async with rig.counting_http(tmp_path / "calls.jsonl", port=port):
                with anyio.fail_after(30):
                    back = await poll(lambda: http_get(guard.url("/readyz")), lambda answer: answer.status_code == 200)
    async with rig.raw_http("status:401") as refusing:
        config = rig.config({"refusing": {"type": "http", "url": refusing.mcp_url}})
        async with rig.guard(["--config", str(config)]) as guard:
            refused = await http_get(guard.url("/readyz"))
    assert up.json()["upstreams"]["counting"] == {"status": "ready", "reason": "connected", "restarts": 0}
    assert down.json()["upstreams"]["counting"]["reason"] in ("failed a health check", "unreachable"), down.text
    assert back.json()["upstreams"]["counting"]["restarts"] >= 1, back.text
    assert refused.json()["upstreams"]["refusing"]["status"] == "down", refused.text
    assert refused.json()["upstreams"]["refusing"]["reason"] == "HTTP 401", refused.text


async def test_an_upstream_that_dies_mid_session_gives_the_call_an_error_result(rig: Rig, tmp_path: Path) -> None:
    """The server is killed: the next call is an isError result the model can read, not a broken connection."""
    async with rig.counting_http(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        async with (
            serving_cli(["--config", str(config)], state=None) as guard,
            open_http_session(guard.mcp_url) as opened,
        ):
            with anyio.fail_after(30):
                assert texts(await opened.session.call_tool("echo", {"text": "before"})) == ["before"]
                await counting.kill()
                after = await opened.session.call_tool("echo", {"text": "after"})
    assert after.is_error
    assert "upstream 'counting' is unreachable" in texts(after)[0]


async def test_the_call_timeout_cancels_a_silent_call_upstream(rig: Rig, tmp_path: Path) -> None:
    """No answer or progress within the call timeout: an isError result, and the server gets notifications/cancelled
    naming the call (not only its stream dropped, which also ends the call at the server)."""
    log = tmp_path / "calls.jsonl"
    async with counting_guard(rig, tmp_path, "--call-timeout-seconds", "1") as (guard, _):
        async with open_http_session(guard.mcp_url) as opened:
            with anyio.fail_after(30):
                timed_out = await opened.session.call_tool("slow", {"seconds": 5})
                quick = await opened.session.call_tool("echo", {"text": "still here"})

        def seen(event: str) -> list[dict[str, object]]:
            return [line for line in read_calls(log) if line["event"] == event]

        with anyio.fail_after(10):
            while not (seen("cancelled") and seen("cancel-notice")):  # noqa: ASYNC110 - the server's log is the witness
                await anyio.sleep(0.05)
    slow = [call for call in seen("call") if call["tool"] == "slow"]
    assert [notice["id"] for notice in seen("cancel-notice")] == [slow[0]["id"]]
    assert timed_out.is_error
    assert "call timeout" in texts(timed_out)[0]
    assert texts(quick) == ["still here"]


def read_calls(log: Path) -> list[dict[str, object]]:
    """Every line of the counting server's log, calls and cancellations."""
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.exists() else []


async def test_a_refusal_answers_in_the_era_of_the_request(rig: Rig, tmp_path: Path) -> None:
    """A refused call is an isError result with the verdict in _meta, as a JSON body the client can read."""
    async with counting_guard(rig, tmp_path, "--block-threshold", "2", "--warn-threshold", "1") as (guard, _):
        session = await raw_session(guard.mcp_url)
        answers = [
            await http_post(guard.mcp_url, tool_call_body("echo", {"text": "same"}, request_id=n), session)
            for n in range(1, 4)
        ]
    refused = payload_for(answers[1], 2)["result"]
    assert answers[1].headers["content-type"].startswith("application/json")
    assert refused["isError"] is True
    assert refused["_meta"]["mcp-loop-guard/verdict"]["action"] == "block"
    assert wire(types.CallToolResult.model_validate(refused))["isError"] is True


async def test_sessions_are_capped_and_the_least_recently_used_idle_one_goes(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for two sessions, a third evicts the oldest idle one, which then answers 404 on both sides."""
    env = {"LOOP_GUARD_MAX_SESSIONS": "2"}
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        guard_env(monkeypatch, env)
        async with serving_cli(["--config", str(config)], state=None) as guard:
            first = await raw_session(guard.mcp_url)
            second = await raw_session(guard.mcp_url)
            await http_post(guard.mcp_url, tool_call_body("echo", {"text": "touch"}), first)
            third = await raw_session(guard.mcp_url)
            evicted = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "x"}), second)
            at_server = await http_post(counting.mcp_url, tool_call_body("echo", {"text": "x"}), second)
            kept = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "x"}), first)
            newest = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "x"}), third)
    assert evicted.status_code == 404
    assert at_server.status_code == 404
    assert kept.status_code == 200
    assert newest.status_code == 200


# --- every method crosses: tasks, subscriptions/listen, the 2026-07-28 era ---------------------

RESEARCH = "simulate-research-query"


async def _research(url: str, session: dict[str, str], topic: str, base: int) -> dict[str, Any]:
    """Runs server-everything's research tool as a task over bare POSTs: the handle, polling, the result."""
    params = {"name": RESEARCH, "arguments": {"topic": topic}, "task": {"ttl": 60000}}
    created = payload_for(await http_post(url, _request(base, "tools/call", params), session), base)
    task = created["result"]["task"]["taskId"]
    with anyio.fail_after(30):
        while True:
            status = payload_for(
                await http_post(url, _request(base + 1, "tasks/get", {"taskId": task}), session), base + 1
            )
            if status["result"]["status"] == "completed":
                break
            await anyio.sleep(0.25)
    fetched = await http_post(url, _request(base + 2, "tasks/result", {"taskId": task}), session)
    return payload_for(fetched, base + 2)


def _request(ident: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


async def test_tasks_cross_the_relay_and_a_repeated_task_is_warned(rig: Rig) -> None:
    """Task-augmented calls pass as they came; the same research run again is warned on its result."""
    capabilities = {"tasks": {"requests": {"tools": {"call": {}}}}}
    # Each research task takes server-everything 4 s: warned at the 2nd, the loop takes two of them.
    async with everything_url(rig, "guarded", "--warn-threshold", "2") as (url, _):
        session = await raw_session(url, capabilities=capabilities)
        results = [await _research(url, session, "loops", base) for base in (10, 20)]
    texts_of = [result["result"]["content"][0]["text"] for result in results]
    assert all("loops" in text for text in texts_of)
    verdicts = [(result["result"].get("_meta") or {}).get(VERDICT_KEY, {}).get("action") for result in results]
    assert verdicts == [None, "warn"]


async def test_a_listen_stream_of_the_2026_era_crosses_the_relay(rig: Rig, tmp_path: Path) -> None:
    """A 2026-07-28 client opens subscriptions/listen through the guard and gets the server's change events."""
    async with rig.listen_http() as listen:
        config = rig.config({"listen": {"type": "http", "url": listen.mcp_url}})
        async with (
            serving_cli(["--config", str(config)], state=None) as guard,
            Client(http_streams(guard.mcp_url), mode="auto") as client,
        ):
            assert client.protocol_version == "2026-07-28"
            with anyio.fail_after(20):
                async with client.listen(tools_list_changed=True) as subscription:
                    await client.call_tool("register_tool", {"name": "fresh"})
                    event = await anext(subscription)
                names = {tool.name for tool in (await client.list_tools()).tools}
                answers = [await client.call_tool("ask", {"question": "same?"}) for _ in range(5)]
                asked = await client.call_tool("asked", {})
    assert event == ToolsListChanged()
    assert "fresh" in names
    assert [action(answer) for answer in answers] == [None, None, "warn", "warn", "block"]
    assert texts(asked) == ["4"]


async def test_a_guard_started_again_serves_the_open_sessions_with_their_loop_state(rig: Rig, tmp_path: Path) -> None:
    """The guard is replaced under an open session: the next guard relays it on and its streak goes on."""
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        async with rig.guard(["--config", str(config)]) as first:
            session = await raw_session(first.mcp_url)
            before = [
                await http_post(first.mcp_url, tool_call_body("echo", {"text": "same"}), session) for _ in range(3)
            ]
        async with rig.guard(["--config", str(config)]) as second:
            after = [
                await http_post(second.mcp_url, tool_call_body("echo", {"text": "same"}), session) for _ in range(2)
            ]
    verdicts = [payload_verdict(payload_for(response, 1)) for response in [*before, *after]]
    assert verdicts == [None, None, "warn", "warn", "block"]
    assert len(counted_calls(tmp_path / "calls.jsonl", "echo")) == 4


async def test_a_2026_client_in_front_of_a_handshake_era_server_is_translated(rig: Rig) -> None:
    """server-everything speaks only the handshake era: a 2026-07-28 client gets through the guard's SDK path.

    Only that request loads the SDK: until then the relay (its calls and its probe of the
    server) runs on the guard's own JSON-RPC, which costs an HTTP guard a second less to start.
    """
    async with rig.everything_http() as everything:
        config = rig.config({"everything": everything_http_entry(everything.mcp_url)})
        async with rig.guard(["--config", str(config)], env={"PYTHONPROFILEIMPORTTIME": "1"}) as guard:
            async with Client(http_streams(guard.mcp_url), mode="legacy") as legacy:
                with anyio.fail_after(30):
                    relayed = await legacy.call_tool("echo", {"message": "relayed"})
            ready = await http_get(guard.url("/readyz"))
            before = sdk_modules(guard)
            async with Client(http_streams(guard.mcp_url), mode="2026-07-28") as client:
                with anyio.fail_after(30):
                    answers = [await client.call_tool("echo", {"message": "same"}) for _ in range(5)]
                version = client.protocol_version
            after = sdk_modules(guard)
    assert texts(relayed) == ["Echo: relayed"]
    assert ready.json()["upstreams"]["everything"]["status"] == "ready", ready.text
    assert before == set(), sorted(before)[:10]
    assert {"mcp", "mcp_types"} <= after
    assert version == "2026-07-28"
    assert texts(answers[0]) == ["Echo: same"]
    assert [action(answer) for answer in answers] == [None, None, "warn", "warn", "block"]


async def test_made_up_session_ids_get_404_and_push_no_session_out(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ids the server never gave are refused without loop state: the one real session keeps its room and streak."""
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url}})
        guard_env(monkeypatch, {"LOOP_GUARD_MAX_SESSIONS": "1"})
        async with serving_cli(["--config", str(config)], state=None) as guard:
            real = await raw_session(guard.mcp_url)
            first = [await http_post(guard.mcp_url, tool_call_body("echo", {"text": "same"}), real) for _ in range(2)]
            made_up = [
                await http_post(
                    guard.mcp_url, tool_call_body("echo", {"text": "same"}), {**real, SESSION_HEADER: f"x{n}"}
                )
                for n in range(20)
            ]
            third = await http_post(guard.mcp_url, tool_call_body("echo", {"text": "same"}), real)
    assert [response.status_code for response in made_up] == [404] * 20
    assert [payload_verdict(payload_for(response, 1)) for response in [*first, third]] == [None, None, "warn"]
    assert len(counted_calls(tmp_path / "calls.jsonl", "echo")) == 3


async def test_an_upstream_endpoint_redirected_on_its_own_origin_is_followed(rig: Rig, tmp_path: Path) -> None:
    """The configured URL answers 307 to its normal form (``/mcp/`` to ``/mcp``): the guard follows it."""
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        config = rig.config({"counting": {"type": "http", "url": counting.mcp_url + "/"}})
        async with (
            serving_cli(["--config", str(config)], state=None) as guard,
            Client(http_streams(guard.mcp_url), mode="legacy") as client,
        ):
            with anyio.fail_after(20):
                echoed = await client.call_tool("echo", {"text": "moved?"})
    assert texts(echoed) == ["moved?"]


async def test_a_2026_client_hears_of_a_resource_it_listens_to_through_the_sdk_path(rig: Rig) -> None:
    """A 2026-07-28 client of server-everything (handshake era only) names a resource on its listen stream:
    the guard subscribes to it upstream, and the server's updates of it reach the stream."""
    async with rig.everything_http() as everything:
        config = rig.config({"everything": everything_http_entry(everything.mcp_url)})
        async with (
            serving_cli(["--config", str(config)], state=None) as guard,
            Client(http_streams(guard.mcp_url), mode="2026-07-28") as client,
        ):
            with anyio.fail_after(30):
                uri = str((await client.list_resources()).resources[0].uri)
                async with client.listen(resource_subscriptions=[uri]) as subscription:
                    await client.call_tool("toggle-subscriber-updates", {})  # the server's updates of what it serves
                    event = await anext(subscription)
                await client.call_tool("toggle-subscriber-updates", {})
    assert event == ResourceUpdated(uri=uri)
