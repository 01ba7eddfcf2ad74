"""The message relay in-process: what crosses it unchanged, and how it judges loops.

Parity tests run twice, directly and through the guard, with the same assertions: anything
the guard changed that it should not would fail the guarded run only.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.harness import MARKER, VERDICT_KEY, texts, verdict
from tests.proxy.conftest import Opener
from tests.proxy.inproc import GuardedTransport
from tests.proxy.servers import Tracker

pytestmark = pytest.mark.anyio


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


# --- parity: the same through the guard as directly -------------------------------------------


async def test_identity_and_tools(open_client: Opener) -> None:
    """The server's name, instructions, capabilities and tools reach the client as the server gave them."""
    tracker = Tracker()
    async with open_client(tracker.server) as client:
        assert client.server_info is not None
        assert client.server_info.name == "tracker"
        assert client.instructions == "Counts calls."
        assert client.server_capabilities.tools is not None
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"echo", "tick", "broken", "delete", "work"}
    assert tools["delete"].annotations is not None
    assert tools["delete"].annotations.destructive_hint is True
    assert tools["echo"].input_schema["required"] == ["text"]


async def test_results_cross_unchanged(open_client: Opener) -> None:
    """A first and second identical call get the server's own result, with no note and no verdict."""
    tracker = Tracker()
    async with open_client(tracker.server) as client:
        for _ in range(2):
            result = await client.call_tool("echo", {"text": 'ünïcode ✓ \n\t"quoted"'})
            assert texts(result) == ['ünïcode ✓ \n\t"quoted"']
            assert verdict(result) is None
    assert tracker.calls["echo"] == 2


async def test_tool_errors_cross(open_client: Opener) -> None:
    """A tool's failure reaches the client as the server's isError result."""
    tracker = Tracker()
    async with open_client(tracker.server) as client:
        result = await client.call_tool("broken", {"path": "/a"})
    assert result.is_error
    assert "disk full" in texts(result)[0]


async def test_unknown_tool_and_method(open_client: Opener) -> None:
    """Errors the server answers (an unknown tool, a method it does not serve) cross as it sent them."""
    tracker = Tracker()
    async with open_client(tracker.server) as client:
        unknown = await client.call_tool("nope", {})
        assert unknown.is_error
        with pytest.raises(MCPError) as raised:
            await client.session.send_request(
                types.Request[types.RequestParams | None, str](method="x-vendor/unknown", params=None),
                types.EmptyResult,
            )
    assert raised.value.error.code == types.METHOD_NOT_FOUND


async def test_progress_reaches_the_caller(open_client: Opener) -> None:
    """Progress notifications on the caller's own token reach its callback, in order."""
    tracker = Tracker()
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with open_client(tracker.server) as client:
        result = await client.call_tool("work", {}, progress_callback=on_progress)
    assert texts(result) == ["worked"]
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


async def test_polling_and_new_arguments_are_not_loops(open_client: Opener) -> None:
    """A status that changes, and calls with new arguments, are never warned however many there are."""
    tracker = Tracker()
    async with open_client(tracker.server) as client:
        for n in range(8):
            assert texts(await client.call_tool("tick", {})) == [f"tick {n + 1}"]
            assert verdict(await client.call_tool("echo", {"text": str(n)})) is None
    assert tracker.calls == {"tick": 8, "echo": 8}


async def test_concurrent_calls_each_get_their_own_answer(open_client: Opener) -> None:
    """Twenty calls in flight at once are each answered with their own result."""
    tracker = Tracker()
    answers: dict[int, list[str]] = {}
    async with open_client(tracker.server) as client:

        async def call(n: int) -> None:
            answers[n] = texts(await client.call_tool("echo", {"text": f"n{n}"}))

        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(call, n)
    assert answers == {n: [f"n{n}"] for n in range(20)}


# --- the guard's verdicts ---------------------------------------------------------------------


async def test_identical_calls_warned_refused_and_aborted() -> None:
    """3rd identical call warned, 5th refused unseen by the server, the 3rd refusal ends the session."""
    tracker = Tracker()
    transport = GuardedTransport(tracker.server)
    async with Client(transport) as client:
        plain = [await client.call_tool("echo", {"text": "same"}) for _ in range(2)]
        assert all(verdict(result) is None for result in plain)
        warned = await client.call_tool("echo", {"text": "same"})
        assert texts(warned)[0] == "same"
        assert texts(warned)[-1].startswith(MARKER)
        assert (warned.meta or {})[VERDICT_KEY]["action"] == "warn"
        await client.call_tool("echo", {"text": "same"})
        for refusal in range(2):
            refused = await client.call_tool("echo", {"text": "same"})
            assert refused.is_error
            assert texts(refused)[0].startswith(MARKER)
            assert (refused.meta or {})[VERDICT_KEY]["action"] == "block", refusal
        assert tracker.calls["echo"] == 4
        session = transport.session
        assert session is not None
        assert not session.aborted.is_set()
        last = await client.call_tool("echo", {"text": "same"})
        assert last.is_error
        assert (last.meta or {})[VERDICT_KEY]["action"] == "abort"
        assert session.aborted.is_set()
    assert tracker.calls["echo"] == 4


async def test_side_effects_refused_at_the_third_identical_call() -> None:
    """A destructive, non-idempotent tool is warned at the 2nd identical call and refused at the 3rd."""
    tracker = Tracker()
    async with Client(GuardedTransport(tracker.server)) as client:
        await client.list_tools()
        first = await client.call_tool("delete", {"path": "notes/x.txt"})
        second = await client.call_tool("delete", {"path": "notes/x.txt"})
        third = await client.call_tool("delete", {"path": "notes/x.txt"})
    assert verdict(first) is None
    assert (second.meta or {})[VERDICT_KEY]["action"] == "warn"
    assert third.is_error
    assert (third.meta or {})[VERDICT_KEY]["action"] == "block"
    assert tracker.calls["delete"] == 2


async def test_same_error_whatever_the_arguments_is_warned() -> None:
    """One tool failing the same way for different arguments is warned at the 3rd failure."""
    tracker = Tracker()
    async with Client(GuardedTransport(tracker.server)) as client:
        results = [await client.call_tool("broken", {"path": f"/{n}"}) for n in range(3)]
    assert [verdict(result) is not None for result in results] == [False, False, True]
    assert (results[2].meta or {})[VERDICT_KEY]["family"] == "same_error"


async def test_settings_reach_the_detector() -> None:
    """The thresholds in force are the plan's: warned at 2, refused at 3."""
    tracker = Tracker()
    async with Client(GuardedTransport(tracker.server, warn_threshold=2, block_threshold=3)) as client:
        actions = []
        for _ in range(3):
            result = await client.call_tool("echo", {"text": "x"})
            actions.append((verdict(result) or {}).get("action"))
    assert actions == [None, "warn", "block"]
