"""Instructions a proxy process runs per small call, by valgrind: ``python -m benchmarks.process_instructions``.

``benchmarks.instructions`` counts the judged path in one process without the event loop.
This counts everything a proxy process runs for a call as a client makes it: its event
loop, the reads and writes on both pipes, parsing, routing and (for the guard) judging.
Each target (the byte relay, the guard with judging off, the guard) runs under
``valgrind --tool=cachegrind --cache-sim=no`` in front of the fixture server, which runs
natively (valgrind does not follow children). A client of our own speaks JSON-RPC lines to
it: ``initialize``, then FEW ``echo`` calls in one run and MANY in another, each with its own
text so none is warned; the difference per call leaves start-up and shutdown out. Every
answer must be the text sent, unchanged, or the count is not of the path it claims. The
count is not exact, as the in-process one is: how often a process wakes depends on timing
(runs agree within about 1% at full size).
Set against the CPU a call costs (``benchmarks.run``), it says how many instructions a
millisecond buys here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import anyio
from anyio.abc import Process
from rich.console import Console
from rich.table import Table

SIZES = {"smoke": (10, 210), "full": (400, 1200)}
"""Calls in the two counted runs of each target."""
_BENCHMARKS = Path(__file__).resolve().parent
_FIXTURE = [sys.executable, str(_BENCHMARKS / "fixture_server.py")]
TARGETS = {
    "byte relay": [sys.executable, str(_BENCHMARKS / "relay_floor.py")],
    "guard, judging off": [sys.executable, str(_BENCHMARKS / "unjudged_guard.py"), "--"],
    "mcp-loop-guard": [sys.executable, "-m", "mcp_loop_guard", "--"],
}
RUN_SECONDS = 900.0
"""How long one counted run may take under valgrind (start-up alone takes tens of seconds)."""


class WrongAnswerError(RuntimeError):
    """A call was not answered with its own text, unchanged: the count would be of another path."""


async def _exchange(process: Process, lines: bytearray, message: dict[str, object]) -> dict[str, object] | None:
    """Send one message; for a request, read lines until its answer and return it."""
    assert process.stdin is not None
    assert process.stdout is not None
    await process.stdin.send(json.dumps(message).encode() + b"\n")
    if "id" not in message:
        return None
    while True:
        while b"\n" not in lines:
            lines += await process.stdout.receive()
        line, _, rest = bytes(lines).partition(b"\n")
        lines[:] = rest
        answer = json.loads(line)
        if answer.get("id") == message["id"]:
            return dict(answer)


async def _count(target: list[str], calls: int, valgrind: str) -> int:
    """Instructions the target process executed in a run with ``calls`` echo calls."""
    with tempfile.TemporaryDirectory(prefix="mcp-loop-guard-process-instructions-") as directory:
        out, log = Path(directory) / "cachegrind.out", Path(directory) / "stderr.log"
        command = [valgrind, "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", *target, *_FIXTURE]
        env = {**os.environ, "LOOP_GUARD_STATE": f"sqlite:///{directory}/state.db"}
        with anyio.fail_after(RUN_SECONDS), log.open("wb") as stderr:
            async with await anyio.open_process(command, env=env, stderr=stderr) as process:
                lines = bytearray()
                hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "count"}}
                await _exchange(process, lines, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
                await _exchange(process, lines, {"jsonrpc": "2.0", "method": "notifications/initialized"})
                for ident in range(1, calls + 1):
                    params = {"name": "echo", "arguments": {"text": f"call {ident}"}}
                    request = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}
                    answer = await _exchange(process, lines, request)
                    result = answer.get("result") if answer else None
                    sent = [{"type": "text", "text": f"call {ident}"}]
                    if not isinstance(result, dict) or result.get("content") != sent:
                        raise WrongAnswerError(f"{target[-2:]}: call {ident} was answered {answer}")
                assert process.stdin is not None
                await process.stdin.aclose()
                await process.wait()
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
        raise RuntimeError(f"valgrind wrote no summary for {target}:\n{log.read_text(errors='replace')[-3000:]}")


async def per_call(target: list[str], size: str, valgrind: str) -> float:
    """Instructions per call: the two runs counted side by side, their difference per call."""
    few, many = SIZES[size]
    counts: dict[int, int] = {}

    async def count(calls: int) -> None:
        counts[calls] = await _count(target, calls, valgrind)

    async with anyio.create_task_group() as tg:
        for calls in (few, many):
            tg.start_soon(count, calls)
    return (counts[many] - counts[few]) / (many - few)


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.process_instructions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--only", action="append", choices=sorted(TARGETS), help="count only these targets")
    args = parser.parse_args(argv)
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("error: valgrind is needed to count instructions (apt-get install valgrind)", file=sys.stderr)
        return 2
    few, many = SIZES[args.size]
    table = Table(title=f"Instructions per small call, whole process ({many} minus {few} calls, valgrind cachegrind)")
    table.add_column("process")
    table.add_column("instructions per call", justify="right")
    for name in args.only or TARGETS:
        table.add_row(name, f"{anyio.run(per_call, TARGETS[name], args.size, valgrind):,.0f}")
    Console(width=110).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
