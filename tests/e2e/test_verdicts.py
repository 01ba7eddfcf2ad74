"""Warn, block and pass verdicts on the wire, proven against our counting upstream."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import ClientSession, types

from tests.harness import MARKER, Connector, CountingUpstream, content_dump, guard_notes, texts, verdict

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def _call_n(session: ClientSession, n: int, name: str, arguments: dict[str, Any]) -> list[types.CallToolResult]:
    results: list[types.CallToolResult] = []
    with anyio.fail_after(5 + n):
        for _ in range(n):
            results.append(await session.call_tool(name, arguments))
    return results


def _actions(results: list[types.CallToolResult]) -> list[str | None]:
    return [None if (found := verdict(result)) is None else found["action"] for result in results]


async def test_identical_calls_warned_then_refused(connect: Connector, counting: CountingUpstream) -> None:
    """Identical calls with an unchanged result are warned at the 3rd and 4th call and refused at the 5th."""
    async with connect(counting.command, env=counting.env) as conn:
        results = await _call_n(conn.session, 5, "constant", {})
    assert _actions(results) == [None, None, "warn", "warn", "block"]
    assert [result.is_error for result in results] == [False, False, False, False, True]
    for streak, warned in zip((3, 4), results[2:4], strict=True):
        found = verdict(warned)
        assert found is not None
        assert found["tool"] == "constant"
        assert found["streak"] == streak
    refusal = texts(results[4])
    assert len(refusal) == 1
    assert refusal[0].startswith(MARKER)
    assert len(counting.calls("constant")) == 4, "the refused 5th call must not reach the upstream"


async def test_refused_retries_never_reach_upstream(connect: Connector, counting: CountingUpstream) -> None:
    """Every identical retry after the refusal is refused too, and none of them reaches the upstream."""
    async with connect(counting.command, env=counting.env) as conn:
        results = await _call_n(conn.session, 6, "constant", {})
    assert _actions(results)[4:] == ["block", "block"]
    assert all(result.is_error for result in results[4:])
    assert len(counting.calls()) == 4


async def test_warning_appended_after_real_content(connect: Connector, counting: CountingUpstream) -> None:
    """A warned result is the real result, text and image untouched, plus one [loop-guard] text item at the end."""
    arguments = {"caption": "same picture", "seed": 3}
    async with connect(counting.command, env=counting.env) as conn:
        results = await _call_n(conn.session, 3, "image", arguments)
    first, warned = results[0], results[2]
    assert verdict(first) is None
    assert [item.type for item in first.content] == ["text", "image"]
    assert content_dump(warned)[:-1] == content_dump(first)
    last = warned.content[-1]
    assert isinstance(last, types.TextContent)
    assert last.text.startswith(MARKER)
    assert guard_notes(warned) == [last.text]
    assert not warned.is_error
    assert len(counting.calls("image")) == 3


async def test_changing_results_never_warned(connect: Connector, counting: CountingUpstream) -> None:
    """The same call whose result changes every time (a counter) passes 20 times without a verdict."""
    async with connect(counting.command, env=counting.env) as conn:
        results = await _call_n(conn.session, 20, "ticker", {})
    assert _actions(results) == [None] * 20
    assert [result.structured_content for result in results] == [{"tick": n} for n in range(1, 21)]
    assert all(guard_notes(result) == [] for result in results)
    assert len(counting.calls("ticker")) == 20


async def test_distinct_arguments_never_warned(connect: Connector, counting: CountingUpstream) -> None:
    """Calls that differ in their arguments are all forwarded and never warned."""
    async with connect(counting.command, env=counting.env) as conn:
        with anyio.fail_after(20):
            results = [await conn.session.call_tool("image", {"caption": "p", "seed": seed}) for seed in range(8)]
            results += [await conn.session.call_tool("echo", {"text": f"line {n}"}) for n in range(8)]
    assert _actions(results) == [None] * 16
    assert len(counting.calls()) == 16


async def test_thresholds_from_flags(connect: Connector, counting: CountingUpstream) -> None:
    """--warn-threshold and --block-threshold move the verdicts: warned at the 2nd call, refused at the 3rd."""
    async with connect(
        counting.command, env=counting.env, guard_args=["--warn-threshold", "2", "--block-threshold", "3"]
    ) as conn:
        results = await _call_n(conn.session, 3, "constant", {})
    assert _actions(results) == [None, "warn", "block"]
    assert len(counting.calls()) == 2


async def test_thresholds_from_environment(connect: Connector, counting: CountingUpstream) -> None:
    """LOOP_GUARD_WARN_THRESHOLD and LOOP_GUARD_BLOCK_THRESHOLD set the same thresholds as the flags."""
    env = {**counting.env, "LOOP_GUARD_WARN_THRESHOLD": "2", "LOOP_GUARD_BLOCK_THRESHOLD": "3"}
    async with connect(counting.command, env=env) as conn:
        results = await _call_n(conn.session, 3, "constant", {})
    assert _actions(results) == [None, "warn", "block"]


async def test_flags_override_environment(connect: Connector, counting: CountingUpstream) -> None:
    """A flag wins over the environment variable of the same setting."""
    env = {**counting.env, "LOOP_GUARD_WARN_THRESHOLD": "2"}
    async with connect(counting.command, env=env, guard_args=["--warn-threshold", "4"]) as conn:
        results = await _call_n(conn.session, 4, "constant", {})
    assert _actions(results) == [None, None, None, "warn"]


async def test_ignored_tools_always_pass(connect: Connector, counting: CountingUpstream) -> None:
    """A tool matched by --ignore-tools is never warned or refused, however often it repeats."""
    async with connect(counting.command, env=counting.env, guard_args=["--ignore-tools", "echo,const*"]) as conn:
        results = await _call_n(conn.session, 8, "constant", {})
    assert _actions(results) == [None] * 8
    assert not any(result.is_error for result in results)
    assert len(counting.calls("constant")) == 8
