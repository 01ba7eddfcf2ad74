"""Both protocol eras cross the stdio guard as they cross a pipe, in every client/upstream pairing.

A 2026-07-28 client (``mcp.Client(mode="auto")``: ``server/discover``, no ``initialize``) in
front of a 2026-07-28 upstream keeps its ``subscriptions/listen`` stream; in front of a
handshake-era upstream it falls back to ``initialize`` and gets the upstream's sampling and
elicitation requests; a 2025-11-25 client (``mode="legacy"``) in front of a 2026-07-28-capable
upstream gets the handshake and ordinary list-changed notifications. Each case runs straight
against the server and through ``python -m mcp_loop_guard -- <server>``, with a wiretap between
whoever speaks to the server and the server, so the tests see that what the client got is what
the upstream sent. The loop guard still judges ``tools/call`` in the 2026-07-28 era.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.subscriptions import ResourceUpdated, ServerEvent, Subscription, ToolsListChanged
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.harness import (
    ELICITED_NAME,
    MARKER,
    SAMPLED_TEXT,
    ClientUser,
    Inbox,
    Mode,
    fixture_command,
    guard_command,
    guard_notes,
    server_environment,
    tapped,
    texts,
    verdict,
    wiretap_command,
)
from tests.http_harness import write_config

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]
both_modes = pytest.mark.parametrize("mode", ["direct", "guarded"])

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
NOTE_URI = "note://board"
"""The listen fixture's one resource; ``write_note`` announces its updates."""
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
"""The ``_meta`` key stamping each frame of a ``subscriptions/listen`` stream."""
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
"""The ``_meta`` key naming the server on every 2026-07-28 result."""
EVENT_WAIT = 10
"""Seconds an announced change may take to arrive."""


def _parameters(command: Sequence[str], mode: Mode, marker: str) -> StdioServerParameters:
    """The stdio parameters of command, run directly or as the guard's upstream."""
    argv = guard_command(command) if mode == "guarded" else list(command)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(marker, None))


def _listen_server(tap: Path) -> list[str]:
    """The 2026-07-28-capable fixture server behind a wiretap recording its traffic in tap."""
    return wiretap_command(tap, fixture_command("listen_server"))


@asynccontextmanager
async def _listening(
    client: Client, *, tools_list_changed: bool = False, resource_subscriptions: Sequence[str] = ()
) -> AsyncIterator[Subscription]:
    """An open subscriptions/listen stream; fails the test when the server does not acknowledge it."""
    async with AsyncExitStack() as stack:
        with anyio.fail_after(EVENT_WAIT):
            subscription = await stack.enter_async_context(
                client.listen(tools_list_changed=tools_list_changed, resource_subscriptions=resource_subscriptions)
            )
        yield subscription


async def _next_event(subscription: Subscription) -> ServerEvent:
    """The next event on a listen stream; fails the test when none comes."""
    with anyio.fail_after(EVENT_WAIT):
        return await anext(subscription)


async def _tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


def _stream_frames(tap: Path, subscription_id: types.RequestId) -> list[str]:
    """The methods of the notifications the upstream sent on one listen stream, in order."""
    return [
        message["method"]
        for message in tapped(tap, "client")
        if "method" in message and message.get("params", {}).get("_meta", {}).get(SUBSCRIPTION_ID) == subscription_id
    ]


def _answers(tap: Path, to: Literal["server", "client"], request: dict[str, Any]) -> list[dict[str, Any]]:
    """The responses to a request seen travelling to the server or to the client."""
    return [message for message in tapped(tap, to) if "method" not in message and message.get("id") == request["id"]]


def _answer_to(tap: Path, request: dict[str, Any]) -> dict[str, Any]:
    """What the upstream answered to a request it received."""
    answers = _answers(tap, "client", request)
    assert len(answers) == 1, answers
    return answers[0]


@both_modes
async def test_listen_stream_delivers_changes(mode: Mode, process_marker: str, tmp_path: Path) -> None:
    """A 2026-07-28 subscriptions/listen stream delivers the upstream's tool-list and resource changes."""
    tap = tmp_path / "listen-wire.jsonl"
    with anyio.fail_after(60):
        async with Client(_parameters(_listen_server(tap), mode, process_marker), mode="auto") as client:
            assert client.protocol_version == MODERN
            assert client.session.initialize_result is None, "a 2026-07-28 connection has no initialize handshake"
            async with _listening(client, tools_list_changed=True, resource_subscriptions=[NOTE_URI]) as subscription:
                assert subscription.honored == types.SubscriptionFilter(
                    tools_list_changed=True, resource_subscriptions=[NOTE_URI]
                )
                assert "fresh" not in await _tool_names(client)

                registered = await client.call_tool("register_tool", {"name": "fresh"})
                assert texts(registered) == ["registered fresh"]
                assert await _next_event(subscription) == ToolsListChanged()
                assert "fresh" in await _tool_names(client)
                assert texts(await client.call_tool("fresh", {})) == ["fresh is here"]

                written = await client.call_tool("write_note", {"text": "listen crossed"})
                assert texts(written) == ["written"]
                assert await _next_event(subscription) == ResourceUpdated(uri=NOTE_URI)
                read = await client.read_resource(NOTE_URI)
                assert [item.text for item in read.contents if isinstance(item, types.TextResourceContents)] == [
                    "listen crossed"
                ]
                subscription_id = subscription.subscription_id

    # The request reached the upstream with its id and filter untouched, and the frames came from it.
    listens = tapped(tap, "server", "subscriptions/listen")
    assert [(listen["id"], listen["params"]["notifications"]) for listen in listens] == [
        (subscription_id, {"toolsListChanged": True, "resourceSubscriptions": [NOTE_URI]})
    ]
    assert _stream_frames(tap, subscription_id) == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "notifications/resources/updated",
    ]
    assert tapped(tap, "server", "initialize") == []


