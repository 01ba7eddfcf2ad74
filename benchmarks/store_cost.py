"""What keeping loop state in a store costs: ``python -m benchmarks.store_cost [--size smoke|full]``.

Three measurements, printed as tables:

- cost per judged call of each store: ``AgentLoop.begin`` + ``finish`` through MemoryStore,
  SqliteStore (a file in a temporary folder, WAL; once with a key of no guard's, as an HTTP
  guard's sessions are, and once with the key claimed, as a stdio guard holds its agent's:
  every event then goes to the key's live file) and RedisStore (a redis-server of its own on
  loopback), on the same mixed calls, taken in turns so the machine's drift hits all alike;
  median and p90 in microseconds, and each store's part above memory's;
- the serialized state of one agent (bytes of ``State.dumps()``) after 10, 1,000 and 100,000
  mixed calls, and the largest it was on the way;
- shutdown latency: from stdin EOF, SIGTERM or SIGINT to the guard and its upstream both gone
  (see ``benchmarks/shutdown_latency.py``).

``--profile sqlite|redis`` prints where one store's calls spend their time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from benchmarks.processes import free_port
from benchmarks.shutdown_latency import HOWS, measure_shutdown
from benchmarks.stats import percentile
from mcp_loop_guard.core.detector import Call, LoopDetector, Outcome, call_of, outcome_of
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.store import AgentLoop, MemoryStore, Owner, SqliteStore, Store, StoreHealth

TTL = 1800.0
HELD = "sqlite-held"
"""SQLite with the agent's key claimed, as a stdio guard holds it: every event goes to its live file."""
TARGETS_US = {"sqlite": 50.0, "redis": 200.0}
"""The issue's ceilings for what a store adds per call, above memory's."""
SIZE_CHECKPOINTS = (10, 1_000, 100_000)
STATE_LIMIT = 1024
BATCH_WIDTHS = (8, 32)
"""Parallel calls in one model response: the state holds each one's fingerprint until the batch settles."""


@dataclass(frozen=True)
class Size:
    """How much each measurement does."""

    calls: int
    """Timed calls per store."""
    warmup: int
    state_calls: int
    shutdown_runs: int


SIZES = {
    "full": Size(calls=20_000, warmup=500, state_calls=100_000, shutdown_runs=5),
    "smoke": Size(calls=300, warmup=50, state_calls=1_000, shutdown_runs=1),
}


# --- the workload ----------------------------------------------------------------------------


def _text(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


DESTRUCTIVE = {"destructiveHint": True, "readOnlyHint": False}


def mixed_step(i: int) -> list[tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any]]]:
    """The calls of step ``i`` (several when they form a batch): tool, arguments, annotations, result.

    A repeating pattern of 100 steps: polling with changing results, distinct reads, a batch of
    three, side effects to many targets, a failing tool, and loops that get warned and refused.
    """
    phase = i % 100
    if phase < 35:
        return [("job_status", {"job": "build"}, None, _text(f"running {i // 7}"))]
    if phase < 70:
        return [("read_file", {"path": f"src/module_{i}.py"}, None, _text(f"contents {i}"))]
    if phase < 73:
        return [("search", {"q": f"{i}-{k}"}, None, _text("hits")) for k in range(3)]
    if phase < 80:
        return [("send_message", {"to": f"user{i % 23}@example.com"}, DESTRUCTIVE, _text("sent"))]
    if phase < 85:
        return [("deploy", {"env": f"stage-{i % 5}"}, None, _text("permission denied", error=True))]
    return [("list_dir", {"path": "."}, None, _text("a b c"))]


def prepared(count: int, policy: Policy) -> list[list[tuple[Call, Outcome]]]:
    """The workload with fingerprints computed ahead, so only the store path is timed."""
    steps: list[list[tuple[Call, Outcome]]] = []
    calls = 0
    while calls < count:
        step = [
            (call_of(tool, args, notes), outcome_of(result, policy))
            for tool, args, notes, result in mixed_step(len(steps))
        ]
        steps.append(step)
        calls += len(step)
    return steps


# --- cost per call ---------------------------------------------------------------------------


@contextmanager
def redis_server(directory: Path) -> Iterator[str | None]:
    """A redis-server of our own on a free loopback port; None when none is installed."""
    binary = shutil.which("redis-server") or shutil.which("valkey-server")
    if binary is None:
        yield None
        return
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*argv, "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()
        process.wait(10)


