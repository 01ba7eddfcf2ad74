"""Writes on the loop: what does not fit in the pipe is written as room comes; whole messages never interleave."""

from __future__ import annotations

import os
import sys
from contextlib import suppress
from pathlib import Path

import anyio
import pytest

from mcp_loop_guard.proxy.upstream.child import spawn
from mcp_loop_guard.proxy.wire.fd import Writer
from tests.proxy.pipes import pipe

pytestmark = pytest.mark.anyio

MESSAGE = 1 << 20
"""Much more than a pipe holds (64 KB by default)."""


async def drain(read_end: int, size: int) -> bytes:
    """Read ``size`` bytes slowly, in small pieces, as a busy client does."""
    got = bytearray()
    while len(got) < size:
        await anyio.sleep(0.001)
        got += await anyio.to_thread.run_sync(os.read, read_end, 16384)
    return bytes(got)


async def test_a_message_larger_than_the_pipe_arrives_whole() -> None:
    data = bytes(range(256)) * (MESSAGE // 256)
    async with pipe("write") as (fd, read_end), anyio.create_task_group() as tg:
        received: list[bytes] = []

        async def read() -> None:
            received.append(await drain(read_end, len(data)))

        tg.start_soon(read)
        with anyio.fail_after(20):
            await fd.write(data)
    assert received == [data]


async def test_two_writers_of_large_messages_never_interleave() -> None:
    """Sessions sharing a child write to one pipe at once: each message goes out whole, in turn."""
    first, second = b"a" * MESSAGE + b"\n", b"b" * MESSAGE + b"\n"
    async with pipe("write") as (fd, read_end), anyio.create_task_group() as tg:
        writer = Writer(fd)
        received: list[bytes] = []

        async def read() -> None:
            received.append(await drain(read_end, len(first) + len(second)))

        tg.start_soon(read)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as writers:
                writers.start_soon(writer.write, first)
                writers.start_soon(writer.write, second)
    lines = received[0].split(b"\n")[:2]
    assert sorted(lines) == [first[:-1], second[:-1]], [line[:3] + b"..." + line[-3:] for line in lines]


async def test_closing_the_descriptor_fails_a_write_that_waits_for_room() -> None:
    async with pipe("write") as (fd, _read_end), anyio.create_task_group() as tg:
        failed: list[BaseException] = []

        async def write() -> None:
            try:
                await fd.write(b"x" * MESSAGE)
            except OSError as error:
                failed.append(error)

        tg.start_soon(write)
        await anyio.sleep(0.05)  # nobody reads: the write waits for room
        fd.close()
    assert len(failed) == 1
    assert isinstance(failed[0], BrokenPipeError)


async def test_a_reader_that_goes_away_fails_the_write() -> None:
    async with pipe("write") as (fd, read_end):
        writing = anyio.Event()

        async def close_reader() -> None:
            await writing.wait()
            await anyio.sleep(0.05)
            os.close(read_end)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(close_reader)
                writing.set()
                with pytest.raises(BrokenPipeError):
                    await fd.write(b"y" * MESSAGE)


async def test_a_cancelled_write_lets_the_next_one_go() -> None:
    async with pipe("write") as (fd, read_end):
        with anyio.move_on_after(0.05):
            await fd.write(b"z" * MESSAGE)  # nobody reads: cancelled while waiting for room
        os.set_blocking(read_end, False)
        with suppress(BlockingIOError):
            while os.read(read_end, 1 << 16):
                pass
        with anyio.fail_after(5):
            await fd.write(b"after\n")


async def test_writers_sharing_a_child_hand_it_whole_lines(tmp_path: Path) -> None:
    """Two sessions writing large lines to one child at once: the child reads each line whole."""
    out = tmp_path / "read.txt"
    child = spawn(
        [sys.executable, "-c", f"import sys, shutil; shutil.copyfileobj(sys.stdin.buffer, open({str(out)!r}, 'wb'))"],
        name="copier",
    )
    lines = [bytes([ord("a") + n]) * MESSAGE + b"\n" for n in range(3)]
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for line in lines:
                    tg.start_soon(child.write, line)
            child.close_stdin()
            await anyio.to_thread.run_sync(child.process.wait)
    finally:
        await child.stop()
    assert sorted(out.read_bytes().splitlines(keepends=True)) == lines
