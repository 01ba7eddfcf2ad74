"""The stdio guard in front of one streamable HTTP server (``--upstream URL``): each message POSTed as it came.

What a client sees through ``mcp-loop-guard --upstream URL`` is compared with what it sees
talking to the server over HTTP itself, in the same test; the rest checks what only the
guard does: loops warned, refused and aborted, a server that forgot its session, an
unreachable server, and both protocol eras (2026-07-28 routing headers included).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.forward_proxy import running_forward_proxy
from tests.harness import (
    ClientUser,
    Connector,
    Inbox,
    action,
    counted_calls,
    everything_facts,
    facts_through_guard,
    fixture_command,
    guard_command,
    looped_until_aborted,
    server_environment,
    texts,
)
from tests.http_harness import Rig, ServerProcess, free_port, http_streams, open_http_session, poll, run_server
from tests.proxy.http_inproc import serving_counting

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def _guard_args(url: str, *extra: str) -> list[str]:
    return [*extra, "--upstream", url]


async def test_a_client_sees_through_the_guard_what_it_sees_over_http(rig: Rig, connect: Connector) -> None:
    """Tools, results, resources, prompts, progress and the server's sampling request, as over HTTP directly."""
    async with rig.everything_http() as everything:
        direct_user = ClientUser()
        async with open_http_session(everything.mcp_url, callbacks=direct_user.callbacks(Inbox())) as opened:
            direct = await everything_facts(opened.session, direct_user)
            direct_info = opened.initialize.server_info
        guarded, guarded_info = await facts_through_guard(connect, _guard_args(everything.mcp_url))
    assert guarded == direct
    assert direct["progress"] == [1, 2, 3]
    assert direct["sampled"] == (False, 1)
    assert guarded_info == direct_info


async def test_a_loop_is_warned_refused_and_aborted(rig: Rig, connect: Connector, tmp_path: Path) -> None:
    """Identical calls: warned at 3, refused from 5 without reaching the server, the session ended after 3 refusals."""
    log = tmp_path / "calls.jsonl"
    async with serving_counting(log) as counting:
        actions = await looped_until_aborted(connect, _guard_args(counting.mcp_url))
    assert actions == [None, None, "warn", "warn", "block", "block", "abort"]
    assert len(counted_calls(log, "constant")) == 4


async def test_a_server_that_forgot_the_session_is_given_the_handshake_again(
    rig: Rig, connect: Connector, tmp_path: Path
) -> None:
    """The server restarts on its port (its sessions gone): the guard opens another with the client's handshake."""
    port = free_port()
    log = tmp_path / "calls.jsonl"

    def counting(port: int) -> tuple[list[str], dict[str, str]]:
        return fixture_command("counting_server", "--http", str(port)), {"COUNTING_SERVER_LOG": str(log)}

    @asynccontextmanager
    async def server() -> AsyncIterator[ServerProcess]:
        async with run_server(
            counting,
            marker=rig.marker,
            stderr=rig.log("counting"),
            ready_path="/mcp",
            accept=lambda status: True,
            port=port,
            attempts=1,
        ) as process:
            yield process

    url = f"http://127.0.0.1:{port}/mcp"
    async with AsyncExitStack() as stack:
        first_server = AsyncExitStack()
        await first_server.enter_async_context(server())
        guard = await stack.enter_async_context(connect.guard_process([], guard_args=_guard_args(url)))
        with anyio.fail_after(20):
            first = await guard.session.call_tool("echo", {"text": "before"})
        await first_server.aclose()
        await stack.enter_async_context(server())
        with anyio.fail_after(30):
            second = await guard.session.call_tool("echo", {"text": "after"})
            third = await guard.session.call_tool("echo", {"text": "again"})
        stderr = guard.connection.stderr_text()
    assert texts(first) == ["before"]
    assert texts(second) == ["after"], texts(second)
    assert texts(third) == ["again"]
    assert "forgot the session" in stderr


async def test_an_unreachable_server_is_named_in_the_answer(process_marker: str) -> None:
    """Nothing listens at the URL: the client's handshake gets an error saying the upstream is unreachable."""
    url = f"http://127.0.0.1:{free_port()}/mcp"
    unreachable = _failing_with("is unreachable")
    with anyio.fail_after(30), unreachable:
        async with Client(_stdio_guard(url, process_marker), mode="legacy"):
            pass


