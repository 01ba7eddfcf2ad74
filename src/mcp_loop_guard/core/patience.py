"""Patience: when a repeated call is the agent waiting on purpose rather than looping.

The time before a call is mostly the model's own thinking, and models think for anything from
a second to over a minute. A wall-clock gap alone therefore says nothing: a slow model that
repeats a call every minute is looping as surely as a fast one repeating it every second.
What shows intent is evidence relative to the agent itself, or in what it calls:

- the tool is configured as pollable (``pollable``), or the call itself waits (a ``wait`` tool,
  a ``sleep`` command): see :mod:`mcp_loop_guard.core.intent`;
- a gap far longer than the agent's own rhythm: ten times its median gap between calls, and a minute more;
- retries of a failure whose gaps grow, each wait at least half as long again as the one before,
  over what the agent takes to think, and by more than its thinking time varies by itself (a backoff).

A patient repeat is held: it neither lengthens nor breaks the streak it continues, so a poll
that waits is never refused for its waiting, and a loop that stops waiting goes on where it was.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Final

from mcp_loop_guard.core.state import MAX_PACE, Entry, State

__all__ = ["LONG_FACTOR", "LONG_MIN_SECONDS", "backing_off", "long_gap", "note_gap"]

LONG_FACTOR: Final = 10.0
"""A gap this many times the agent's median gap is a deliberate wait..."""
LONG_MIN_SECONDS: Final = 60.0
"""...when it is also this much longer than the median: a slow thought, or a user's reply, is not one."""
RHYTHM_CALLS: Final = 3
"""Gaps needed before the agent's rhythm is known."""
GROWTH: Final = 1.5
"""Each backoff wait is at least this many times the one before (over the agent's thinking time)..."""
GROWTH_MIN_SECONDS: Final = 0.5
"""...and at least this much longer,"""
JITTER_FACTOR: Final = 3.0
"""...and longer by more than this many times the agent's own jitter (its thinking time varies by itself)."""


def note_gap(state: State, gap: float) -> None:
    """Remember one idle gap before a call, for the agent's rhythm (after the call is judged)."""
    if gap > 0:
        state.pace.append(round(gap, 3))
        del state.pace[:-MAX_PACE]


def long_gap(state: State, gap: float) -> bool:
    """The gap is far longer than this agent's usual gap between calls (its rhythm, known after a few calls).

    Judged before the gap joins the rhythm.
    """
    if len(state.pace) < RHYTHM_CALLS:
        return False
    usual = _median(state.pace)
    return gap >= LONG_FACTOR * usual and gap - usual >= LONG_MIN_SECONDS


def backing_off(state: State, call: str, gap: float) -> bool:
    """The call retries a failure, and every retry of the run so far waited longer than the last.

    Waits are measured over the agent's thinking time: its quickest gap, before the run or in it.
    """
    run = _run(state.history, call)
    if not run or not run[-1].error:
        return False  # one backs off from a failure; a success repeated more slowly is no retry
    gaps = [entry.gap for entry in run[1:]] + [gap]
    if len(gaps) < 2 or any(g <= 0 for g in gaps):
        return False
    retries = len(gaps) - 1  # gaps already in the pace (this one is noted after it is judged)
    before = state.pace[: len(state.pace) - retries]
    base = min(before + gaps)
    step = max(GROWTH_MIN_SECONDS, JITTER_FACTOR * _jitter(before))
    waits = [max(0.0, g - base) for g in gaps]
    return all(later >= GROWTH * earlier and later - earlier >= step for earlier, later in pairwise(waits))


def _median(values: list[float]) -> float:
    """The middle of ``values`` (not empty), as :func:`statistics.median` gives it, without importing that
    module (and ``fractions``) into every guard."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


def _jitter(gaps: list[float]) -> float:
    """How much the agent's thinking time varies by itself: the mean distance of its gaps from their median
    (a mean, not a median, so that one change of pace among few gaps still counts)."""
    if len(gaps) < RHYTHM_CALLS:
        return 0.0
    middle = _median(gaps)
    return sum(abs(gap - middle) for gap in gaps) / len(gaps)


def _run(history: list[Entry], call: str) -> list[Entry]:
    """The trailing entries of the history that are this call with one result, oldest first."""
    run: list[Entry] = []
    for entry in reversed(history):
        if entry.call != call or (run and entry.result != run[-1].result):
            break
        run.append(entry)
    run.reverse()
    return run
