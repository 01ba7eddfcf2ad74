"""The guard in front of mcp-server-time (PyPI), a server nobody here wrote."""

from __future__ import annotations

import math
import time
from itertools import groupby
from pathlib import Path

import anyio
import pytest

from tests.harness import MARKER, Connector, content_dump, guard_notes, tapped, texts, verdict, wiretap_command

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

CONVERSION = {"source_timezone": "Europe/Paris", "time": "09:30", "target_timezone": "America/New_York"}


async def _at_next_half_second() -> None:
    """Sleeps until the wall clock's next half-second boundary (x.0 or x.5)."""
    target = math.floor(time.time() * 2 + 1) / 2
    await anyio.sleep(target - time.time() + 0.002)


async def test_current_time_never_warned(connect: Connector, time_server: list[str]) -> None:
    """get_current_time with a fixed timezone, called 20 times, is never warned or blocked: its result changes."""
    # Each call starts on a fresh half-second boundary after the previous one returned,
    # so of any three consecutive calls the last is evaluated at least a second after
    # the first: at most two identical results (the time has second resolution) in a
    # row, below the warn threshold of 3, however slow the machine.
    async with connect(time_server) as conn:
        results = []
        for _ in range(20):
            await _at_next_half_second()
            with anyio.fail_after(5):
                results.append(await conn.session.call_tool("get_current_time", {"timezone": "Asia/Tokyo"}))
    for result in results:
        assert not result.is_error, texts(result)
        assert verdict(result) is None, verdict(result)
        assert guard_notes(result) == []
    stamps = [result.structured_content["datetime"] for result in results if result.structured_content]
    assert len(stamps) == 20
    assert max(len(list(run)) for _, run in groupby(stamps)) <= 2, "the pacing let 3 calls land in one second"


async def test_convert_time_warned_then_refused(connect: Connector, time_server: list[str], tmp_path: Path) -> None:
    """convert_time with fixed arguments: warned at the 3rd and 4th call, refused at the 5th; the server saw 4."""
    tap = tmp_path / "time-server-wire.jsonl"
    async with connect(wiretap_command(tap, time_server)) as conn:
        with anyio.fail_after(15):
            results = [await conn.session.call_tool("convert_time", CONVERSION) for _ in range(5)]
        with anyio.fail_after(5):
            other = await conn.session.call_tool("get_current_time", {"timezone": "UTC"})
    actions = [None if (found := verdict(result)) is None else found["action"] for result in results]
    assert actions == [None, None, "warn", "warn", "block"]
    first = results[0]
    assert first.structured_content is not None
    for warned in results[2:4]:
        assert not warned.is_error
        assert warned.structured_content == first.structured_content
        assert content_dump(warned)[:-1] == content_dump(first)
        assert len(guard_notes(warned)) == 1
    refused = results[4]
    assert refused.is_error
    assert texts(refused)[0].startswith(MARKER)
    assert verdict(other) is None
    assert not other.is_error
    calls = tapped(tap, "server", "tools/call")
    assert [call["params"]["name"] for call in calls] == ["convert_time"] * 4 + ["get_current_time"]


@pytest.mark.parametrize(
    ("guard_args", "expected"),
    [
        pytest.param([], [None, None, "warn", "warn", "block"], id="counted"),
        pytest.param(["--ignore-errors"], [None] * 5, id="ignore-errors"),
    ],
)
async def test_repeated_tool_errors(
    connect: Connector, time_server: list[str], guard_args: list[str], expected: list[str | None]
) -> None:
    """The same failing call (an unknown timezone) loops like any other, unless --ignore-errors makes retries free."""
    async with connect(time_server, guard_args=guard_args) as conn:
        with anyio.fail_after(15):
            results = [await conn.session.call_tool("get_current_time", {"timezone": "Mars/Olympus"}) for _ in range(5)]
    assert all(result.is_error for result in results)
    assert [None if (found := verdict(result)) is None else found["action"] for result in results] == expected
