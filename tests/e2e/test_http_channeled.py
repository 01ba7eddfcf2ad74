"""The HTTP guard in front of one remote server it does not share: each session over an upstream session of its own.

A legacy SSE server behind the guard, which streamable HTTP clients reach: what a client sees
through the guard is compared with what the SDK's own SSE client sees directly, in the same
test. The rest checks what per-session upstream sessions take: a loop ends its own session
and its upstream session, the other session goes on; a cut stream is resumed; an unreachable
server is named; ``/readyz`` follows the server down and back; no SDK is loaded for any of
it. And legacy SSE clients in front of one streamable HTTP server, relayed the same way.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path

import anyio
import pytest

from tests.harness import (
    ClientUser,
    Inbox,
    action,
    command_process,
    counted_calls,
    echo_once_back,
    everything_command,
    everything_facts,
    texts,
)
from tests.http_harness import (
    Rig,
    ServerProcess,
    free_port,
    http_get,
    http_post,
    initialize_body,
    open_http_session,
    open_sse_session,
    ping_in_session,
    poll,
    post_cut_after,
    raw_session,
    run_server,
    sdk_modules,
    tool_call_body,
)
from tests.proxy.http_inproc import InProcessServer, serving_counting

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def _guard_in_front(
    rig: Rig, url: str, *args: str, env: dict[str, str] | None = None
) -> AbstractAsyncContextManager[ServerProcess]:
    config = rig.config({"upstream": {"type": "sse" if url.endswith("/sse") else "http", "url": url}})
    return rig.guard(["--config", str(config), *args], env=env)


def _connections_to(guard: ServerProcess, server: ServerProcess | InProcessServer) -> int:
    """The guard's open TCP connections to the server's port."""
    connections = command_process(guard.process.pid).net_connections(kind="tcp")
    return sum(1 for c in connections if c.raddr and c.raddr.port == server.port and c.status == "ESTABLISHED")


async def test_a_client_sees_through_the_guard_what_it_sees_over_sse(rig: Rig) -> None:
    """Tools, results, resources, prompts, progress and the server's sampling request, as over SSE directly."""
    direct_user, guarded_user = ClientUser(), ClientUser()
    async with run_server(
        lambda port: (everything_command("sse"), {"PORT": str(port)}),
        marker=rig.marker,
        stderr=rig.log("everything-sse"),
        accept=None,
    ) as everything:
        url = everything.url("/sse")
        async with open_sse_session(url, callbacks=direct_user.callbacks(Inbox())) as opened:
            direct = await everything_facts(opened.session, direct_user)
            direct_info = opened.initialize.server_info
        async with (
            _guard_in_front(rig, url) as guard,
            open_http_session(guard.mcp_url, callbacks=guarded_user.callbacks(Inbox())) as opened,
        ):
            guarded = await everything_facts(opened.session, guarded_user)
            guarded_info = opened.initialize.server_info
    assert guarded == direct
    assert direct["progress"] == [1, 2, 3]
    assert direct["sampled"] == (False, 1)
    assert guarded_info == direct_info


async def test_a_loop_ends_its_own_session_and_its_upstream_session_only(rig: Rig, tmp_path: Path) -> None:
    """Warned at 3, refused at 5, aborted at 7; the session's id then gets 404, its SSE session at the server ends."""
    log = tmp_path / "calls.jsonl"
    async with (
        serving_counting(log, sse=True) as counting,
        _guard_in_front(rig, counting.url("/sse")) as guard,
        open_http_session(guard.mcp_url) as looping,
        open_http_session(guard.mcp_url) as bystander,
    ):
        with anyio.fail_after(30):
            await bystander.session.call_tool("echo", {"text": "here"})
            streams = _connections_to(guard, counting)
            verdicts = [action(await looping.session.call_tool("constant", {})) for _ in range(7)]
            after = await bystander.session.call_tool("constant", {})
            left = await poll(lambda: anyio.to_thread.run_sync(_connections_to, guard, counting), lambda n: n < streams)
        gone = await ping_in_session(guard.mcp_url, looping.session_id)
    assert verdicts == [None, None, "warn", "warn", "block", "block", "abort"]
    assert gone.status_code == 404, gone.text
    assert action(after) is None
    assert len(counted_calls(log, "constant")) == 5  # 4 of the looping session's, the bystander's 1
    assert streams >= 2  # an event stream each
    assert left < streams


async def test_a_cut_call_stream_is_resumed_in_front_of_an_sse_server(rig: Rig, tmp_path: Path) -> None:
    """The events a cut stream missed, the answer included, come on a GET with Last-Event-ID; the call ran once."""
    log = tmp_path / "calls.jsonl"
    async with serving_counting(log, sse=True) as counting, _guard_in_front(rig, counting.url("/sse")) as guard:
        session = await raw_session(guard.mcp_url)
        body = tool_call_body("slow", {"seconds": 1.0}, request_id=5)
        body["params"]["_meta"] = {"progressToken": "t"}
        received = await post_cut_after(guard.mcp_url, body, session, lambda text: "notifications/progress" in text)
        last_id = [line[4:] for line in received.splitlines() if line.startswith("id: ")][-1]
        resumed = await http_get(guard.mcp_url, session | {"Accept": "text/event-stream", "Last-Event-ID": last_id})
    messages = [json.loads(line[6:]) for line in resumed.text.splitlines() if line.startswith("data: ") and line[6:]]
    assert messages[-1]["id"] == 5
    assert texts_of(messages[-1]) == ["slept 1.0 seconds"]
    assert [m["params"]["progress"] for m in messages[:-1]] == list(range(2, 11))
    assert len(counted_calls(log, "slow")) == 1


