"""What the guard's per-call steps cost on cold caches: ``python -m benchmarks.cold_cost [--size smoke|full]``.

A guard sleeps in ``epoll_wait`` between the two messages of every call while the client
and the server run; when it wakes, their work has taken the caches. A step timed in a warm
loop says little about its cost there. Each step is timed here three ways, as the thread's
own CPU time (``time.thread_time_ns``), median of many runs:

- warm: run again and again;
- after a sleep: each run follows a 0.5 ms sleep (what the guard's wake-ups look like);
- after other memory: each run follows touching 16 MB (what another process's work does).

The steps are the guard's own (a call's fingerprint, a result's, the canonical encoder)
beside the building blocks they choose between (OpenSSL's SHA-256, the standard library's
C JSON encoder, orjson), and an empty function for the floor of the timing itself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from mcp_loop_guard.core._canonical import encode
from mcp_loop_guard.core.detector import call_of, outcome_of
from mcp_loop_guard.core.policy import Policy

SIZES = {"smoke": 50, "full": 3000}
"""Runs per step and way."""
SLEEP = 0.0005
EVICT_BYTES = 16 << 20

_RESULT = {"content": [{"type": "text", "text": "Echo: hello 123"}]}
_ARGUMENTS = {"message": "hello 1", "options": {"loud": True, "times": 2}}
_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"))
_POLICY = Policy()

STEPS: dict[str, Callable[[int], Any]] = {
    "call fingerprint (call_of)": lambda i: call_of("echo", {"message": f"hello {i}"}, None, trusted=False),
    "result fingerprint (outcome_of)": lambda i: outcome_of(_RESULT, _POLICY),
    "canonical JSON of arguments": lambda i: encode(_ARGUMENTS, drop_meta=False),
    "json.JSONEncoder, sorted": lambda i: _JSON.encode(_ARGUMENTS),
    "orjson.dumps, sorted": lambda i: orjson.dumps(_ARGUMENTS, option=orjson.OPT_SORT_KEYS),
    "hashlib.sha256 + hexdigest": lambda i: hashlib.sha256(b"%d" % i).hexdigest(),
    "empty function": lambda i: None,
}


def _median_us(step: Callable[[int], Any], runs: int, before: Callable[[], None] | None) -> float:
    samples = []
    for i in range(runs):
        if before is not None:
            before()
        started = time.thread_time_ns()
        step(i)
        samples.append(time.thread_time_ns() - started)
    return statistics.median(samples) / 1000


def measure(runs: int) -> dict[str, tuple[float, float, float]]:
    """(warm, after a sleep, after other memory) in µs for each step."""
    other = bytearray(EVICT_BYTES)
    ones = b"\x01" * (EVICT_BYTES // 64)

    def evict() -> None:
        other[::64] = ones

    def sleep() -> None:
        time.sleep(SLEEP)

    return {
        name: (_median_us(step, runs, None), _median_us(step, runs, sleep), _median_us(step, runs, evict))
        for name, step in STEPS.items()
    }


def main(argv: list[str] | None = None) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cold_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    args = parser.parse_args(argv)
    table = Table(title="CPU µs per step, median (thread time)")
    for column in ("step", "warm", "after 0.5 ms sleep", "after 16 MB touched", "sleep ÷ warm"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for name, (warm, slept, evicted) in measure(SIZES[args.size]).items():
        table.add_row(name, f"{warm:.1f}", f"{slept:.1f}", f"{evicted:.1f}", f"{slept / warm:.1f}x")
    Console(width=110).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
