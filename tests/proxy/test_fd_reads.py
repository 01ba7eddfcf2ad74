"""Reads on the loop: a child's stdout is read up to a megabyte at once, without paying for a megabyte per read."""

from __future__ import annotations

import os
import resource
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import psutil
import pytest

from mcp_loop_guard.proxy.wire.fd import PIPE_BYTES, Fd, enlarge_pipe

pytestmark = pytest.mark.anyio


@contextmanager
def child_stdout() -> Iterator[tuple[Fd, int]]:
    """A pipe read as the guard reads a child's stdout (a read size of a megabyte), and its raw write end."""
    read_end, write_end = os.pipe()
    enlarge_pipe(read_end)
    fd = Fd(read_end, PIPE_BYTES)
    try:
        yield fd, write_end
    finally:
        fd.close()
        os.close(write_end)


def test_a_small_message_costs_its_size_not_the_read_size() -> None:
    with child_stdout() as (fd, write_end):
        os.write(write_end, b'{"jsonrpc":"2.0","id":1,"result":{}}\n')
        tracemalloc.start()
        try:
            chunk = fd.read_now()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert chunk == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
        assert peak < 4096, f"reading 38 bytes allocated {peak} bytes at the peak"


def test_descriptors_waiting_for_a_child_hold_no_megabyte_each() -> None:
    """The buffer costs memory only once a large message has filled it, and only until it is read."""
    process = psutil.Process()
    pipes = [os.pipe() for _ in range(20)]
    before = process.memory_info().rss
    fds = [Fd(read_end, PIPE_BYTES) for read_end, _ in pipes]
    try:
        grown = process.memory_info().rss - before
        assert grown < 4 * 1024 * 1024, f"20 idle descriptors took {grown / 1e6:.1f} MB"
        write_end = pipes[0][1]
        enlarge_pipe(write_end)
        os.write(write_end, b"x" * 500_000)
        assert len(fds[0].read_now()) == 500_000
        kept = process.memory_info().rss - before
        assert kept < 4 * 1024 * 1024, f"after one large read, {kept / 1e6:.1f} MB stayed"
    finally:
        for fd in fds:
            fd.close()
        for _, write_end in pipes:
            os.close(write_end)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


async def test_large_reads_in_a_row_reuse_the_pages_which_go_back_once_they_stop() -> None:
    """A megabyte result per call must not fault a fresh megabyte in each time, nor stay resident when idle."""
    large = b"x" * 500_000  # 122 pages
    with child_stdout() as (fd, write_end):
        assert fd.buffer is not None
        fd.buffer.release_after = 0.2

        def read_large() -> None:
            os.write(write_end, large)
            assert len(fd.read_now()) == len(large)

        for _ in range(3):  # the allocator settles on where the chunks go
            read_large()
        before = _faults()
        for _ in range(5):
            read_large()
        in_a_row = _faults() - before
        assert in_a_row < 150, f"five large reads in a row took {in_a_row} page faults (122 each when handed back)"
        assert fd.buffer.holding
        await anyio.sleep(0.2)  # the pages go back 0.2 s after the last large read
        with anyio.fail_after(10):
            while fd.buffer.holding:  # noqa: ASYNC110 - a loop timer, nothing to wait on as an event
                await anyio.sleep(0.05)
        before = _faults()
        read_large()
        again = _faults() - before
        assert again >= 100, f"the pages were not handed back: the next large read took {again} page faults"


def test_chunks_read_into_the_shared_buffer_stay_as_they_were_read() -> None:
    with child_stdout() as (fd, write_end):
        os.write(write_end, b"first\n")
        first = fd.read_now()
        os.write(write_end, b"second, longer\n")
        second = fd.read_now()
        assert (first, second) == (b"first\n", b"second, longer\n")
        with pytest.raises(BlockingIOError):
            fd.read_now()


async def test_a_large_message_arrives_whole_through_the_buffer() -> None:
    data = bytes(range(256)) * ((PIPE_BYTES + 300_000) // 256)
    with child_stdout() as (fd, write_end):
        got = bytearray()
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, os.write, write_end, data)
            while len(got) < len(data):
                chunk = await fd.read()
                assert chunk
                assert len(chunk) <= PIPE_BYTES
                got += chunk
        assert bytes(got) == data