async def _judge(loop: AgentLoop, step: list[tuple[Call, Outcome]], policy: Policy) -> float:
    """One step through the store: every call begun, then every one finished; seconds per call."""
    started = time.perf_counter()
    now = time.time()
    tickets = [(await loop.begin(call, policy, now))[0] for call, _ in step]
    for ticket, (_, outcome) in zip(tickets, step, strict=True):
        if ticket is not None:
            await loop.finish(ticket, outcome, now)
    return (time.perf_counter() - started) / len(step)


async def measure_cost(stores: dict[str, Store], size: Size) -> dict[str, list[float]]:
    """Seconds per judged call for each store, the stores taken in turns (A B C, C B A, ...)."""
    policy = Policy()
    steps = prepared(size.calls + size.warmup, policy)
    loops = {
        name: AgentLoop(store, f"bench:{name}", policy, ttl=TTL, health=StoreHealth(store.name))
        for name, store in stores.items()
    }
    samples: dict[str, list[float]] = {name: [] for name in stores}
    order = list(loops)
    chunk = 50
    for start in range(0, len(steps), chunk):
        for name in order:
            for index in range(start, min(start + chunk, len(steps))):
                took = await _judge(loops[name], steps[index], policy)
                if index >= size.warmup:
                    samples[name].append(took)
        order.reverse()
    for name, loop in loops.items():
        assert not loop.health.degraded, f"{name}: {loop.health.error}"
    return samples


def pure_detector_cost(size: Size) -> list[float]:
    """The detector alone on the same calls (no store, no serialization): the floor under every store."""
    from mcp_loop_guard.core import detector
    from mcp_loop_guard.core.state import State

    policy = Policy()
    state = State()
    samples: list[float] = []
    for step in prepared(size.calls, policy):
        started = time.perf_counter()
        now = time.time()
        tickets = [detector.begin(state, call, policy, policy, now)[0] for call, _ in step]
        for ticket, (_, outcome) in zip(tickets, step, strict=True):
            if ticket is not None:
                detector.finish(state, ticket, outcome, policy, now)
        samples.append((time.perf_counter() - started) / len(step))
    return samples


async def cost_run(
    directory: Path, redis_url: str | None, size: Size, only: str | None = None
) -> dict[str, list[float]]:
    """Memory, SQLite (WAL, in ``directory``) and, when there is a server, Redis: opened, measured, closed."""
    stores: dict[str, Store] = {"memory": MemoryStore(), "sqlite": SqliteStore(directory / "state.sqlite3")}
    held = SqliteStore(directory / "held.sqlite3")  # a stdio guard's own agent: its key claimed, a live file
    await held.claim(f"bench:{HELD}", Owner.this_process(lease=0), TTL)
    stores[HELD] = held
    if redis_url is not None:
        from mcp_loop_guard.store.redis import RedisStore

        stores["redis"] = RedisStore(redis_url, timeout=1.0)
    try:
        return await measure_cost({name: store for name, store in stores.items() if only in (None, name)}, size)
    finally:
        for store in stores.values():
            await store.aclose()


# --- state size ------------------------------------------------------------------------------


def state_sizes(calls: int) -> tuple[dict[int, int], int]:
    """Bytes of ``State.dumps()`` at each checkpoint up to ``calls``, and the largest seen on the way."""
    detector = LoopDetector(Policy())
    sizes: dict[int, int] = {}
    largest = 0
    done = 0
    i = 0
    while done < calls:
        now = float(i)  # one simulated second per step: request windows come and go
        step = mixed_step(i)
        tickets = [detector.begin(tool, args, now, annotations=notes)[0] for tool, args, notes, _ in step]
        for ticket, (_, _, _, result) in zip(tickets, step, strict=True):
            if ticket is not None:
                detector.finish(ticket, result, now)
            done += 1
            size = len(detector.state.dumps().encode())
            largest = max(largest, size)
            if done in SIZE_CHECKPOINTS:
                sizes[done] = size
        i += 1
    return sizes, largest


def batch_peak(width: int) -> int:
    """The largest ``State.dumps()`` while one model response's ``width`` distinct parallel calls complete."""
    detector = LoopDetector(Policy())
    tickets = [detector.begin("read_file", {"path": f"src/{k}.py"}, 0.0)[0] for k in range(width)]
    largest = len(detector.state.dumps().encode())
    for k, ticket in enumerate(tickets):
        if ticket is not None:
            detector.finish(ticket, _text(f"contents {k}"), 0.0)
        largest = max(largest, len(detector.state.dumps().encode()))
    return largest


# --- report ----------------------------------------------------------------------------------


def _us(samples: list[float], q: float) -> float:
    return percentile(sorted(samples), q) * 1e6


