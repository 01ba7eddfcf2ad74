"""Chains of proxies over real processes: guard behind guard, and guard in front of and behind mcp-proxy (PyPI).

A chain is written from the client's side: ``guard>mcp-proxy/sse`` is a client talking to
the guard over stdio, whose upstream is mcp-proxy's SSE endpoint, whose stdio upstream is
server-everything. ``mcp-proxy/mcp>guard`` is a client talking to mcp-proxy over
streamable HTTP, in front of the guard over stdio, in front of server-everything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import Callbacks, Connector, guard_command, guard_notes, texts, verdict, wire
from tests.interop.processes import Processes, Served

pytestmark = [pytest.mark.e2e, pytest.mark.anyio, pytest.mark.timeout(300)]

LONG_RUNNING = "trigger-long-running-operation"
ECHO = {"message": "hi"}
CALL_LIMIT = 15.0
"""Seconds one tool call may take through a chain."""
EXIT_LIMIT = 15.0
"""Seconds the client-facing guard may take to exit once its stdin is closed."""

CHAINS = ["guard>guard", "mcp-proxy/sse>guard", "mcp-proxy/mcp>guard", "guard>mcp-proxy/sse", "guard>mcp-proxy/mcp"]
NESTED = ["guard>guard", "guard>mcp-proxy/sse>guard"]
"""Chains with two guards, the outer one nearest the client."""


# mcp-proxy 0.13.0 serves /mcp with json_response=True (mcp_proxy/mcp_server.py): each answer is
# one JSON body, and the SDK 1.x transport drops the notifications of a request in that mode.
# Progress is lost on that hop with or without the guard, so it is checked over /sse only.
@dataclass
class Chains:
    """Builds a chain of real processes in front of server-everything and opens a client session at its head."""

    connect: Connector
    processes: Processes
    everything: list[str]
    mcp_proxy: list[str]

    def _mcp_proxy(self, upstream: Sequence[str]) -> AbstractAsyncContextManager[Served]:
        """mcp-proxy serving /sse and /mcp in front of a stdio command, ready once /status answers."""
        return self.processes.serve(
            "mcp-proxy",
            lambda port: [
                *self.mcp_proxy,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--pass-environment",
                "--",
                *upstream,
            ],
            ready_path="/status",
        )

    @asynccontextmanager
    async def session(
        self, chain: str, *, outer: Sequence[str] = (), inner: Sequence[str] = ()
    ) -> AsyncIterator[ClientSession]:
        """A session at the head of chain; outer are the client-side guard's arguments, inner the other guard's."""
        hops = chain.split(">")
        async with AsyncExitStack() as stack:
            upstream: list[str] | str = list(self.everything)
            for hop in reversed(hops[1:]):
                if hop == "guard":
                    upstream = self._guard_argv(upstream, inner)
                else:
                    assert isinstance(upstream, list), f"{hop} needs a stdio upstream"
                    proxy = await stack.enter_async_context(self._mcp_proxy(upstream))
                    upstream = proxy.url(hop.removeprefix("mcp-proxy"))
            head = hops[0]
            if head == "guard":
                command, guard_args = self._guard_parts(upstream, outer)
                guard = await stack.enter_async_context(self.connect.guard_process(command, guard_args=guard_args))
                yield guard.session
                await guard.close_stdin()
                with anyio.fail_after(EXIT_LIMIT):
                    assert await guard.wait_exit() == 0, guard.connection.stderr_text()
                return
            assert isinstance(upstream, list)
            proxy = await stack.enter_async_context(self._mcp_proxy(upstream))
            url = proxy.url(head.removeprefix("mcp-proxy"))
            client = sse_client(url) if url.endswith("/sse") else streamable_http_client(url)
            read_stream, write_stream = await stack.enter_async_context(client)
            session = await stack.enter_async_context(Callbacks().session(read_stream, write_stream))
            with anyio.fail_after(20):
                await session.initialize()
            yield session

    @staticmethod
    def _guard_parts(upstream: list[str] | str, args: Sequence[str]) -> tuple[list[str], list[str]]:
        """The upstream command and the guard's arguments: ``ARGS -- CMD`` or ``ARGS --upstream URL``."""
        if isinstance(upstream, str):
            return [], [*args, "--upstream", upstream]
        return upstream, list(args)

    def _guard_argv(self, upstream: list[str] | str, args: Sequence[str]) -> list[str]:
        """``python -m mcp_loop_guard ARGS -- CMD`` or ``... ARGS --upstream URL --``."""
        return guard_command(*self._guard_parts(upstream, args))


@pytest.fixture
def chains(connect: Connector, processes: Processes, everything_server: list[str], mcp_proxy: list[str]) -> Chains:
    """Builds the test's chain; every process of it is checked gone afterwards."""
    return Chains(connect, processes, everything_server, mcp_proxy)


