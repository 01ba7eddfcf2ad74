"""The cheapest stdio proxy measured here: copy bytes both ways, parse nothing.

``python benchmarks/relay_floor.py COMMAND [ARG...]`` starts COMMAND and relays our stdin
to its stdin and its stdout to our stdout. Each read runs in the event loop's own reader
callback and writes at once: no task is woken per read (waking a task per read cost about
twice the CPU here, and a relay on anyio tasks three times as much). Any proxy process pays
at least this: an extra process, two more pipe writes and the wake-ups they cause, per call.
Its ratio to direct is the floor under the guard's; what the guard adds above it is
protocol work, and the way it waits.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - the reader callbacks are asyncio's; anyio has none
import os
import subprocess
import sys

_CHUNK = 1 << 16


def _write_all(fd: int, data: bytes) -> None:
    """Write everything, waiting in the kernel when the pipe is full (rare: the peers read at once)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            os.set_blocking(fd, True)
            try:
                view = view[os.write(fd, view) :]
            finally:
                os.set_blocking(fd, False)


async def relay_until_eof(child: subprocess.Popen[bytes]) -> None:
    """Relay until the client closes stdin, then close the child's stdin and wait for it."""
    loop = asyncio.get_running_loop()
    assert child.stdin is not None
    assert child.stdout is not None
    to_child, from_child = child.stdin.fileno(), child.stdout.fileno()
    for fd in (0, 1, to_child, from_child):
        os.set_blocking(fd, False)
    client_gone = loop.create_future()

    def relay(source: int, target: int) -> None:
        try:
            chunk = os.read(source, _CHUNK)
        except BlockingIOError:
            return
        if not chunk:
            loop.remove_reader(source)
            if source == 0 and not client_gone.done():
                client_gone.set_result(None)
            return
        try:
            _write_all(target, chunk)
        except BrokenPipeError:
            loop.remove_reader(source)

    loop.add_reader(0, relay, 0, to_child)
    loop.add_reader(from_child, relay, from_child, 1)
    await client_gone
    child.stdin.close()
    await loop.run_in_executor(None, child.wait)


def main(command: list[str]) -> None:
    """Start the command, then relay."""
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    asyncio.run(relay_until_eof(child))


if __name__ == "__main__":
    main(sys.argv[1:])
