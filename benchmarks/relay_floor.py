"""The cheapest possible stdio proxy: copy bytes both ways, parse nothing.

``python benchmarks/relay_floor.py COMMAND [ARG...]`` starts COMMAND and relays
our stdin to its stdin and its stdout to our stdout, on one event loop with
non-blocking pipes (no thread hops). Any proxy process pays at least this: an
extra process, two more pipe writes and the wake-ups they cause, per call. Its
ratio to direct is the floor under the guard's; what the guard adds above it is
protocol work.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import anyio.abc

_CHUNK = 1 << 16


async def _read(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, _CHUNK)
        except BlockingIOError:
            await anyio.wait_readable(fd)


async def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)


async def main(command: list[str]) -> None:
    """Relay until the client closes stdin, then close the child's stdin and wait for it."""
    for fd in (0, 1):
        os.set_blocking(fd, False)
    async with await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        stdin, stdout = child.stdin, child.stdout

        async def upstream_to_client() -> None:
            async for chunk in stdout:
                await _write(1, chunk)

        async with anyio.create_task_group() as tg:
            tg.start_soon(upstream_to_client)
            while chunk := await _read(0):
                await stdin.send(chunk)
            await stdin.aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
