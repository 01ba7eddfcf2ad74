"""One guard over streamable HTTP in front of several upstreams: names, routing and loop state per session.

The guard serves mcp-server-time (stdio), server-everything over stdio and
server-everything in its own streamable HTTP mode, from one config file. Stdio
upstreams are one child process shared by every session; the HTTP upstream gets a
connection per session.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.client.session import ClientRequestContext, SamplingFnT
from mcp.shared.exceptions import MCPError

from tests.harness import MARKER, Callbacks, action, kill_marked, texts
from tests.http_harness import (
    HttpSession,
    Rig,
    ServerProcess,
    everything_http_entry,
    everything_stdio_entry,
    http_get,
    http_post,
    metric_value,
    open_http_session,
    time_entry,
    tool_call_body,
    tool_names,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio, pytest.mark.usefixtures("guard_log")]

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
LONG_RUNNING = "trigger-long-running-operation"
SAMPLING = "trigger-sampling-request"
SERVERS = ("time", "everything", "everything_stdio")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Runs the module on asyncio, in one event loop, so the tests can share one guard."""
    return "asyncio"


@pytest.fixture(scope="module")
async def guard(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ServerProcess]:
    """One guard for the module, in front of time (stdio), everything (HTTP) and everything_stdio (stdio).

    Every test opens sessions of its own, and loop state is per session, so the tests
    do not see each other's calls.
    """
    marker = uuid.uuid4().hex
    rig = Rig(tmp_path_factory.mktemp("http-routing"), marker)
    try:
        async with rig.everything_http() as everything:
            config = rig.config(
                {
                    "time": time_entry(),
                    "everything": everything_http_entry(everything.mcp_url),
                    "everything_stdio": everything_stdio_entry(),
                }
            )
            async with rig.guard(["--config", str(config)]) as guard:
                yield guard
    finally:
        kill_marked(marker)


def actions(results: list[types.CallToolResult]) -> list[str | None]:
    """The guard's verdict action on each result, None where it added none."""
    return [action(result) for result in results]


async def call_repeatedly(
    session: HttpSession, name: str, arguments: dict[str, Any], times: int
) -> list[types.CallToolResult]:
    """Makes the same call several times in a row."""
    with anyio.fail_after(10 + times):
        return [await session.session.call_tool(name, arguments) for _ in range(times)]


async def test_prefixed_tools_listed_and_callable(guard: ServerProcess) -> None:
    """Every upstream's tools are listed under its server's name and calls reach the right server."""
    async with open_http_session(guard.mcp_url) as client:
        with anyio.fail_after(10):
            listed = tool_names(await client.session.list_tools())
            now = await client.session.call_tool("time__get_current_time", {"timezone": "UTC"})
            total = await client.session.call_tool("everything__get-sum", {"a": 2, "b": 3})
            echoed = await client.session.call_tool("everything_stdio__echo", {"message": "over stdio"})

    assert {"time__get_current_time", "time__convert_time", "everything__echo", "everything_stdio__echo"} <= listed
    assert all(name.split("__", 1)[0] in SERVERS for name in listed), sorted(listed)
    assert all(TOOL_NAME.match(name) for name in listed), sorted(listed)
    assert client.initialize.server_info.name == "mcp-loop-guard"
    assert not now.is_error, texts(now)
    assert now.structured_content is not None
    assert now.structured_content["timezone"] == "UTC"
    assert not total.is_error
    assert "5" in texts(total)[0]
    assert texts(echoed) == ["Echo: over stdio"]


@pytest.mark.parametrize("server", ["everything", "everything_stdio"])
async def test_progress_reaches_only_its_session(guard: ServerProcess, server: str) -> None:
    """Two sessions running long operations at once each get their own progress, and only theirs."""
    seen: dict[str, list[tuple[float, float | None]]] = {"A": [], "B": []}
    steps = {"A": 3, "B": 5}
    results: dict[str, types.CallToolResult] = {}

    async def run(client: HttpSession, name: str) -> None:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen[name].append((progress, total))

        arguments = {"duration": 0.6, "steps": steps[name]}
        results[name] = await client.session.call_tool(
            f"{server}__{LONG_RUNNING}", arguments, progress_callback=on_progress
        )

    async with (
        open_http_session(guard.mcp_url) as first,
        open_http_session(guard.mcp_url) as second,
    ):
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, first, "A")
                tg.start_soon(run, second, "B")

    assert seen["A"] == [(step, 3) for step in range(1, 4)]
    assert seen["B"] == [(step, 5) for step in range(1, 6)]
    assert "Steps: 3" in texts(results["A"])[0]
    assert "Steps: 5" in texts(results["B"])[0]


