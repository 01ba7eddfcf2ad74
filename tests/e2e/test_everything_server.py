"""Every MCP feature of @modelcontextprotocol/server-everything (npm) works through the guard as it does directly."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest
from mcp import types

from tests.harness import (
    ELICITED_NAME,
    ROOT_URI,
    SAMPLED_TEXT,
    ClientUser,
    Connector,
    Inbox,
    Mode,
    eventually,
    tapped,
    texts,
    verdict,
    wiretap_command,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio, pytest.mark.parametrize("mode", ["direct", "guarded"])]

LONG_RUNNING = "trigger-long-running-operation"
# The simulated log lines read "Info-level message", "Alert level-message", ...
SIMULATED_LOG = re.compile(r"level.message", re.IGNORECASE)

# resources/subscribe and logging/setLevel are deprecated by the 2026-07-28 revision, but they
# are what a 2025-11-25 client sends, and the guard must relay them.
legacy_era_api = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


async def test_progress_before_result(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """A long-running operation's progress notifications all arrive before its result."""
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with connect(everything_server, mode=mode) as conn:
        with anyio.fail_after(10):
            result = await conn.session.call_tool(
                LONG_RUNNING, {"duration": 0.4, "steps": 4}, progress_callback=on_progress
            )
            at_result = list(seen)
    assert "Long running operation completed" in texts(result)[0]
    assert at_result == [(1, 4), (2, 4), (3, 4), (4, 4)]


async def test_cancellation_reaches_upstream(
    connect: Connector, everything_server: list[str], mode: Mode, tmp_path: Path
) -> None:
    """A call the client cancels is cancelled upstream: the server receives notifications/cancelled for it."""
    tap = tmp_path / "everything-wire.jsonl"
    progressed = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    def upstream_cancelled() -> bool:
        calls = [call for call in tapped(tap, "server", "tools/call") if call["params"]["name"] == LONG_RUNNING]
        cancels = tapped(tap, "server", "notifications/cancelled")
        return len(calls) == 1 and any(cancel["params"]["requestId"] == calls[0]["id"] for cancel in cancels)

    async with connect(wiretap_command(tap, everything_server), mode=mode) as conn:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:

                async def call_long() -> None:
                    arguments = {"duration": 30, "steps": 300}
                    await conn.session.call_tool(LONG_RUNNING, arguments, progress_callback=on_progress)

                tg.start_soon(call_long)
                await progressed.wait()
                tg.cancel_scope.cancel()
        with anyio.fail_after(5):
            await eventually(upstream_cancelled)
            echoed = await conn.session.call_tool("echo", {"message": "after the cancel"})
    assert texts(echoed) == ["Echo: after the cancel"]


