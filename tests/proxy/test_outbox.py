"""A child's stdin writer that never waits: lines queue in order, bounded by what the reader does."""

from __future__ import annotations

import os

import anyio
import pytest

from mcp_loop_guard.proxy.wire.outbox import BacklogFullError, Outbox, stuck
from tests.proxy.pipes import pipe

pytestmark = pytest.mark.anyio

LINE = b"x" * 100_000 + b"\n"
"""More than a default pipe holds (64 KB), so most of it has to wait."""


async def read_all(read_end: int) -> bytes:
    """Everything the other end gets until it is closed."""
    got = bytearray()
    while chunk := await anyio.to_thread.run_sync(os.read, read_end, 1 << 16):
        got += chunk
    return bytes(got)


async def test_lines_nobody_reads_yet_are_taken_at_once_and_arrive_whole_in_order() -> None:
    """Ten lines over a full pipe: put() returns each time without waiting; the reader then gets all, in order."""
    lines = [bytes([ord("a") + n]) * len(LINE) + b"\n" for n in range(10)]
    async with pipe("write") as (fd, read_end):
        outbox = Outbox(fd)
        for line in lines:
            outbox.put(line)  # not awaited: it cannot wait
        assert outbox.queued > 0
        outbox.close()  # once what waits is written
        with anyio.fail_after(20):
            received = await read_all(read_end)
    assert received == b"".join(lines)


async def test_past_the_soft_bound_a_reader_that_is_not_reading_gets_no_more() -> None:
    """Over ``soft`` queued bytes and the reader silent: the next line is refused, the ones before are kept."""
    async with pipe("write") as (fd, read_end):
        outbox = Outbox(fd, soft=len(LINE), taking=0)
        outbox.put(LINE)
        outbox.put(LINE)
        with pytest.raises(BacklogFullError):
            outbox.put(b"refused\n")
        outbox.close()
        with anyio.fail_after(20):
            received = await read_all(read_end)
    assert received == LINE * 2


async def test_past_the_hard_bound_nothing_more_is_queued() -> None:
    """However the reader does, the queue never holds more than ``hard`` bytes (plus the line that crossed it)."""
    async with pipe("write") as (fd, _):
        outbox = Outbox(fd, hard=2 * len(LINE), taking=3600)
        outbox.put(LINE)
        outbox.put(LINE)
        outbox.put(LINE)
        with pytest.raises(BacklogFullError):
            outbox.put(LINE)


async def test_a_reader_gone_fails_the_next_put() -> None:
    """The reader closed its end while lines waited: the next put raises BrokenPipeError."""
    async with pipe("write") as (fd, read_end):
        outbox = Outbox(fd)
        outbox.put(LINE)
        os.close(read_end)
        with anyio.fail_after(10):
            while outbox.queued:  # noqa: ASYNC110 - the loop notices the closed reader on its next write
                await anyio.sleep(0.01)
        with pytest.raises(BrokenPipeError):
            outbox.put(b"after\n")


async def test_stuck_returns_once_lines_waited_long_enough_and_it_counts() -> None:
    """``stuck`` returns once the reader took nothing for ``after`` seconds, if the caller says that counts."""
    async with pipe("write") as (fd, _):
        outbox = Outbox(fd)
        outbox.put(LINE)
        with anyio.move_on_after(0.5) as not_counted:
            await stuck(outbox, 0.1, lambda since: False)
        with anyio.fail_after(5):
            await stuck(outbox, 0.1, lambda since: True)
    assert not_counted.cancelled_caught, "stuck returned although the silence did not count"
