"""Every topology, direct against guarded: what a client sees is the same, and a loop is refused.

Each row of the path table (ARCHITECTURE.md) of the HTTP guard is served in the test's own event loop
(:mod:`tests.proxy.http_inproc`): the guard, and the upstreams over streamable HTTP and legacy SSE;
a stdio upstream is the guard's child. Every upstream is the same server
(``tests/fixtures/parity_server.py``), so a client's facts through any row must be the
direct ones (under ``server__name`` in front of several), and the same five identical calls
must be warned at the third and refused at the fifth, for clients of both protocol eras; and
a 2026-07-28 client listening on ``subscriptions/listen`` must hear that a server's tools
changed, whichever row serves it. The stdio guard's rows run it as the process it is, in front
of the same servers.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ToolsListChanged

from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer
from tests.harness import FIXTURES_DIR, action, guard_argv, server_environment, texts
from tests.http_harness import http_streams, open_http_session, open_sse_session, write_config
from tests.proxy.http_inproc import fixture_stdio, serving_app, serving_guard

pytestmark = pytest.mark.anyio

sys.path.insert(0, str(FIXTURES_DIR))
from parity_server import build  # noqa: E402 - a fixture module, beside the fixture servers

LIMIT = 60
"""Seconds one row may take on a loaded machine."""

ROWS: dict[str, tuple[str, bool, str]] = {
    "5": ("http", False, "http"),
    "5s": ("http", True, "http"),
    "6": ("http", False, "stdio"),
    "6s": ("http", True, "stdio"),
    "7": ("http", False, "sse"),
    "7s": ("http", True, "sse"),
    "7 (SSE front)": ("sse", False, "http"),
    "8": ("http", False, "stdio+http"),
    "8 (HTTP servers)": ("http", False, "http+http"),
    "8 (SSE front)": ("sse", False, "stdio+sse"),
    "8s": ("http", True, "stdio+http"),
    "7 (child per session)": ("http", False, "stdio"),
    "8 (child per session)": ("http", False, "stdio+http"),
}
"""Row -> (the guard's transport, ``--stateless``, its upstreams, each called a, b, ...)."""
CHILD_PER_SESSION = {"7 (child per session)", "8 (child per session)"}
"""Rows served with ``--child-per-session``: a stdio server started for each session."""
CASES = [
    (row, era)
    for row, (transport, _, _) in ROWS.items()
    for era in (("handshake", "2026-07-28") if transport == "http" else ("sse",))
]


class McpClient(Protocol):
    """What both the SDK's session and its high-level client offer."""

    async def list_tools(self) -> types.ListToolsResult: ...
    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult: ...
    async def list_resources(self) -> types.ListResourcesResult: ...
    async def read_resource(self, uri: str) -> types.ReadResourceResult: ...
    async def list_prompts(self) -> types.ListPromptsResult: ...
    async def get_prompt(self, name: str, arguments: dict[str, str]) -> types.GetPromptResult: ...


@asynccontextmanager
async def upstreams(kinds: str) -> AsyncIterator[list[ServerSpec]]:
    """The parity server once per kind (``stdio``, ``http``, ``sse``), named a, b, ...; HTTP and SSE in process."""
    async with AsyncExitStack() as stack:
        specs: list[ServerSpec] = []
        for name, kind in zip("ab", kinds.split("+"), strict=False):
            if kind == "stdio":
                specs.append(fixture_stdio(name, "parity_server", name))
                continue
            server = build(name)
            app = server.streamable_http_app() if kind == "http" else server.sse_app()
            origin = await stack.enter_async_context(serving_app(app))
            path = "/mcp" if kind == "http" else "/sse"
            specs.append(HttpServer(name, origin + path, transport=kind))
        yield specs


@asynccontextmanager
async def client(url: str, era: str) -> AsyncIterator[McpClient]:
    """A client of ``url`` speaking ``era`` (``handshake``, ``2026-07-28``, or over legacy ``sse``)."""
    if era == "sse":
        async with open_sse_session(url) as opened:
            yield opened.session
    elif era == "handshake":
        async with open_http_session(url) as opened:
            yield opened.session
    else:
        async with Client(http_streams(url), mode="auto") as modern:
            assert modern.protocol_version == era
            yield modern


async def facts(session: McpClient, prefix: str = "") -> dict[str, Any]:
    """What a client sees of the parity server(s): names, a call, a resource, a prompt, and a loop's verdicts."""
    tools = sorted(tool.name for tool in (await session.list_tools()).tools)
    echoed = texts(await session.call_tool(f"{prefix}echo", {"text": "hi"}))
    resources = sorted(str(resource.uri) for resource in (await session.list_resources()).resources)
    read = [
        content.text
        for content in (await session.read_resource(resources[0])).contents
        if isinstance(content, types.TextResourceContents)
    ]
    prompts = sorted(prompt.name for prompt in (await session.list_prompts()).prompts)
    prompt = await session.get_prompt(f"{prefix}greet", {"who": "you"})
    greeting = [message.content.text for message in prompt.messages if isinstance(message.content, types.TextContent)]
    constant = f"{prefix}constant"
    loop = [action(await session.call_tool(constant, {})) for _ in range(5)]
    return {
        "tools": tools,
        "echo": echoed,
        "resources": resources,
        "read": read,
        "prompts": prompts,
        "greeting": greeting,
        "loop": loop,
    }


def expected(direct: dict[str, Any], servers: int) -> dict[str, Any]:
    """The direct facts as a guard in front of ``servers`` parity servers shows them, its loop refused."""
    if servers == 1:
        return {**direct, "loop": [None, None, "warn", "warn", "block"]}
    names = "ab"[:servers]
    return {
        **direct,
        "tools": sorted(f"{name}__{tool}" for name in names for tool in direct["tools"]),
        "resources": sorted(f"note://{name}/board" for name in names),
        "prompts": sorted(f"{name}__{prompt}" for name in names for prompt in direct["prompts"]),
        "loop": [None, None, "warn", "warn", "block"],
    }


async def _within(step: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    with anyio.fail_after(LIMIT):
        return await step()


@pytest.mark.parametrize(("row", "era"), CASES)
async def test_every_row_shows_the_direct_facts_and_refuses_the_loop(row: str, era: str) -> None:
    """Through each row, a client of each era sees what it sees directly, and five identical calls end refused."""
    transport, stateless, kinds = ROWS[row]
    servers = len(kinds.split("+"))
    async with upstreams("sse" if era == "sse" else "http") as (alone,):
        assert isinstance(alone, HttpServer)

        async def seen_directly() -> dict[str, Any]:
            async with client(alone.url, era) as session:
                return await facts(session)

        direct = await _within(seen_directly)
    per_session = row in CHILD_PER_SESSION
    async with (
        upstreams(kinds) as specs,
        serving_guard(specs, transport=transport, stateless=stateless, child_per_session=per_session) as guard,
    ):

        async def seen_through_the_guard() -> dict[str, Any]:
            async with client(guard.url, era) as session:
                return await facts(session, "a__" if servers > 1 else "")

        guarded = await _within(seen_through_the_guard)
    assert direct["loop"] == [None] * 5
    assert guarded == expected(direct, servers)


@pytest.mark.parametrize("row", [row for row, (transport, _, _) in ROWS.items() if transport == "http"])
async def test_every_row_tells_a_listening_2026_client_that_a_servers_tools_changed(row: str) -> None:
    """A 2026-07-28 client's subscriptions/listen stream hears a server's new tool through every row."""
    transport, stateless, kinds = ROWS[row]
    prefix = "a__" if "+" in kinds else ""
    async with (
        upstreams(kinds) as specs,
        serving_guard(
            specs, transport=transport, stateless=stateless, child_per_session=row in CHILD_PER_SESSION
        ) as guard,
        Client(http_streams(guard.url), mode="auto") as modern,
    ):
        assert modern.protocol_version == "2026-07-28"
        with anyio.fail_after(LIMIT):
            async with modern.listen(tools_list_changed=True) as subscription:
                await modern.call_tool(f"{prefix}register_tool", {"name": "fresh"})
                event = await anext(subscription)
            names = {tool.name for tool in (await modern.list_tools()).tools}
    assert event == ToolsListChanged()
    assert f"{prefix}fresh" in names


STDIO_ROWS: dict[str, str] = {"1": "stdio", "2": "http", "3": "sse", "4": "stdio+http"}
"""The stdio guard's rows (a separate process, the client on its stdin and stdout) -> its upstreams."""


def _entry(spec: ServerSpec) -> dict[str, Any]:
    if isinstance(spec, StdioServer):
        return {"command": spec.command, "args": list(spec.args)}
    assert isinstance(spec, HttpServer)
    return {"type": spec.transport, "url": spec.url}


@asynccontextmanager
async def stdio_guard(specs: list[ServerSpec], era: str, directory: Path, marker: str) -> AsyncIterator[McpClient]:
    """The stdio guard in front of ``specs`` (a config file of them), its client speaking ``era``."""
    config = write_config(directory / "mcp.json", {spec.name: _entry(spec) for spec in specs})
    argv = [*guard_argv(), "--config", str(config)]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_environment(marker, None))
    async with Client(params, mode="legacy" if era == "handshake" else "auto") as guarded:
        if era != "handshake":
            assert guarded.protocol_version == era
        yield guarded


@pytest.mark.e2e
@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])
@pytest.mark.parametrize("row", list(STDIO_ROWS))
async def test_every_row_of_the_stdio_guard_shows_the_direct_facts_and_refuses_the_loop(
    row: str, era: str, tmp_path: Path, process_marker: str
) -> None:
    """Through the stdio guard, in front of one server of each kind or several, a client sees the direct facts."""
    kinds = STDIO_ROWS[row]
    servers = len(kinds.split("+"))
    async with upstreams("http") as (alone,):
        assert isinstance(alone, HttpServer)

        async def seen_directly() -> dict[str, Any]:
            async with client(alone.url, "handshake") as session:
                return await facts(session)

        direct = await _within(seen_directly)
    async with upstreams(kinds) as specs:

        async def seen_through_the_guard() -> dict[str, Any]:
            async with stdio_guard(specs, era, tmp_path, process_marker) as session:
                return await facts(session, "a__" if servers > 1 else "")

        guarded = await _within(seen_through_the_guard)
    assert guarded == expected(direct, servers)
