"""A client that starts a new guard for every call (langchain-mcp-adapters' default pattern).

langchain-mcp-adapters (0.3.2, the newest) requires ``mcp<2``, so it cannot share this
project's SDK; the pattern is driven with the official SDK client instead: one process
(this test) starts a new ``mcp-loop-guard -- <server>`` for each call, with the same
command line and working directory every time.
"""

from __future__ import annotations

import anyio
import pytest
from mcp import types

from tests.harness import MARKER, Connector, CountingUpstream, action, texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def test_guard_per_call_warned_then_refused(
    connect: Connector, counting: CountingUpstream, guard_env: dict[str, str]
) -> None:
    """Six identical calls, each through a new guard started by this process: warned at 3, refused at 5 and 6."""
    results: list[types.CallToolResult] = []
    reached: list[int] = []
    for _ in range(6):
        async with connect(counting.command, env=guard_env) as conn:
            with anyio.fail_after(20):
                results.append(await conn.session.call_tool("constant", {}))
        reached.append(len(counting.calls("constant")))
    shown = "\n".join(f"call {n}: error={r.is_error} {texts(r)}" for n, r in enumerate(results, 1))
    context = f"upstream calls after each call: {reached}\n{shown}"
    assert [action(result) for result in results] == [None, None, "warn", "warn", "block", "block"], context
    assert [result.is_error for result in results] == [False, False, False, False, True, True], context
    assert all(texts(result)[-1].startswith(MARKER) for result in results[2:]), context
    assert reached == [1, 2, 3, 4, 4, 4], f"the refused calls must not reach the upstream\n{context}"