async def test_sampling_reaches_only_its_session(guard: ServerProcess) -> None:
    """Sampling requests of two concurrent calls each reach the client whose call asked, never the other."""
    asked: dict[str, list[types.CreateMessageRequestParams]] = {"A": [], "B": []}
    both_asked = anyio.Event()

    def sampler(name: str) -> SamplingFnT:
        async def sample(
            context: ClientRequestContext, params: types.CreateMessageRequestParams
        ) -> types.CreateMessageResult:
            asked[name].append(params)
            if asked["A"] and asked["B"]:
                both_asked.set()
            # Hold the answer until the other session's request is in flight too.
            with anyio.move_on_after(10):
                await both_asked.wait()
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text=f"sampled for {name}"), model="e2e"
            )

        return sample

    results: dict[str, types.CallToolResult] = {}

    async def run(client: HttpSession, name: str) -> None:
        arguments = {"prompt": f"a colour for {name}", "maxTokens": 5}
        results[name] = await client.session.call_tool(f"everything__{SAMPLING}", arguments)

    async with (
        open_http_session(guard.mcp_url, callbacks=Callbacks(sampling=sampler("A"))) as first,
        open_http_session(guard.mcp_url, callbacks=Callbacks(sampling=sampler("B"))) as second,
    ):
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, first, "A")
                tg.start_soon(run, second, "B")

    for name, other in (("A", "B"), ("B", "A")):
        assert len(asked[name]) == 1, asked
        content = asked[name][0].messages[0].content
        assert isinstance(content, types.TextContent)
        assert f"a colour for {name}" in content.text
        text = " ".join(texts(results[name]))
        assert not results[name].is_error, text
        assert f"sampled for {name}" in text
        assert f"sampled for {other}" not in text


async def test_loop_state_is_per_session(guard: ServerProcess) -> None:
    """Session A repeating a call is warned then refused, while B making the same call is not."""
    arguments = {"message": "same again"}
    tool = "everything_stdio__echo"
    async with (
        open_http_session(guard.mcp_url) as first,
        open_http_session(guard.mcp_url) as second,
    ):
        a_results = await call_repeatedly(first, tool, arguments, 4)
        b_results = await call_repeatedly(second, tool, arguments, 1)
        a_results += await call_repeatedly(first, tool, arguments, 1)
        b_results += await call_repeatedly(second, tool, arguments, 1)

    assert actions(a_results) == [None, None, "warn", "warn", "block"]
    assert a_results[4].is_error
    assert texts(a_results[4])[0].startswith(MARKER)
    assert [text for text in texts(a_results[2]) if text.startswith(MARKER)], texts(a_results[2])
    assert actions(b_results) == [None, None]
    assert all(texts(result) == ["Echo: same again"] for result in b_results)


async def test_abort_ends_only_that_session(guard: ServerProcess) -> None:
    """The third refusal ends session A (its id answers 404 from then on) while session B keeps working."""
    arguments = {"message": "stuck"}
    tool = "everything__echo"
    async with (
        open_http_session(guard.mcp_url) as first,
        open_http_session(guard.mcp_url) as second,
    ):
        before = await call_repeatedly(second, tool, arguments, 2)
        looped = await call_repeatedly(first, tool, arguments, 7)
        with anyio.fail_after(10), pytest.raises(MCPError):
            await first.session.call_tool("everything__echo", {"message": "something else"})
        with anyio.fail_after(10):
            raw = await http_post(
                guard.mcp_url,
                tool_call_body("everything__echo", {"message": "still there?"}),
                {"Mcp-Session-Id": first.session_id, "Mcp-Protocol-Version": "2025-11-25"},
            )
        after = await call_repeatedly(second, tool, arguments, 1)
        with anyio.fail_after(10):
            still_listed = tool_names(await second.session.list_tools())
        assert first.session_id != second.session_id

    assert actions(looped) == [None, None, "warn", "warn", "block", "block", "abort"]
    assert all(result.is_error for result in looped[4:])
    assert raw.status_code == 404, raw.text
    assert actions(before) == [None, None]
    assert actions(after) == ["warn"], "B's third identical call is its own third, not A's eighth"
    assert not after[0].is_error
    assert "everything__echo" in still_listed


async def test_metrics_count_the_verdicts(guard: ServerProcess) -> None:
    """/metrics counts the calls, warns, blocks and abort one looping session caused, and the session's end."""
    tool = "everything_stdio__get-sum"
    with anyio.fail_after(10):
        baseline = (await http_get(guard.url("/metrics"))).text
    async with open_http_session(guard.mcp_url) as bystander, open_http_session(guard.mcp_url) as looping:
        with anyio.fail_after(10):
            before = (await http_get(guard.url("/metrics"))).text
        await call_repeatedly(looping, tool, {"a": 1, "b": 2}, 7)
        with anyio.fail_after(10):
            await bystander.session.call_tool("time__get_current_time", {"timezone": "UTC"})
            after = (await http_get(guard.url("/metrics"))).text

    def added(sample: str, **labels: str) -> float:
        return metric_value(after, sample, **labels) - metric_value(before, sample, **labels)

    sessions = "loop_guard_active_sessions"
    assert metric_value(before, sessions) - metric_value(baseline, sessions) == 2, before
    assert metric_value(after, sessions) - metric_value(baseline, sessions) == 1, after
    server = {"upstream": "everything_stdio"}
    assert added("loop_guard_warns_total", **server) == 2, after
    assert added("loop_guard_blocks_total", **server) == 3, after
    assert added("loop_guard_aborts_total", **server) == 1, after
    by_verdict = {
        name: added("loop_guard_tool_calls_total", verdict=name, **server)
        for name in ("allow", "warn", "block", "abort")
    }
    assert by_verdict == {"allow": 2, "warn": 2, "block": 2, "abort": 1}, after
    assert added("loop_guard_tool_call_seconds_count", **server) == 7, after
    assert added("loop_guard_tool_calls_total", upstream="time") == 1, after
    assert added("loop_guard_warns_total", upstream="time") == 0, after
    assert added("loop_guard_warns_total", tool=tool) == 2, f"warns by tool should use the listed name:\n{after}"
    for name in SERVERS:
        assert metric_value(after, "loop_guard_upstream_up", upstream=name) == 1, after