def cost_table(samples: dict[str, list[float]], floor: list[float]) -> Table:
    """Median and p90 per store, and what each adds above memory's median and p90."""
    table = Table(title="cost per judged call (AgentLoop.begin + finish)", title_justify="left")
    for header in ("store", "samples", "median µs", "p90 µs", "added median µs", "added p90 µs", "target", "met"):
        table.add_column(header, justify="left" if header in {"store", "target", "met"} else "right")
    base50, base90 = _us(samples["memory"], 0.5), _us(samples["memory"], 0.9)
    table.add_row("detector alone", f"{len(floor):,}", f"{_us(floor, 0.5):.1f}", f"{_us(floor, 0.9):.1f}", "", "",
                  "", "")  # fmt: skip
    for name, found in samples.items():
        p50, p90 = _us(found, 0.5), _us(found, 0.9)
        target = TARGETS_US.get(name)
        added = "" if name == "memory" else f"{p50 - base50:.1f}"
        met = "" if target is None else ("met" if p50 - base50 <= target else "missed")
        table.add_row(
            name,
            f"{len(found):,}",
            f"{p50:.1f}",
            f"{p90:.1f}",
            added,
            "" if name == "memory" else f"{p90 - base90:.1f}",
            "" if target is None else f"≤ {target:.0f} µs added",
            met,
        )
    return table


def size_table(sizes: dict[int, int], largest: int) -> Table:
    """Bytes of one agent's serialized state as the calls add up."""
    table = Table(title="serialized state of one agent (State.dumps())", title_justify="left")
    for header in ("after calls", "bytes", f"under {STATE_LIMIT}"):
        table.add_column(header, justify="right")
    for calls, size in sorted(sizes.items()):
        table.add_row(f"{calls:,}", f"{size:,}", "yes" if size < STATE_LIMIT else "NO")
    table.add_row("largest on the way", f"{largest:,}", "yes" if largest < STATE_LIMIT else "NO")
    for width in BATCH_WIDTHS:
        peak = batch_peak(width)
        table.add_row(f"{width} parallel calls, at most", f"{peak:,}", "yes" if peak < STATE_LIMIT else "NO")
    return table


def shutdown_table(results: dict[tuple[str, str, str], list[float]]) -> Table:
    """Median and worst time from the stop to every process gone, per upstream, path and way of stopping."""
    table = Table(title="shutdown: stop to guard and upstream both gone", title_justify="left")
    for header in ("upstream", "via", *(f"{how} median ms" for how in HOWS), "worst ms", "runs"):
        table.add_column(header, justify="left" if header in {"upstream", "via"} else "right")
    for upstream, via in dict.fromkeys((u, v) for u, v, _ in results):
        runs = [results.get((upstream, via, how), []) for how in HOWS]
        medians = [f"{percentile(sorted(times), 0.5) * 1000:.0f}" if times else "—" for times in runs]
        worst = max(max(times) for times in runs if times) * 1000
        table.add_row(upstream, via, *medians, f"{worst:.0f}", str(max(len(times) for times in runs)))
    return table


def profile(store_name: str, size: Size, console: Console) -> None:
    """cProfile over one store's calls: the functions where they spend their time."""
    with tempfile.TemporaryDirectory(prefix="mcp-loop-guard-store-") as folder, redis_server(Path(folder)) as url:
        profiler = cProfile.Profile()
        profiler.enable()
        anyio.run(cost_run, Path(folder), url, size, store_name)
        profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(25)
    console.print(f"(cProfile of {size.calls + size.warmup:,} calls through {store_name}; times include its overhead)")


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print their tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.store_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--only", action="append", choices=["cost", "size", "shutdown"], help="repeatable")
    parser.add_argument("--profile", choices=["memory", "sqlite", "redis"], help="profile one store's calls instead")
    args = parser.parse_args(argv)
    size = SIZES[args.size]
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    if args.profile:
        profile(args.profile, size, console)
        return 0
    wanted = set(args.only or ["cost", "size", "shutdown"])
    if "cost" in wanted:
        with tempfile.TemporaryDirectory(prefix="mcp-loop-guard-store-") as folder, redis_server(Path(folder)) as url:
            samples = anyio.run(cost_run, Path(folder), url, size)
            console.print(cost_table(samples, pure_detector_cost(size)))
            if url is None:
                console.print("[dim]redis: skipped, no redis-server or valkey-server on PATH[/]")
    if "size" in wanted:
        console.print(size_table(*state_sizes(max(c for c in SIZE_CHECKPOINTS if c <= size.state_calls))))
    if "shutdown" in wanted:
        console.print(shutdown_table(measure_shutdown(size.shutdown_runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
