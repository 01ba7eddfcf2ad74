"""Lines handled in the loop's readiness callback: in order, one at a time, as a task's ``await`` loop would."""

from __future__ import annotations

import asyncio  # noqa: TID251 - the current task is what these tests check
import contextvars
import os

import anyio
import pytest

from mcp_loop_guard.proxy.wire.feed import feed_lines
from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized
from tests.proxy.pipes import pipe

pytestmark = pytest.mark.anyio

LIMIT = 1 << 20


def text(line: bytes | Oversized) -> str:
    assert isinstance(line, bytes)
    return line.decode()


async def test_lines_are_handled_in_order_even_when_a_handler_waits_and_more_arrive_meanwhile() -> None:
    seen: list[str] = []
    waiting, release, last = anyio.Event(), anyio.Event(), anyio.Event()

    async def handle(line: bytes | Oversized) -> None:
        seen.append(f"start {text(line)}")
        if text(line) == "b":
            waiting.set()
            await release.wait()  # the host continues this one; "c" and "d" wait their turn
        seen.append(f"end {text(line)}")
        if text(line) == "d":
            last.set()

    async with pipe("read") as (fd, write_end), anyio.create_task_group() as tg:
        tg.start_soon(feed_lines, fd, LineReader(LIMIT), handle)
        os.write(write_end, b"a\nb\nc\n")
        with anyio.fail_after(5):
            await waiting.wait()
        os.write(write_end, b"d\n")
        await anyio.sleep(0.05)
        assert seen == ["start a", "end a", "start b"], "nothing runs while a handler waits"
        release.set()
        os.close(write_end)
        with anyio.fail_after(5):
            await last.wait()
    assert seen == ["start a", "end a", "start b", "end b", "start c", "end c", "start d", "end d"]


async def test_a_handler_runs_as_the_reading_task_with_its_cancel_scopes_working() -> None:
    """In the callback the host is the current task: a timeout a handler sets fires, and is its own."""
    tasks: list[asyncio.Task[object] | None] = []
    timed_out: list[bool] = []

    async def handle(line: bytes | Oversized) -> None:
        tasks.append(asyncio.current_task())
        with anyio.move_on_after(0.05) as scope:
            await anyio.sleep(10)
        timed_out.append(scope.cancelled_caught)
        tasks.append(asyncio.current_task())

    async with pipe("read") as (fd, write_end):
        os.write(write_end, b"x\n")
        os.close(write_end)
        host: asyncio.Task[object] | None = None

        async def reader() -> None:
            nonlocal host
            host = asyncio.current_task()
            await feed_lines(fd, LineReader(LIMIT), handle)

        with anyio.fail_after(5):
            await reader()
    assert timed_out == [True]
    assert tasks == [host, host]


async def test_one_context_for_every_line() -> None:
    var: contextvars.ContextVar[int] = contextvars.ContextVar("var", default=0)
    seen: list[int] = []

    async def handle(line: bytes | Oversized) -> None:
        seen.append(var.get())
        var.set(var.get() + 1)
        if text(line) == "2":
            await anyio.sleep(0.01)  # this one's second half runs in the host

    async with pipe("read") as (fd, write_end):
        os.write(write_end, b"1\n2\n3\n")
        os.close(write_end)
        with anyio.fail_after(5):
            await feed_lines(fd, LineReader(LIMIT), handle)
    assert seen == [0, 1, 2]


async def test_the_last_line_without_newline_is_handled_at_the_end() -> None:
    seen: list[str] = []

    async def handle(line: bytes | Oversized) -> None:
        seen.append(text(line))

    async with pipe("read") as (fd, write_end):
        os.write(write_end, b"one\ntwo")
        os.close(write_end)
        with anyio.fail_after(5):
            await feed_lines(fd, LineReader(LIMIT), handle)
    assert seen == ["one", "two"]


async def test_what_a_handler_raises_ends_the_feed_with_it_and_later_lines_are_not_handled() -> None:
    seen: list[str] = []

    async def handle(line: bytes | Oversized) -> None:
        seen.append(text(line))
        if text(line) == "bad":
            raise ValueError("broken handler")

    async with pipe("read") as (fd, write_end):
        os.write(write_end, b"ok\nbad\nlater\n")
        with anyio.fail_after(5), pytest.raises(ValueError, match="broken handler"):
            await feed_lines(fd, LineReader(LIMIT), handle)
    assert seen == ["ok", "bad"]


async def test_closing_the_descriptor_ends_the_feed() -> None:
    async def handle(line: bytes | Oversized) -> None:
        pass

    async with pipe("read") as (fd, _write_end), anyio.create_task_group() as tg:
        done = anyio.Event()

        async def feed() -> None:
            await feed_lines(fd, LineReader(LIMIT), handle)
            done.set()

        tg.start_soon(feed)
        await anyio.sleep(0.02)
        fd.close()
        with anyio.fail_after(5):
            await done.wait()


async def test_cancelling_the_reader_reaches_the_handler_that_waits() -> None:
    cleaned: list[str] = []

    async def handle(line: bytes | Oversized) -> None:
        try:
            await anyio.sleep(10)
        finally:
            cleaned.append(text(line))

    async with pipe("read") as (fd, write_end):
        os.write(write_end, b"slow\n")
        with anyio.move_on_after(0.1):
            await feed_lines(fd, LineReader(LIMIT), handle)
    assert cleaned == ["slow"]


class _BrokenFraming(LineReader):
    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        raise RuntimeError("framing fault")


async def test_a_fault_in_the_framing_ends_the_feed_with_it() -> None:
    """Raised in the reading task, not lost in the event loop's log with the reader waiting forever."""

    async def handle(line: bytes | Oversized) -> None:
        pass

    async with pipe("read") as (fd, write_end):
        reading = anyio.Event()

        async def write_later() -> None:
            await reading.wait()
            await anyio.sleep(0.02)  # the feed is waiting in the callback by now
            os.write(write_end, b"x\n")

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write_later)
                reading.set()
                with pytest.raises(RuntimeError, match="framing fault"):
                    await feed_lines(fd, _BrokenFraming(LIMIT), handle)


def test_this_python_lets_lines_be_handled_in_the_callback() -> None:
    """asyncio's hooks for marking a task current exist here; without them lines go to the task (slower).

    They are private to asyncio (its eager tasks use them): a Python release without them fails
    here, not silently in the benchmarks.
    """
    from mcp_loop_guard.proxy.wire import feed

    assert feed._enter_task is not None
    assert feed._leave_task is not None