@both_modes
async def test_modern_client_meets_handshake_era_upstream(
    mode: Mode, everything_server: list[str], process_marker: str, tmp_path: Path
) -> None:
    """A 2026-07-28-capable client falls back to the upstream's handshake era and answers its sampling and
    elicitation requests, as it does without the guard."""
    tap = tmp_path / "everything-wire.jsonl"
    user = ClientUser()
    inbox = Inbox()
    parameters = _parameters(wiretap_command(tap, everything_server), mode, process_marker)
    with anyio.fail_after(60):
        async with Client(
            parameters,
            mode="auto",
            sampling_callback=user.sample,
            elicitation_callback=user.elicit,
            message_handler=inbox,
        ) as client:
            negotiated = client.protocol_version
            # The upstream adds its sampling and elicitation tools once initialized, as the client's capabilities allow.
            await inbox.wait_for(types.ToolListChangedNotification)
            assert {"trigger-sampling-request", "trigger-elicitation-request"} <= await _tool_names(client)
            sampled = await client.call_tool("trigger-sampling-request", {"prompt": "Name a colour", "maxTokens": 5})
            elicited = await client.call_tool("trigger-elicitation-request", {})
        if mode == "guarded":
            direct = _parameters(everything_server, "direct", process_marker)
            async with Client(direct, mode="auto") as straight:
                assert negotiated == straight.protocol_version

    assert negotiated in HANDSHAKE_PROTOCOL_VERSIONS
    assert not sampled.is_error, texts(sampled)
    assert SAMPLED_TEXT in texts(sampled)[0]
    [sampling] = user.sampling_requests
    prompt = sampling.messages[0].content
    assert isinstance(prompt, types.TextContent)
    assert "Name a colour" in prompt.text
    assert not elicited.is_error, texts(elicited)
    assert f"Name: {ELICITED_NAME}" in "\n".join(texts(elicited))
    assert len(user.elicitation_requests) == 1

    # The upstream itself refused the probe and chose the era; its requests and their answers crossed.
    probes = tapped(tap, "server", "server/discover")
    assert len(probes) == 1, "the client's server/discover probe must reach the upstream"
    assert "error" in _answer_to(tap, probes[0])
    handshakes = tapped(tap, "server", "initialize")
    assert len(handshakes) == 1, handshakes
    assert _answer_to(tap, handshakes[0])["result"]["protocolVersion"] == negotiated
    for method in ("sampling/createMessage", "elicitation/create"):
        requests = tapped(tap, "client", method)
        assert len(requests) == 1, (method, requests)
        answers = _answers(tap, "server", requests[0])
        assert ["result" in answer for answer in answers] == [True], method


@both_modes
async def test_legacy_client_meets_modern_upstream(mode: Mode, process_marker: str, tmp_path: Path) -> None:
    """A 2025-11-25 client of a 2026-07-28-capable upstream gets the handshake and list-changed notifications."""
    tap = tmp_path / "listen-wire.jsonl"
    inbox = Inbox()
    with anyio.fail_after(60):
        async with Client(
            _parameters(_listen_server(tap), mode, process_marker), mode="legacy", message_handler=inbox
        ) as client:
            assert client.protocol_version == LEGACY
            assert client.session.initialize_result is not None
            assert "late" not in await _tool_names(client)
            registered = await client.call_tool("register_tool", {"name": "late"})
            assert texts(registered) == ["registered late"]
            with anyio.fail_after(EVENT_WAIT):
                await inbox.wait_for(types.ToolListChangedNotification)
            assert "late" in await _tool_names(client)
            assert texts(await client.call_tool("late", {})) == ["late is here"]

    handshakes = tapped(tap, "server", "initialize")
    assert [handshake["params"]["protocolVersion"] for handshake in handshakes] == [LEGACY]
    assert _answer_to(tap, handshakes[0])["result"]["protocolVersion"] == LEGACY
    assert tapped(tap, "server", "server/discover") == []
    assert len(tapped(tap, "client", "notifications/tools/list_changed")) == 1