def _failing_with(pattern: str) -> pytest.RaisesGroup[MCPError]:
    """Expects the client to fail with an MCP error matching ``pattern`` (raised inside its task groups)."""
    return pytest.RaisesGroup(pytest.RaisesExc(MCPError, match=pattern), flatten_subgroups=True)


def _stdio_guard(url: str, marker: str) -> StdioServerParameters:
    argv = guard_command([], _guard_args(url))
    return StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(marker, None))


async def test_a_server_behind_a_forward_proxy_is_reached_through_it(rig: Rig, tmp_path: Path) -> None:
    """HTTP_PROXY (a real proxy asking for credentials) carries every request; with NO_PROXY the server is direct."""
    log = tmp_path / "calls.jsonl"
    nowhere = f"http://127.0.0.1:{free_port()}"
    with running_forward_proxy(tmp_path / "proxy") as proxy:
        async with serving_counting(log) as counting:
            through = _stdio_guard(counting.mcp_url, rig.marker)
            assert through.env is not None
            through.env["HTTP_PROXY"] = proxy.url
            with anyio.fail_after(30):
                async with Client(through, mode="legacy") as client:
                    answers = [await client.call_tool("constant", {}) for _ in range(5)]
            direct = _stdio_guard(counting.mcp_url, rig.marker)
            assert direct.env is not None
            direct.env.update(HTTP_PROXY=nowhere, NO_PROXY="localhost,127.0.0.1")
            with anyio.fail_after(30):
                async with Client(direct, mode="legacy") as client:
                    echoed = await client.call_tool("echo", {"text": "direct"})

        async def requests() -> list[str]:
            return proxy.requests()

        with anyio.fail_after(10):
            logged = await poll(requests, bool)
    assert [action(answer) for answer in answers] == [None, None, "warn", "warn", "block"]
    assert texts(echoed) == ["direct"]
    assert len(counted_calls(log, "constant")) == 4
    port = counting.mcp_url.split(":")[2].split("/")[0]
    assert all(re.fullmatch(rf"(GET|POST|DELETE) 127\.0\.0\.1:{port}/mcp - 2\d\d .*", line) for line in logged), logged


async def test_a_2026_client_crosses_with_its_routing_headers(rig: Rig) -> None:
    """A 2026-07-28 client over stdio: its requests carry that era's headers upstream (Mcp-Param-* included)."""
    async with rig.listen_http() as listen, Client(_stdio_guard(listen.mcp_url, rig.marker), mode="auto") as client:
        assert client.protocol_version == "2026-07-28"
        with anyio.fail_after(30):
            async with client.listen(tools_list_changed=True) as subscription:
                await client.call_tool("register_tool", {"name": "fresh"})
                event = await anext(subscription)
            located = await client.call_tool("locate", {"region": "eu west"})
            answers = [await client.call_tool("ask", {"question": "same?"}) for _ in range(5)]
            asked = await client.call_tool("asked", {})
    assert event == ToolsListChanged()
    assert not located.is_error, texts(located)
    assert texts(located) == ["in eu west"]
    assert [action(answer) for answer in answers] == [None, None, "warn", "warn", "block"]
    assert texts(asked) == ["4"]


async def test_a_2026_client_falls_back_to_the_handshake_of_an_older_server(rig: Rig) -> None:
    """server-everything speaks only the handshake era: the client is told so by the server and falls back."""
    async with (
        rig.everything_http() as everything,
        Client(_stdio_guard(everything.mcp_url, rig.marker), mode="auto") as client,
    ):
        with anyio.fail_after(30):
            echoed = await client.call_tool("echo", {"message": "hi"})
        assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
    assert texts(echoed) == ["Echo: hi"]


async def test_a_stream_the_server_closes_before_its_answer_is_resumed(rig: Rig) -> None:
    """The server ends a call's event stream early (the spec's polling): the guard resumes it with Last-Event-ID."""
    async with rig.listen_http("--resumable") as listen:
        direct = await _answer_later(Client(http_streams(listen.mcp_url), mode="legacy"))
        guarded = await _answer_later(Client(_stdio_guard(listen.mcp_url, rig.marker), mode="legacy"))
    assert direct == guarded == ["answered after the stream closed"]


