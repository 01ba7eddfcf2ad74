"""``--child-per-session``: an HTTP guard starts each stdio server anew for every session, as a stdio guard does.

Each session's child is opened with that client's own ``initialize`` (so the server is told
the client's name), asks that client for its roots, and ends with the session. Without it,
every session shares one child opened with the guard's handshake. The guard is served in the
test's own event loop (:mod:`tests.proxy.http_inproc`); its children are real processes
(``tests/fixtures/whoami_server.py``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import psutil
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from mcp_loop_guard.config import StdioServer
from tests.harness import FIXTURES_DIR, Callbacks, action, eventually, fixture_command, texts
from tests.http_harness import open_http_session, open_sse_session
from tests.proxy.http_inproc import fixture_stdio, serving_cli, serving_guard

pytestmark = pytest.mark.anyio

WHOAMI = (str(FIXTURES_DIR / "whoami_server.py"),)


def whoami_server(name: str) -> StdioServer:
    """The whoami fixture as a stdio server called ``name``."""
    return fixture_stdio(name, "whoami_server")


def roots_of(client: str) -> Callbacks:
    """A client called ``client`` whose one root is ``file:///<client>``."""

    async def roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=f"file:///{client}")])

    return Callbacks(list_roots=roots, name=client)


@asynccontextmanager
async def sessions(url: str, *names: str) -> AsyncIterator[dict[str, ClientSession]]:
    """One open session per client name, each offering its own roots."""
    async with AsyncExitStack() as stack:
        opened = {}
        for name in names:
            opened[name] = (await stack.enter_async_context(open_http_session(url, callbacks=roots_of(name)))).session
        yield opened


async def whoami(session: ClientSession, tool: str = "whoami") -> dict[str, Any]:
    """What the server behind the session says of itself and its client."""
    found: dict[str, Any] = json.loads(texts(await session.call_tool(tool, {}))[0])
    return found


async def test_each_session_gets_a_child_of_its_own_opened_with_its_clients_handshake() -> None:
    """Two sessions: two children, each told its own client's name and asking its own client for roots (both
    asked at once); a loop is refused per session; a session's end ends its child."""
    async with serving_guard([whoami_server("who")], child_per_session=True) as guard:
        async with sessions(guard.url, "alpha", "beta") as opened:
            with anyio.fail_after(30):
                seen = {name: await whoami(session) for name, session in opened.items()}
                roots: dict[str, list[str]] = {}

                async def ask(name: str) -> None:
                    roots[name] = json.loads(texts(await opened[name].call_tool("roots", {}))[0])

                async with anyio.create_task_group() as tg:
                    for name in opened:
                        tg.start_soon(ask, name)
                loop = [action(await opened["alpha"].call_tool("whoami", {})) for _ in range(4)]
                other = action(await opened["beta"].call_tool("whoami", {}))
        with anyio.fail_after(20):
            await eventually(lambda: not any(psutil.pid_exists(found["pid"]) for found in seen.values()))
    assert {name: found["client"] for name, found in seen.items()} == {"alpha": "alpha", "beta": "beta"}
    assert seen["alpha"]["pid"] != seen["beta"]["pid"]
    assert roots == {"alpha": ["file:///alpha"], "beta": ["file:///beta"]}
    assert loop == [None, "warn", "warn", "block"]  # the fifth identical call of alpha's (its first was above)
    assert other is None  # beta's second identical call: its own count


async def test_without_it_every_session_shares_one_child_opened_with_the_guards_handshake() -> None:
    """The default: one child for every session, told the guard's name, not any client's."""
    async with serving_guard([whoami_server("who")]) as guard, sessions(guard.url, "alpha", "beta") as opened:
        with anyio.fail_after(30):
            seen = {name: await whoami(session) for name, session in opened.items()}
    assert seen["alpha"] == seen["beta"]
    assert seen["alpha"]["client"] == "mcp-loop-guard"


async def test_each_session_in_front_of_several_servers_gets_children_of_its_own() -> None:
    """In front of several stdio servers, each session's router has a child of its own of each server."""
    servers = [whoami_server("a"), whoami_server("b")]
    async with serving_guard(servers, child_per_session=True) as guard, sessions(guard.url, "alpha", "beta") as opened:
        with anyio.fail_after(30):
            seen = {
                (name, server): await whoami(session, f"{server}__whoami")
                for name, session in opened.items()
                for server in "ab"
            }
    assert {key: found["client"] for key, found in seen.items()} == {key: key[0] for key in seen}
    assert len({found["pid"] for found in seen.values()}) == 4


async def test_the_flag_gives_a_command_line_server_a_child_per_session() -> None:
    """``--child-per-session -- COMMAND``, read by the CLI's own parser: the session's child is told its client."""
    command = ["--child-per-session", "--", *fixture_command("whoami_server")]
    async with serving_cli(command) as guard, sessions(guard.url, "alpha") as opened:
        with anyio.fail_after(30):
            seen = await whoami(opened["alpha"])
    assert seen["client"] == "alpha"


async def test_each_legacy_sse_connection_gets_a_child_of_its_own() -> None:
    """In front of legacy SSE clients too, each connection (its session) has its own child, told its client."""
    seen = {}
    guarded = serving_guard([whoami_server("who")], transport="sse", child_per_session=True)
    async with guarded as guard, AsyncExitStack() as stack:
        for name in ("alpha", "beta"):
            opened = await stack.enter_async_context(open_sse_session(guard.url, callbacks=roots_of(name)))
            with anyio.fail_after(30):
                seen[name] = await whoami(opened.session)
    assert {name: found["client"] for name, found in seen.items()} == {"alpha": "alpha", "beta": "beta"}
    assert seen["alpha"]["pid"] != seen["beta"]["pid"]


async def test_a_child_that_cannot_start_fails_its_session_not_the_guard() -> None:
    """A command that does not start: each session's handshake gets an error naming the server, and the guard
    serves on."""
    missing = StdioServer("who", "/nonexistent/mcp-server")
    refused = []
    async with serving_guard([missing], child_per_session=True) as guard:
        for name in ("alpha", "beta"):
            try:
                with anyio.fail_after(30):
                    async with sessions(guard.url, name):
                        pass
            except* MCPError as caught:
                refused.extend(str(error) for error in _leaves(caught))
        await guard.stays_up(0.5)
    assert refused == ["cannot start upstream `who`: No such file or directory"] * 2


def _leaves(group: BaseExceptionGroup[MCPError]) -> list[BaseException]:
    """The exceptions in a group, however nested."""
    found: list[BaseException] = []
    for error in group.exceptions:
        found.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return found
