"""The stdio guard in front of one legacy SSE server (``--upstream URL/sse``): relayed message by message.

What a client sees through the guard is compared with what the SDK's own SSE client sees, in
the same test; the rest checks what only the guard does: a loop warned, refused and aborted,
a server restarted on its port (its session gone) given the client's handshake again, and an
unreachable server named in the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.forward_proxy import running_forward_proxy
from tests.harness import (
    ClientUser,
    Connector,
    Inbox,
    action,
    counted_calls,
    echo_once_back,
    everything_command,
    everything_facts,
    facts_through_guard,
    guard_command,
    looped_until_aborted,
    server_environment,
    texts,
)
from tests.http_harness import Rig, ServerProcess, free_port, open_sse_session, poll, run_server
from tests.proxy.http_inproc import serving_counting

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

Launch = Callable[[int], tuple[list[str], dict[str, str]]]


def _everything(port: int) -> tuple[list[str], dict[str, str]]:
    return everything_command("sse"), {"PORT": str(port)}


def _serve(rig: Rig, launch: Launch, label: str) -> AbstractAsyncContextManager[ServerProcess]:
    """A legacy SSE server, ready once its port takes connections (``GET /sse`` would open a session)."""
    return run_server(launch, marker=rig.marker, stderr=rig.log(label), accept=None)


async def test_a_client_sees_through_the_guard_what_it_sees_over_sse(rig: Rig, connect: Connector) -> None:
    """Tools, results, resources, prompts, progress and the server's sampling request, as over SSE directly."""
    direct_user = ClientUser()
    async with _serve(rig, _everything, "everything-sse") as everything:
        url = everything.url("/sse")
        async with open_sse_session(url, callbacks=direct_user.callbacks(Inbox())) as opened:
            direct = await everything_facts(opened.session, direct_user)
            direct_info = opened.initialize.server_info
        guarded, guarded_info = await facts_through_guard(connect, ["--upstream", url])
    assert guarded == direct
    assert direct["progress"] == [1, 2, 3]
    assert direct["sampled"] == (False, 1)
    assert guarded_info == direct_info


async def test_a_loop_is_warned_refused_and_aborted(rig: Rig, connect: Connector, tmp_path: Path) -> None:
    """Identical calls: warned at 3, refused from 5 without reaching the server, the session ended after 3 refusals."""
    log = tmp_path / "calls.jsonl"
    async with serving_counting(log, sse=True) as counting:
        actions = await looped_until_aborted(connect, ["--upstream", counting.url("/sse")])
    assert actions == [None, None, "warn", "warn", "block", "block", "abort"]
    assert len(counted_calls(log, "constant")) == 4


async def test_a_server_restarted_on_its_port_is_given_the_handshake_again(
    rig: Rig, connect: Connector, tmp_path: Path
) -> None:
    """The server's event stream ends with it: the call in flight is answered, the next ones reach the new server."""
    port = free_port()
    log = tmp_path / "calls.jsonl"
    url = f"http://127.0.0.1:{port}/sse"
    async with AsyncExitStack() as stack:
        first_server = AsyncExitStack()
        await first_server.enter_async_context(rig.counting_sse(log, port))
        guard = await stack.enter_async_context(connect.guard_process([], guard_args=["--upstream", url]))
        with anyio.fail_after(20):
            first = await guard.session.call_tool("echo", {"text": "before"})
        await first_server.aclose()
        await stack.enter_async_context(rig.counting_sse(log, port))

        await echo_once_back(guard.session, "after")
        stderr = guard.connection.stderr_text()
    assert texts(first) == ["before"]
    assert "reopened the session" in stderr
    assert [call["arguments"]["text"] for call in counted_calls(log, "echo")][-1] == "after"


async def test_an_unreachable_server_is_named_in_the_answer(process_marker: str) -> None:
    """Nothing listens at the URL: the client's handshake gets an error saying the upstream is not connected."""
    url = f"http://127.0.0.1:{free_port()}/sse"
    argv = guard_command([], ["--upstream", url, "--call-timeout-seconds", "5"])
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(process_marker, None))
    failing = pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="unreachable|not connected"), flatten_subgroups=True)
    with anyio.fail_after(30), failing:
        async with Client(params, mode="legacy"):
            pass


async def test_a_server_behind_a_forward_proxy_is_reached_through_it(rig: Rig, tmp_path: Path) -> None:
    """HTTP_PROXY (a real proxy asking for credentials) carries the event stream and every message, as they come."""
    log = tmp_path / "calls.jsonl"
    with running_forward_proxy(tmp_path / "proxy") as proxy:
        async with serving_counting(log, sse=True) as counting:
            argv = guard_command([], ["--upstream", counting.url("/sse")])
            env = server_environment(rig.marker, {"HTTP_PROXY": proxy.url})
            params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
            with anyio.fail_after(30):
                async with Client(params, mode="legacy") as client:
                    answers = [await client.call_tool("constant", {}) for _ in range(5)]

        async def requests() -> list[str]:
            return proxy.requests()

        with anyio.fail_after(10):
            logged = await poll(requests, lambda lines: any(line.startswith("GET ") for line in lines))
    assert [action(answer) for answer in answers] == [None, None, "warn", "warn", "block"]
    assert len(counted_calls(log, "constant")) == 4
    port = counting.url("/sse").split(":")[2].split("/")[0]
    assert f"GET 127.0.0.1:{port}/sse - 200 OK" in logged, logged
    assert any(line.startswith(f"POST 127.0.0.1:{port}/messages") for line in logged), logged