async def test_loop_judged_while_listening(process_marker: str, tmp_path: Path) -> None:
    """At 2026-07-28 the guard warns at the 3rd identical call and refuses the 5th, and the listen stream
    opened before the loop still delivers events after the refusal."""
    tap = tmp_path / "listen-wire.jsonl"
    with anyio.fail_after(60):
        async with Client(_parameters(_listen_server(tap), "guarded", process_marker), mode="auto") as client:
            assert client.protocol_version == MODERN
            async with _listening(client, tools_list_changed=True) as subscription:
                results = [await client.call_tool("ask", {"question": "same"}) for _ in range(5)]

                actions = [None if (found := verdict(result)) is None else found["action"] for result in results]
                assert actions == [None, None, "warn", "warn", "block"]
                warned, refused = results[2], results[4]
                assert not warned.is_error
                assert texts(warned)[0] == "The answer is 42."
                assert guard_notes(warned) == [texts(warned)[-1]]
                assert texts(warned)[-1].startswith(MARKER)
                found = verdict(warned)
                assert found is not None
                assert (found["tool"], found["streak"]) == ("ask", 3)
                assert refused.is_error
                assert refused.result_type == "complete"
                assert refused.meta is not None
                assert warned.meta is not None
                assert refused.meta[SERVER_INFO] == warned.meta[SERVER_INFO], "named as the upstream names itself"
                assert len(texts(refused)) == 1
                assert texts(refused)[0].startswith(MARKER)

                registered = await client.call_tool("register_tool", {"name": "after_refusal"})
                assert texts(registered) == ["registered after_refusal"]
                assert await _next_event(subscription) == ToolsListChanged()
                assert "after_refusal" in await _tool_names(client)
                counted = await client.call_tool("asked", {})
                subscription_id = subscription.subscription_id

    assert texts(counted) == ["4"], "the refused 5th call must not reach the upstream"
    assert len([call for call in tapped(tap, "server", "tools/call") if call["params"]["name"] == "ask"]) == 4
    assert _stream_frames(tap, subscription_id) == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
    ]


async def test_listen_stream_outlives_the_call_timeout(process_marker: str, tmp_path: Path) -> None:
    """The call timeout cuts hung requests, not a listen stream, which is open for as long as the client keeps it."""
    tap = tmp_path / "listen-wire.jsonl"
    # The call timeout bounds the handshake too, and two Python processes (the tap, the server)
    # start behind the guard: three seconds leave room for a busy machine.
    argv = guard_command(_listen_server(tap), ["--call-timeout-seconds", "3"])
    parameters = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(process_marker, None))
    with anyio.fail_after(60):
        async with Client(parameters, mode="auto") as client, _listening(client, tools_list_changed=True) as stream:
            await anyio.sleep(3.5)  # idle for longer than the call timeout: the point of the test
            await client.call_tool("register_tool", {"name": "late"})
            assert await _next_event(stream) == ToolsListChanged()
    listens = [request["id"] for request in tapped(tap, "server", "subscriptions/listen")]
    cancelled = [note["params"]["requestId"] for note in tapped(tap, "server", "notifications/cancelled")]
    assert len(listens) == 1
    # Only the listen stream is the point: on a busy machine the first request, which waits for
    # the server to start, may itself outlast the call timeout (and the client retries it).
    assert listens[0] not in cancelled


async def test_listen_stream_through_a_guard_of_several_servers(process_marker: str, tmp_path: Path) -> None:
    """In front of several servers a 2026-07-28 listen stream carries each server's changes, under one subscription."""
    tap = tmp_path / "listen-wire.jsonl"
    config = write_config(
        tmp_path / "mcp.json",
        {
            "board": {"command": _listen_server(tap)[0], "args": _listen_server(tap)[1:]},
            "other": {"command": fixture_command("listen_server")[0], "args": fixture_command("listen_server")[1:]},
        },
    )
    argv = guard_command([], ["--config", str(config)])
    parameters = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(process_marker, None))
    with anyio.fail_after(60):
        async with Client(parameters, mode="auto") as client:
            assert client.protocol_version == MODERN
            async with _listening(client, tools_list_changed=True, resource_subscriptions=[NOTE_URI]) as subscription:
                assert subscription.honored.tools_list_changed is True
                registered = await client.call_tool("board__register_tool", {"name": "fresh"})
                assert texts(registered) == ["registered fresh"]
                assert await _next_event(subscription) == ToolsListChanged()
                assert "board__fresh" in await _tool_names(client)
                await client.call_tool("other__write_note", {"text": "from the other"})
                assert await _next_event(subscription) == ResourceUpdated(uri=NOTE_URI)
    # The server was asked to listen under an id of the guard's own, and its frames reached the client restamped.
    (listen,) = tapped(tap, "server", "subscriptions/listen")
    assert listen["params"]["notifications"] == {"toolsListChanged": True, "resourceSubscriptions": [NOTE_URI]}
    assert _stream_frames(tap, listen["id"])[:2] == [
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
    ]
