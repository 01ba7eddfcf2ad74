"""Scenario 4a: the loop detector's state per session, measured as its calls add up.

The detector lives as long as the session, so its state must not grow with the
number of calls. The size is the object graph reachable from the detector
(``sys.getsizeof`` over ``gc.get_referents``, as the unit tests measure it),
without classes and the shared policy. The calls mix the shapes real sessions
have: polling with changing results, distinct calls, batches, and loops that
get warned, refused and reset.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.results import Row
from mcp_loop_guard.core.detector import LoopDetector
from mcp_loop_guard.core.model import Action
from mcp_loop_guard.core.policy import Policy

SCENARIO = "memory"
CASE = "detector state per session"


def graph_size(root: object) -> int:
    """Bytes of ``root`` and everything it references, classes and the policy excluded."""
    seen: set[int] = set()
    todo = [root]
    total = 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, type | Policy):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _step(detector: LoopDetector, i: int, now: float) -> None:
    """One call out of a repeating pattern of 100: polling, distinct reads, a batch, a loop."""
    phase = i % 100
    if phase < 40:  # polling a status that changes every few calls
        ticket, _ = detector.begin("status", {"job": "build"}, now)
        if ticket is not None:
            detector.finish(ticket, _text(f"running {i // 7}"), now)
    elif phase < 80:  # distinct calls
        ticket, _ = detector.begin("read_file", {"path": f"src/{i}.py"}, now)
        if ticket is not None:
            detector.finish(ticket, _text(f"contents {i}"), now)
    elif phase < 84:  # a batch of three overlapping calls
        tickets = [detector.begin("search", {"q": f"{i}-{k}"}, now)[0] for k in range(3)]
        for ticket in tickets:
            if ticket is not None:
                detector.finish(ticket, _text("hits"), now)
    else:  # a loop: identical calls and results until warned, refused, aborted
        ticket, verdict = detector.begin("list_dir", {"path": "."}, now)
        if ticket is not None:
            detector.finish(ticket, _text("a b c"), now)
        elif verdict.action is Action.ABORT:
            pass  # the proxy would end the session here; the pattern just carries on


def measure(calls: int, checkpoints: Sequence[int], advance: Callable[[int], None]) -> list[Row]:
    """Detector size at each checkpoint (a call count), with the time per call so far."""
    detector = LoopDetector(Policy())
    rows = [Row(SCENARIO, CASE, "0 calls", {"calls": 0, "bytes": graph_size(detector)})]
    done = 0
    started = time.perf_counter()
    step = max(1, calls // 100)
    for checkpoint in sorted(c for c in checkpoints if c <= calls):
        while done < checkpoint:
            _step(detector, done, float(done))  # one simulated second per call: request windows reset
            done += 1
            if done % step == 0:
                advance(step)
        elapsed = time.perf_counter() - started
        values: dict[str, float | int | str] = {
            "calls": done,
            "bytes": graph_size(detector),
            "us_per_call": elapsed / done * 1e6,
        }
        rows.append(Row(SCENARIO, CASE, f"{done:,} calls", values))
    return rows
