"""Through the guard, a client sees exactly what the upstream server says directly."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.shared.exceptions import MCPError

from tests.harness import (
    ClientUser,
    Connector,
    CountingUpstream,
    Mode,
    guard_command,
    server_environment,
    verdict,
    wire,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

SERVERS = ["time_server", "git_server", "everything_server", "counting"]


def _server(request: pytest.FixtureRequest, name: str) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment of a server fixture."""
    server = request.getfixturevalue(name)
    if isinstance(server, CountingUpstream):
        return server.command, server.env
    return list(server), {}


def _capabilities(result: types.InitializeResult) -> dict[str, Any]:
    return wire(result.capabilities)


@pytest.mark.parametrize("server", SERVERS)
async def test_initialize_matches_upstream(request: pytest.FixtureRequest, connect: Connector, server: str) -> None:
    """The guard answers initialize with the upstream's server info, instructions and capabilities."""
    command, env = _server(request, server)
    user = ClientUser()
    async with connect(command, mode="direct", env=env, callbacks=user.callbacks()) as direct:
        expected = direct.initialize
    async with connect(command, env=env, callbacks=user.callbacks()) as guarded:
        actual = guarded.initialize
    assert wire(actual.server_info) == wire(expected.server_info)
    assert actual.instructions == expected.instructions
    assert actual.protocol_version == expected.protocol_version
    assert _capabilities(actual) == _capabilities(expected)


@pytest.mark.parametrize("server", SERVERS)
async def test_tools_list_matches_upstream(request: pytest.FixtureRequest, connect: Connector, server: str) -> None:
    """tools/list through the guard equals tools/list direct, field for field."""
    command, env = _server(request, server)
    user = ClientUser()
    async with connect(command, mode="direct", env=env, callbacks=user.callbacks()) as direct:
        with anyio.fail_after(10):
            expected = await direct.session.list_tools()
    async with connect(command, env=env, callbacks=user.callbacks()) as guarded:
        with anyio.fail_after(10):
            actual = await guarded.session.list_tools()
    assert [tool.name for tool in actual.tools] == [tool.name for tool in expected.tools]
    assert [wire(tool) for tool in actual.tools] == [wire(tool) for tool in expected.tools]
    assert actual.next_cursor == expected.next_cursor


async def test_tools_list_pages_match_upstream(connect: Connector, counting: CountingUpstream) -> None:
    """A paginated tools/list keeps the upstream's pages and cursors through the guard."""
    env = {**counting.env, "COUNTING_SERVER_PAGE_SIZE": "2"}

    async def pages(mode: Mode) -> list[dict[str, Any]]:
        collected: list[dict[str, Any]] = []
        async with connect(counting.command, mode=mode, env=env) as conn:
            cursor: str | None = None
            with anyio.fail_after(10):
                while True:
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await conn.session.list_tools(params=params)
                    collected.append({"tools": [wire(t) for t in page.tools], "next": page.next_cursor})
                    if (cursor := page.next_cursor) is None:
                        return collected

    expected = await pages("direct")
    assert len(expected) > 1, "the fixture should have paginated"
    assert await pages("guarded") == expected


async def test_everything_results_relayed_unchanged(connect: Connector, everything_server: list[str]) -> None:
    """Text, image, annotated and structured results of server-everything arrive unchanged through the guard."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("echo", {"message": "hello through the guard"}),
        ("get-sum", {"a": 2, "b": 40}),
        ("get-tiny-image", {}),
        ("get-structured-content", {"location": "Chicago"}),
        ("get-annotated-message", {"messageType": "error", "includeImage": True}),
    ]

    async def results(mode: Mode) -> list[dict[str, Any]]:
        async with connect(everything_server, mode=mode) as conn:
            with anyio.fail_after(20):
                return [wire(await conn.session.call_tool(name, arguments)) for name, arguments in calls]

    expected = await results("direct")
    assert await results("guarded") == expected


async def test_counting_results_relayed_unchanged(connect: Connector, counting: CountingUpstream) -> None:
    """Mixed text and image content and structuredContent arrive unchanged through the guard."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("image", {"caption": "a seeded picture", "seed": 7}),
        ("echo", {"text": "ünïcode ✓"}),
        ("ticker", {}),
    ]

    async def results(mode: Mode) -> list[dict[str, Any]]:
        async with connect(counting.command, mode=mode, env=counting.env) as conn:
            with anyio.fail_after(10):
                return [wire(await conn.session.call_tool(name, arguments)) for name, arguments in calls]

    expected = await results("direct")
    assert await results("guarded") == expected


async def test_tool_error_result_relayed(connect: Connector, time_server: list[str]) -> None:
    """A tool's own isError result (an unknown timezone) reaches the client as the upstream sent it."""
    arguments = {"timezone": "Not/AZone"}
    async with connect(time_server, mode="direct") as direct:
        with anyio.fail_after(10):
            expected = await direct.session.call_tool("get_current_time", arguments)
    async with connect(time_server) as guarded:
        with anyio.fail_after(10):
            actual = await guarded.session.call_tool("get_current_time", arguments)
    assert expected.is_error
    assert wire(actual) == wire(expected)


async def test_protocol_error_relayed(connect: Connector, counting: CountingUpstream) -> None:
    """An upstream JSON-RPC error reaches the client with its code and message."""

    async def error(mode: Mode) -> tuple[int, str]:
        async with connect(counting.command, mode=mode, env=counting.env) as conn:
            with anyio.fail_after(10), pytest.raises(MCPError) as raised:
                await conn.session.call_tool("no-such-tool", {})
        return raised.value.error.code, raised.value.error.message

    expected = await error("direct")
    assert expected[0] == types.INVALID_PARAMS
    assert await error("guarded") == expected


async def test_modern_client_through_guard(process_marker: str, time_server: list[str]) -> None:
    """A client speaking the 2026-07-28 protocol (no initialize handshake) lists and calls tools through the guard."""
    argv = guard_command(time_server)
    parameters = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(process_marker, None))
    arguments = {"source_timezone": "Europe/Paris", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    with anyio.fail_after(30):
        async with Client(parameters, mode="auto") as client:
            assert client.protocol_version == "2026-07-28"
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} == {"get_current_time", "convert_time"}
            results = [await client.call_tool("convert_time", arguments) for _ in range(3)]
    assert [verdict(result) is None for result in results] == [True, True, False]
    assert results[0].structured_content is not None
    assert results[0].structured_content["target"]["timezone"] == "Asia/Tokyo"
