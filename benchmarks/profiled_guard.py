"""Run the guard under cProfile, switched on and off by signals from the benchmark.

``python benchmarks/profiled_guard.py STATS_FILE -- COMMAND...`` runs
``mcp-loop-guard -- COMMAND...`` unchanged; SIGUSR1 starts profiling and SIGUSR2
stops it and writes the stats. So start-up and warm-up stay out of the profile,
and the guard's code needs no hook of its own. The clock is cProfile's default
(wall time, cheap to read): a CPU-time clock costs a system call per function
event and inflated the profile threefold. Time spent waiting in epoll is idle
and is left out of the totals by the summary.
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
from types import FrameType

from mcp_loop_guard.cli import main


def run(argv: list[str]) -> int:
    """Install the signal handlers, then hand over to the guard's own entry point."""
    stats_file, *guard_argv = argv
    profiler = cProfile.Profile()

    def start(signum: int, frame: FrameType | None) -> None:
        profiler.enable()

    def stop(signum: int, frame: FrameType | None) -> None:
        profiler.disable()
        profiler.dump_stats(stats_file + ".part")
        os.replace(stats_file + ".part", stats_file)  # appears whole, or not at all

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return main(guard_argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