def texts_of(message: dict[str, object]) -> list[str]:
    result = message["result"]
    assert isinstance(result, dict)
    return [item["text"] for item in result["content"]]


async def test_an_unreachable_sse_server_is_named_in_the_answer(rig: Rig) -> None:
    """Nothing listens at the URL: the client's initialize gets an error that names the upstream, at once."""
    url = f"http://127.0.0.1:{free_port()}/sse"
    async with _guard_in_front(rig, url, "--call-timeout-seconds", "1") as guard:
        with anyio.fail_after(20):
            opened = await http_post(guard.mcp_url, initialize_body())
    error = [json.loads(line[6:]) for line in opened.text.splitlines() if line.startswith("data: ") and line[6:]]
    assert "'upstream' is unreachable" in error[-1]["error"]["message"], error


async def test_legacy_sse_clients_are_relayed_to_a_streamable_http_server(rig: Rig, tmp_path: Path) -> None:
    """``--transport sse`` in front of one streamable HTTP server: each connection its own server session, judged."""
    log = tmp_path / "calls.jsonl"
    async with (
        serving_counting(log) as counting,
        _guard_in_front(rig, counting.mcp_url, "--transport", "sse") as guard,
        open_sse_session(guard.url("/sse")) as looping,
        open_sse_session(guard.url("/sse")) as bystander,
    ):
        with anyio.fail_after(30):
            echoed = await bystander.session.call_tool("echo", {"text": "through"})
            verdicts = [action(await looping.session.call_tool("constant", {})) for _ in range(5)]
    assert texts(echoed) == ["through"]
    assert verdicts == [None, None, "warn", "warn", "block"]
    assert len(counted_calls(log, "constant")) == 4


async def test_an_sse_server_restarted_on_its_port_is_given_the_clients_handshake_again(
    rig: Rig, tmp_path: Path
) -> None:
    """The server's event stream ends with it; the session goes on with the new server, without a new initialize."""
    port = free_port()
    log = tmp_path / "calls.jsonl"
    async with AsyncExitStack() as stack:
        first_server = AsyncExitStack()
        await first_server.enter_async_context(rig.counting_sse(log, port))
        guard = await stack.enter_async_context(_guard_in_front(rig, f"http://127.0.0.1:{port}/sse"))
        opened = await stack.enter_async_context(open_http_session(guard.mcp_url))
        with anyio.fail_after(20):
            before = await opened.session.call_tool("echo", {"text": "before"})
        await first_server.aclose()
        await stack.enter_async_context(rig.counting_sse(log, port))

        await echo_once_back(opened.session, "after")
    assert texts(before) == ["before"]
    assert [call["arguments"]["text"] for call in counted_calls(log, "echo")][-1] == "after"


async def test_a_legacy_sse_client_sees_through_the_guard_what_it_sees_over_streamable_http(rig: Rig) -> None:
    """``--transport sse`` in front of server-everything's streamable HTTP mode, against its own client directly."""
    direct_user, guarded_user = ClientUser(), ClientUser()
    async with rig.everything_http() as everything:
        async with open_http_session(everything.mcp_url, callbacks=direct_user.callbacks(Inbox())) as opened:
            direct = await everything_facts(opened.session, direct_user)
            direct_info = opened.initialize.server_info
        async with (
            _guard_in_front(rig, everything.mcp_url, "--transport", "sse") as guard,
            open_sse_session(guard.url("/sse"), callbacks=guarded_user.callbacks(Inbox())) as opened,
        ):
            guarded = await everything_facts(opened.session, guarded_user)
            guarded_info = opened.initialize.server_info
    assert guarded == direct
    assert direct["sampled"] == (False, 1)
    assert guarded_info == direct_info


async def test_readyz_follows_an_sse_server_down_and_back_and_the_sdk_stays_unloaded(rig: Rig, tmp_path: Path) -> None:
    """The guard's own probe of the server (its event stream, an ``initialize``, pings) says what ``/readyz`` says."""
    port = free_port()
    log = tmp_path / "calls.jsonl"
    async with AsyncExitStack() as stack:
        first_server = AsyncExitStack()
        await first_server.enter_async_context(rig.counting_sse(log, port))
        url = f"http://127.0.0.1:{port}/sse"
        guard = await stack.enter_async_context(_guard_in_front(rig, url, env={"PYTHONPROFILEIMPORTTIME": "1"}))

        async def ready() -> int:
            return (await http_get(guard.url("/readyz"))).status_code

        with anyio.fail_after(20):
            up = await poll(ready, lambda status: status == 200, 0.1)
        async with open_http_session(guard.mcp_url) as client:
            with anyio.fail_after(20):
                echoed = await client.session.call_tool("echo", {"text": "probed"})
        await first_server.aclose()
        with anyio.fail_after(20):
            down = await http_get(guard.url("/readyz"))
            while down.status_code == 200:
                await anyio.sleep(0.1)
                down = await http_get(guard.url("/readyz"))
        await stack.enter_async_context(rig.counting_sse(log, port))
        with anyio.fail_after(30):
            back = await poll(ready, lambda status: status == 200, 0.2)
        loaded = sdk_modules(guard)
    assert (up, back) == (200, 200)
    assert texts(echoed) == ["probed"]
    assert down.status_code == 503, down.text
    assert down.json()["upstreams"]["upstream"]["status"] == "down", down.text
    assert loaded == set(), sorted(loaded)[:10]
