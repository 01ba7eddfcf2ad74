"""Event streams of the HTTP guard: kept open through idle proxies, and resumed with ``Last-Event-ID`` when cut.

In front of one shared stdio server the guard keeps the events itself. It runs the counting
fixture as its shared child, and a client's connection is cut in the middle of a slow call,
once by a bare client that then resumes by hand, once by a TCP relay between the SDK's own
client and the guard, which the SDK client recovers from by itself: either way the answer
arrives, and the call reached the child once. A call that stays silent has its stream carry
comments, which proxies take for traffic and clients skip. In front of one streamable HTTP
server the resuming GET goes to the server, which keeps its own events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute
from mcp import Client

from tests.harness import counted_calls, fixture_command, texts
from tests.http_harness import (
    LOCALHOST,
    MCP_POST_HEADERS,
    Rig,
    http_client,
    http_get,
    http_streams,
    open_http_session,
    post_cut_after,
    raw_session,
    tool_call_body,
)
from tests.proxy.http_inproc import serving_ready

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def _events(text: str) -> list[tuple[str | None, str]]:
    """(id, data) of each server-sent event in ``text``."""
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "") for line in block.split("\n"))
        found.append((fields.get("id"), fields.get("data", "")))
    return found


async def test_a_client_cut_mid_call_resumes_its_stream_and_gets_the_answer_of_the_one_call(
    rig: Rig, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    async with serving_ready(["--", *fixture_command("counting_server")], {"COUNTING_SERVER_LOG": str(log)}) as guard:
        session = await raw_session(guard.mcp_url)
        body = tool_call_body("slow", {"seconds": 1.2}, request_id=7)
        body["params"]["_meta"] = {"progressToken": "p"}
        # the connection is dropped after the second progress event, the call still running
        received = await post_cut_after(
            guard.mcp_url, body, session, lambda text: text.count("notifications/progress") >= 2
        )
        first = _events(received)
        priming_id, priming_data = first[0]  # a priming event: the client can resume even before the first message
        assert priming_id is not None
        assert priming_id.endswith("/0")
        assert priming_data == ""
        assert [json.loads(data)["params"]["progress"] for _, data in first[1:]] == [1, 2]
        last_id = first[-1][0]
        assert last_id is not None

        await anyio.sleep(1.5)  # the call ends while the client is away
        resumed = await http_get(guard.mcp_url, session | {"Accept": "text/event-stream", "Last-Event-ID": last_id})
        assert resumed.status_code == 200, resumed.text
        rest = _events(resumed.text)
        messages = [json.loads(data) for _, data in rest if data]
        progress = [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]
        assert progress == list(range(3, 13))  # nothing sent twice, nothing lost
        assert messages[-1]["id"] == 7
        assert messages[-1]["result"]["content"][0]["text"] == "slept 1.2 seconds"
        numbers = [int(event_id.split("/")[1]) for event_id, data in rest if data and event_id]
        assert numbers == list(range(int(last_id.split("/")[1]) + 1, int(last_id.split("/")[1]) + 1 + len(numbers)))

        again = await http_get(guard.mcp_url, session | {"Accept": "text/event-stream", "Last-Event-ID": last_id})
        assert again.status_code == 400  # written to its end: nothing is left to resume
        unknown = await http_get(guard.mcp_url, session | {"Accept": "text/event-stream", "Last-Event-ID": "x"})
        assert unknown.status_code == 400
    assert len(counted_calls(log, "slow")) == 1


@asynccontextmanager
async def _cutting_relay(port: int, marker: bytes) -> AsyncIterator[tuple[int, list[int]]]:
    """A TCP relay to ``port`` that drops the first connection on which the server sends ``marker``."""
    listener = await anyio.create_tcp_listener(local_host=LOCALHOST)
    cuts: list[int] = []

    async def relay(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp(LOCALHOST, port) as server, anyio.create_task_group() as tg:

            async def upward() -> None:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):  # the client reset it
                    async for chunk in client:
                        await server.send(chunk)
                tg.cancel_scope.cancel()

            async def downward() -> None:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    async for chunk in server:
                        await client.send(chunk)
                        if not cuts and marker in chunk:
                            cuts.append(len(chunk))
                            break
                tg.cancel_scope.cancel()

            tg.start_soon(upward)
            tg.start_soon(downward)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, relay)
        yield listener.extra(SocketAttribute.local_port), cuts  # noqa: S610 - anyio's typed attributes
        tg.cancel_scope.cancel()


async def test_the_sdk_client_recovers_a_cut_call_stream_by_itself(rig: Rig, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    async with (
        serving_ready(["--", *fixture_command("counting_server")], {"COUNTING_SERVER_LOG": str(log)}) as guard,
        _cutting_relay(guard.port, b"notifications/progress") as (port, cuts),
        open_http_session(f"http://{LOCALHOST}:{port}/mcp") as http,
    ):
        steps: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            steps.append(progress)

        with anyio.fail_after(20):
            result = await http.session.call_tool("slow", {"seconds": 1.0}, progress_callback=on_progress)
        assert texts(result) == ["slept 1.0 seconds"]
        assert not result.is_error
        assert cuts, "the relay never cut the stream"
        assert steps == sorted(set(steps))  # none twice
        assert steps[-1] == 10  # the last progress came through the resumed stream
    assert len(counted_calls(log, "slow")) == 1


async def test_a_stream_the_server_closes_is_resumed_at_the_server_through_the_guard(rig: Rig) -> None:
    """The server ends a call's stream before its answer (the spec's polling); the client resumes via the guard."""
    async with rig.listen_http("--resumable") as listen:
        config = rig.config({"listen": {"type": "http", "url": listen.mcp_url}})
        async with (
            serving_ready(["--config", str(config)]) as guard,
            Client(http_streams(guard.mcp_url), mode="legacy") as client,
        ):
            with anyio.fail_after(20):
                answered = await client.call_tool("answer_later", {})
    assert texts(answered) == ["answered after the stream closed"]


async def test_a_silent_call_stream_carries_comments_that_clients_skip(rig: Rig, tmp_path: Path) -> None:
    """``LOOP_GUARD_SSE_PING_SECONDS``: a comment after each such silence, so a proxy's idle timer never cuts it."""
    env = {"COUNTING_SERVER_LOG": str(tmp_path / "calls.jsonl"), "LOOP_GUARD_SSE_PING_SECONDS": "0.2"}
    async with serving_ready(["--", *fixture_command("counting_server")], env) as guard:
        session = await raw_session(guard.mcp_url)
        body = tool_call_body("slow", {"seconds": 1.2}, request_id=3)  # no progress token: nothing to say meanwhile
        async with http_client(timeout=10) as client:
            response = await client.post(guard.mcp_url, content=json.dumps(body), headers=MCP_POST_HEADERS | session)
        before, _, answer = response.text.rpartition("event: message")
        assert before.count(": ping\n\n") >= 3, response.text
        assert json.loads(answer.partition("data: ")[2])["result"]["content"][0]["text"] == "slept 1.2 seconds"

        async with open_http_session(guard.mcp_url) as http:
            with anyio.fail_after(20):
                result = await http.session.call_tool("slow", {"seconds": 0.6})
        assert texts(result) == ["slept 0.6 seconds"]
