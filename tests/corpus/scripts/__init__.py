"""The scripted agents; importing this package registers every trace."""

from tests.corpus.scripts import (
    loops_bursts_cycles,
    loops_errors,
    loops_repeat,
    loops_side_mixed,
    productive_coding,
    productive_parallel,
    productive_polling,
)

__all__ = [
    "loops_bursts_cycles",
    "loops_errors",
    "loops_repeat",
    "loops_side_mixed",
    "productive_coding",
    "productive_parallel",
    "productive_polling",
]