async def call(session: ClientSession, name: str = "echo", arguments: dict[str, Any] | None = None) -> Any:
    """One tools/call, bounded by CALL_LIMIT."""
    with anyio.fail_after(CALL_LIMIT):
        return await session.call_tool(name, ECHO if arguments is None else arguments)


LONE_GUARD_VERDICTS = [
    (False, 0, None, None, None, None),
    (False, 0, None, None, None, None),
    (False, 1, "warn", 3, 3, 5),
    (False, 1, "warn", 4, 3, 5),
    (True, 1, "block", 5, 3, 5),
    (True, 1, "block", 6, 3, 5),
]
"""What :func:`judged` gives for six identical echo calls through one guard with default thresholds."""


def judged(result: types.CallToolResult) -> tuple[bool, int, str | None, int | None, int | None, int | None]:
    """isError, the number of guard texts, and the verdict's action, streak, warn and block thresholds."""
    found = verdict(result) or {}
    return (
        bool(result.is_error),
        len(guard_notes(result)),
        found.get("action"),
        found.get("streak"),
        found.get("warnThreshold"),
        found.get("blockThreshold"),
    )


# --- every chain ---------------------------------------------------------------------------


@pytest.mark.parametrize("chain", CHAINS)
async def test_tools_progress_and_a_loop_cross_the_chain(chains: Chains, chain: str) -> None:
    """Through the chain, in one session (a chain takes seconds of CPU to build):

    - the client lists server-everything's tools under their own names, none prefixed;
    - a long-running operation's progress notifications cross the chain and all arrive before
      its result, except through mcp-proxy's /mcp endpoint, which answers with plain JSON bodies
      (``json_response=True``) that cannot carry notifications, with or without the guard: there
      the result still arrives, without progress;
    - six identical echo calls are warned at the 3rd and 4th, refused at the 5th and 6th, one note each.
    """
    seen: list[tuple[float, float | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total))

    async with chains.connect(chains.everything, mode="direct") as direct:
        with anyio.fail_after(CALL_LIMIT):
            expected = sorted(tool.name for tool in (await direct.session.list_tools()).tools)
    async with chains.session(chain) as session:
        with anyio.fail_after(CALL_LIMIT):
            listed = sorted(tool.name for tool in (await session.list_tools()).tools)
            result = await session.call_tool(LONG_RUNNING, {"duration": 0.4, "steps": 4}, progress_callback=on_progress)
        at_result = list(seen)
        echoes = [await call(session) for _ in range(6)]
    assert listed == expected
    assert "Long running operation completed" in texts(result)[0]
    assert at_result == ([] if "mcp-proxy/mcp" in chain else [(1, 4), (2, 4), (3, 4), (4, 4)])
    assert texts(echoes[0]) == ["Echo: hi"]
    assert [judged(echo) for echo in echoes] == LONE_GUARD_VERDICTS
    assert texts(echoes[2])[0] == "Echo: hi"


# --- two guards ----------------------------------------------------------------------------


@pytest.mark.parametrize("chain", NESTED)
async def test_nearest_guard_judges(chains: Chains, chain: str) -> None:
    """Outer guard warn 2/block 4, inner 3/5: the client gets the outer's warnings at calls 2 and 3, refusal at 4."""
    outer = ["--warn-threshold", "2", "--block-threshold", "4"]
    async with chains.session(chain, outer=outer) as session:
        results = [await call(session) for _ in range(4)]
    # isError, action, streak, warn and block thresholds of the verdict the client sees
    seen = [(row[0], *row[2:]) for row in map(judged, results)]
    expected = [
        (False, None, None, None, None),
        (False, "warn", 2, 2, 4),
        (False, "warn", 3, 2, 4),
        (True, "block", 4, 2, 4),
    ]
    assert seen == expected, f"calls 1-4 (isError, action, streak, warn, block): saw {seen}, want {expected}"
    assert guard_notes(results[1]) == texts(results[1])[1:], "one note, after the real result"
    assert len(texts(results[3])) == 1, "a refusal carries the refusal text only"


@pytest.mark.parametrize(
    ("chain", "outer"),
    [
        ("guard>guard", ["--ignore-tools", "echo"]),
        ("guard>guard", ["--no-enabled"]),
        ("guard>mcp-proxy/sse>guard", ["--ignore-tools", "echo"]),
    ],
)
async def test_inner_verdicts_reach_client_unchanged(chains: Chains, chain: str, outer: list[str]) -> None:
    """An outer guard that does not count echo hands on the inner's warnings and refusals exactly as a lone guard."""
    async with chains.connect(chains.everything) as lone:
        alone = [await call(lone.session) for _ in range(6)]
    async with chains.session(chain, outer=outer) as session:
        through = [await call(session) for _ in range(6)]
    assert [judged(result) for result in through] == LONE_GUARD_VERDICTS
    assert [wire(result) for result in through] == [wire(result) for result in alone]