async def _answer_later(client: Client) -> list[str]:
    async with client:
        with anyio.fail_after(20):
            return texts(await client.call_tool("answer_later", {}))


async def test_calls_in_flight_at_once_are_answered_each_on_its_own(
    rig: Rig, connect: Connector, tmp_path: Path
) -> None:
    """Parallel calls (a model's several tool uses in one turn) go out at once and each gets its own answer."""
    async with (
        serving_counting(tmp_path / "calls.jsonl") as counting,
        connect.guard_process([], guard_args=_guard_args(counting.mcp_url)) as guard,
    ):
        answers: dict[int, list[str]] = {}
        finished: list[str] = []

        async def echo(number: int) -> None:
            answers[number] = texts(await guard.session.call_tool("echo", {"text": f"call {number}"}))
            finished.append("echo")

        async def slow() -> None:
            await guard.session.call_tool("slow", {"seconds": 2})
            finished.append("slow")

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(slow)
                tg.start_soon(slow)
                await anyio.sleep(0.1)  # both slow calls are out first
                for number in range(5):
                    tg.start_soon(echo, number)
    assert answers == {number: [f"call {number}"] for number in range(5)}
    assert finished == ["echo"] * 5 + ["slow"] * 2, "a call waited for another's answer"


async def test_a_server_dying_in_the_middle_of_a_call_is_reported(rig: Rig, connect: Connector, tmp_path: Path) -> None:
    """The server exits while answering: the call gets an isError result naming the upstream; the guard stays up."""
    async with (
        rig.counting_http(tmp_path / "calls.jsonl") as counting,
        connect.guard_process([], guard_args=_guard_args(counting.mcp_url)) as guard,
    ):
        with anyio.fail_after(20):
            crashed = await guard.session.call_tool("crash", {})
            await counting.process.wait()  # its port is closed once it has exited, not when the answer broke off
            again = await guard.session.call_tool("echo", {"text": "still there?"})
    assert crashed.is_error
    assert "[loop-guard]" in texts(crashed)[0]
    assert "127.0.0.1" in texts(crashed)[0] or "127-0-0-1" in texts(crashed)[0], texts(crashed)
    assert again.is_error, "nothing serves the URL any more"
    assert "unreachable" in texts(again)[0], texts(again)


async def test_a_server_wanting_credentials_is_named_with_what_to_do(rig: Rig) -> None:
    """Every request answered 401: the handshake's error says so and how to give credentials."""
    refused = pytest.RaisesGroup(
        pytest.RaisesExc(MCPError, match=r"HTTP 401: give its credentials"), flatten_subgroups=True
    )
    async with rig.raw_http("status:401") as server:
        with anyio.fail_after(30), refused:
            async with Client(_stdio_guard(server.mcp_url, rig.marker), mode="legacy"):
                pass


async def test_a_server_that_never_answers_holds_nothing_up(rig: Rig) -> None:
    """The server takes the connection and never answers: the handshake fails at the call timeout, not later."""
    timed_out = pytest.RaisesGroup(
        pytest.RaisesExc(MCPError, match="did not answer initialize"), flatten_subgroups=True
    )
    async with rig.raw_http("silent") as server:
        argv = guard_command([], _guard_args(server.mcp_url, "--call-timeout-seconds", "1"))
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(rig.marker, None))
        with anyio.fail_after(20), timed_out:
            async with Client(params, mode="legacy"):
                pass


async def test_an_endpoint_redirected_on_its_own_origin_is_followed(rig: Rig, tmp_path: Path) -> None:
    """``/mcp/`` answers 307 to ``/mcp`` (a trailing-slash rule): followed, as the SDK client follows it."""
    async with serving_counting(tmp_path / "calls.jsonl") as counting:
        url = counting.mcp_url + "/"
        direct = await _echo(Client(http_streams(url), mode="legacy"))
        guarded = await _echo(Client(_stdio_guard(url, rig.marker), mode="legacy"))
    assert direct == guarded == ["moved?"]


async def _echo(client: Client) -> list[str]:
    async with client:
        with anyio.fail_after(20):
            return texts(await client.call_tool("echo", {"text": "moved?"}))
