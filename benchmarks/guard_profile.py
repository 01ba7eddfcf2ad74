"""Where the guard's time goes on the stdio path, per forwarded call.

A separate guard process runs under cProfile (see profiled_guard.py) while the
client makes calls (small echoes, large results); the stats are then divided by the number of calls.
cProfile's own overhead inflates every Python function call, so the absolute
microseconds are higher than in an unprofiled run (compare the stdio table's
own-CPU column): read the shares, and the call counts, which are exact.
"""

from __future__ import annotations

import os
import pstats
import re
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio

from benchmarks.processes import BENCH_DIR, BenchmarkError, GuardBuild, Via
from benchmarks.stdio_rtt import Case, call, connect

_SITE = re.compile(r"site-packages/([A-Za-z0-9_]+)")
_STDLIB = re.compile(r"python3\.\d+/(?:([A-Za-z0-9_]+)/|([A-Za-z0-9_]+)\.py)")
_OURS = re.compile(r"/mcp_loop_guard/(?:([a-z_]+)/)?")

Key = tuple[str, int, str]


IDLE = "idle: waiting in epoll"
_BUILTINS = (
    ("select.epoll", IDLE),
    ("pydantic_core", "pydantic_core (validation and serialization, C)"),
    ("posix.write", "os.read/os.write on the pipes"),
    ("posix.read", "os.read/os.write on the pipes"),
)


def _component(key: Key) -> str:
    """The library a profiled function belongs to, for the per-component totals."""
    filename, _, name = key
    if filename == "~":
        return next((label for marker, label in _BUILTINS if marker in name), "other C builtins")
    if match := _OURS.search(filename):
        return "mcp_loop_guard." + (match.group(1) or "(top)")
    if match := _SITE.search(filename) or _STDLIB.search(filename):
        prefix = "" if match.re is _SITE else "stdlib "
        return prefix + next(group for group in match.groups() if group)
    return filename


def _label(key: Key) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    short = re.sub(r".*/(site-packages|python3\.\d+|src)/", "", filename)
    return f"{short}:{line} {name}"


def summarize(stats_file: Path, calls: int, top: int = 15) -> dict[str, Any]:
    """Per-call microseconds (idle waits left out) and call counts, by component and by function."""
    stats: dict[Key, Any] = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    components: dict[str, float] = {}
    total = 0.0
    busy = {key: entry for key, entry in stats.items() if _component(key) != IDLE}
    for key, (_, _, tottime, _, _) in busy.items():
        total += tottime
        components[_component(key)] = components.get(_component(key), 0.0) + tottime
    functions = sorted(busy.items(), key=lambda item: item[1][2], reverse=True)[:top]
    return {
        "calls": calls,
        "busy_us_per_call": total / calls * 1e6,
        "by_component": [
            {"component": name, "us_per_call": seconds / calls * 1e6, "share": seconds / total}
            for name, seconds in sorted(components.items(), key=lambda item: item[1], reverse=True)
        ],
        "top_functions": [
            {
                "function": _label(key),
                "us_per_call": tottime / calls * 1e6,
                "calls_per_call": ncalls / calls,
                "share": tottime / total,
            }
            for key, (_, ncalls, tottime, _, _) in functions
        ],
    }


async def profile(
    build: GuardBuild,
    upstream: Sequence[str],
    case: Case,
    *,
    stats_file: Path,
    errlog: TextIO,
    advance: Callable[[int], None],
) -> dict[str, Any]:
    """Profile ``case.calls`` calls through ``build`` in front of ``upstream``, after ``case.warmup``.

    The raw stats stay in ``stats_file`` (for ``python -m pstats`` or snakeviz).

    Raises:
        BenchmarkError: the guard did not write its stats.
    """
    stats = anyio.Path(stats_file)
    await stats.unlink(missing_ok=True)
    argv = [sys.executable, str(BENCH_DIR / "profiled_guard.py"), str(stats_file), "--", *upstream]
    via = Via(build.label, argv, build.env)
    async with connect(via, errlog) as connection:
        if connection.process is None:
            raise BenchmarkError("cannot find the profiled guard's process")
        for i in range(case.warmup):
            await call(connection.session, case.tool, case.arguments(i))
        os.kill(connection.process.pid, signal.SIGUSR1)
        for i in range(case.warmup, case.warmup + case.calls):
            await call(connection.session, case.tool, case.arguments(i))
            advance(1)
        os.kill(connection.process.pid, signal.SIGUSR2)
        with anyio.fail_after(30):
            while not await stats.exists():  # noqa: ASYNC110 - another process writes it; nothing to wait on
                await anyio.sleep(0.05)
    summary = summarize(stats_file, case.calls)
    summary["guard"] = build.label
    summary["case"] = case.name
    summary["stats_file"] = str(stats_file)
    return summary