async def test_sampling_answered_by_client(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """A sampling request from the upstream is answered by the client's sampling callback."""
    user = ClientUser()
    async with connect(everything_server, mode=mode, callbacks=user.callbacks()) as conn:
        with anyio.fail_after(10):
            result = await conn.session.call_tool(
                "trigger-sampling-request", {"prompt": "Name a colour", "maxTokens": 5}
            )
    assert not result.is_error, texts(result)
    assert SAMPLED_TEXT in texts(result)[0]
    assert len(user.sampling_requests) == 1
    content = user.sampling_requests[0].messages[0].content
    assert isinstance(content, types.TextContent)
    assert "Name a colour" in content.text


async def test_elicitation_answered_by_client(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """An elicitation request from the upstream is answered by the client's elicitation callback."""
    user = ClientUser()
    async with connect(everything_server, mode=mode, callbacks=user.callbacks()) as conn:
        with anyio.fail_after(10):
            result = await conn.session.call_tool("trigger-elicitation-request", {})
    assert not result.is_error, texts(result)
    assert f"Name: {ELICITED_NAME}" in "\n".join(texts(result))
    assert len(user.elicitation_requests) == 1
    assert isinstance(user.elicitation_requests[0], types.ElicitRequestFormParams)
    assert "name" in user.elicitation_requests[0].requested_schema["properties"]


async def test_roots_answered_by_client(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """roots/list from the upstream is answered by the client's roots callback."""
    user = ClientUser()
    async with connect(everything_server, mode=mode, callbacks=user.callbacks()) as conn:
        with anyio.fail_after(10):
            result = await conn.session.call_tool("get-roots-list", {})
    assert ROOT_URI in texts(result)[0]
    assert user.roots_requests >= 1


async def test_tools_list_changed_reaches_client(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """The tools/list_changed the upstream sends after initialized reaches the client, and the new tools are listed."""
    inbox = Inbox()
    user = ClientUser()
    async with connect(everything_server, mode=mode, callbacks=user.callbacks(inbox)) as conn:
        with anyio.fail_after(10):
            await inbox.wait_for(types.ToolListChangedNotification)
            tools = await conn.session.list_tools()
    names = {tool.name for tool in tools.tools}
    assert {"trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"} <= names


async def test_resources_listed_and_read(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """Resources and resource templates are listed, and both a static and a templated resource are read."""
    async with connect(everything_server, mode=mode) as conn:
        with anyio.fail_after(10):
            resources = await conn.session.list_resources()
            templates = await conn.session.list_resource_templates()
            static = next(r for r in resources.resources if r.uri.startswith("demo://resource/static/document/"))
            read_static = await conn.session.read_resource(static.uri)
            read_dynamic = await conn.session.read_resource("demo://resource/dynamic/text/7")
    assert "demo://resource/dynamic/text/{resourceId}" in {t.uri_template for t in templates.resource_templates}
    first = read_static.contents[0]
    assert isinstance(first, types.TextResourceContents)
    assert first.uri == static.uri
    assert first.text
    dynamic = read_dynamic.contents[0]
    assert isinstance(dynamic, types.TextResourceContents)
    assert dynamic.text.startswith("Resource 7:")


@legacy_era_api
async def test_resource_updates_reach_subscriber(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """A client subscribed to a resource receives the upstream's notifications/resources/updated for it."""
    inbox = Inbox()
    user = ClientUser()
    uri = "demo://resource/dynamic/text/1"
    async with connect(everything_server, mode=mode, callbacks=user.callbacks(inbox)) as conn:
        with anyio.fail_after(10):
            await conn.session.subscribe_resource(uri)
            await conn.session.call_tool("toggle-subscriber-updates", {})
            updated = await inbox.wait_for(types.ResourceUpdatedNotification)
            await conn.session.call_tool("toggle-subscriber-updates", {})
            await conn.session.unsubscribe_resource(uri)
    assert updated.params.uri == uri


async def test_prompts_listed_and_read(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """Prompts are listed and read with arguments, and prompt arguments complete."""
    async with connect(everything_server, mode=mode) as conn:
        with anyio.fail_after(10):
            prompts = await conn.session.list_prompts()
            simple = await conn.session.get_prompt("simple-prompt")
            with_args = await conn.session.get_prompt("args-prompt", {"city": "Lyon", "state": "Rhône"})
            completion = await conn.session.complete(
                types.PromptReference(type="ref/prompt", name="completable-prompt"),
                {"name": "department", "value": "Eng"},
            )
    assert {"simple-prompt", "args-prompt", "completable-prompt"} <= {prompt.name for prompt in prompts.prompts}
    assert isinstance(simple.messages[0].content, types.TextContent)
    assert simple.messages[0].content.text == "This is a simple prompt without arguments."
    assert isinstance(with_args.messages[0].content, types.TextContent)
    assert with_args.messages[0].content.text == "What's weather in Lyon, Rhône?"
    assert completion.completion.values == ["Engineering"]


@legacy_era_api
async def test_logging_messages_reach_client(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """After logging/setLevel, the upstream's log messages reach the client."""
    inbox = Inbox()
    user = ClientUser()
    async with connect(everything_server, mode=mode, callbacks=user.callbacks(inbox)) as conn:
        with anyio.fail_after(10):
            await conn.session.set_logging_level("debug")
            await conn.session.call_tool("toggle-simulated-logging", {})
            logged = await inbox.wait_for(
                types.LoggingMessageNotification,
                lambda message: SIMULATED_LOG.search(str(message.params.data)) is not None,
            )
            await conn.session.call_tool("toggle-simulated-logging", {})
            await conn.session.send_ping()
    assert logged.params.level in {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}


async def test_repeated_echo_guarded(connect: Connector, everything_server: list[str], mode: Mode) -> None:
    """Five identical echo calls: the guard warns at the 3rd and 4th and refuses the 5th; directly all pass."""
    async with connect(everything_server, mode=mode) as conn:
        with anyio.fail_after(10):
            results = [await conn.session.call_tool("echo", {"message": "again"}) for _ in range(5)]
    actions = [None if (found := verdict(result)) is None else found["action"] for result in results]
    if mode == "direct":
        assert actions == [None] * 5
    else:
        assert actions == [None, None, "warn", "warn", "block"]
    assert all(texts(result)[0] == "Echo: again" for result in results[:4])
