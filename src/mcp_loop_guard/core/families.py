"""The loop families: when a call must be refused before it runs, and when its result earns a warning.

Refusals are judged at begin, from what the sequence already shows (the call would be the
block-threshold-th repetition of a pattern whose results never changed); warnings at finish,
from the sequence with the call's own result folded in.
"""

from __future__ import annotations

from typing import Final

from mcp_loop_guard.core import wording
from mcp_loop_guard.core.model import Action, Call, Family
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.sequence import (
    answered_news,
    cycle_count,
    echoes,
    failure_of,
    is_cycle,
    mentions,
    recurrences,
)
from mcp_loop_guard.core.state import MAX_EFFECTS, Entry, ErrorStreak, State

__all__ = [
    "Found",
    "Owed",
    "burst_warning",
    "count_effect",
    "effect_warning",
    "forget_effects_of_others",
    "refusal",
    "sequential_warning",
]

Owed = tuple[Family, int, Action, str]
"""A verdict judged at begin and delivered with the result: (family, count, action, reason)."""
Found = tuple[Family, int, tuple[str, ...]]
"""A refusal found at begin: (family, count, the tools of a cycle)."""
PATTERNS: Final = frozenset({Family.IDENTICAL, Family.CYCLE, Family.RECURRING})
"""Families whose refusal stands for the result the call would have repeated."""


def refusal(state: State, call: Call, policy: Policy, copies: int, *, held: bool, seen: int) -> Found | None:
    """(family, count, cycle tools) when this call must be refused, else None.

    A held call (a patient repeat) is not refused for repeating: it does not lengthen the streak.
    ``seen``: the call's unchanged answers among the recent calls (:func:`recurrences`).
    """
    return _repeating(state, call, policy, copies, held=held, seen=seen) or _failing(state, call, policy)


def _repeating(state: State, call: Call, policy: Policy, copies: int, *, held: bool, seen: int) -> Found | None:
    """The call would repeat a pattern whose results never changed: identical, a burst, a cycle, recurring."""
    history, runs = state.history, state.runs
    step = 0 if held else 1
    base = runs[0] + 1 if history and history[-1].call == call.loose else 0
    identical = base + copies + step
    if identical >= policy.block_threshold and (step or copies):
        return (Family.BURST if copies else Family.IDENTICAL), identical, ()
    if held:
        return None
    # a cycle of period p needs a run of p - 1 before this call: with no run at all, no period is looked at
    longest = min(policy.cycle_max_period, len(runs), len(history)) if max(runs[1:], default=0) else 1
    for period in range(2, longest + 1):
        run = runs[period - 1] + 1
        if run >= period and history[-period].call == call.loose and is_cycle(history, period, run):
            count = cycle_count(run, period)
            if count >= policy.block_threshold:
                return Family.CYCLE, count, tuple(entry.tool for entry in history[-period:])
    if policy.recurring_block and seen + 1 >= policy.recurring_block:
        return Family.RECURRING, seen + 1, ()
    return None


def _failing(state: State, call: Call, policy: Policy) -> Found | None:
    """The call would repeat an effect, an error whatever the arguments, or a result whatever the arguments."""
    done_before = state.effects.get(call.key, ("", 0))[1]
    if (
        call.side_effect
        and policy.trust_annotations
        and policy.side_effect_block_threshold
        and done_before + 1 >= policy.side_effect_block_threshold
    ):
        return Family.SIDE_EFFECT, done_before + 1, ()
    history = state.history
    last = history[-1] if history else None
    # refused only when hammered (right after the tool's own failure): a look elsewhere earns one more try
    error = None
    if state.errors and last is not None and last.tool == call.tool:
        error = failure_of(state, call.tool, last.result)
    if error is not None and policy.same_error_block_threshold and not policy.ignore_errors:
        count = error.count + sum(batch.tools.get(call.tool, 0) for batch in state.batches) + 1
        if count >= policy.same_error_block_threshold:
            return Family.SAME_ERROR, count, ()
    same = state.same
    if (
        same is not None
        and same.tool == call.tool
        and same.last_call != call.loose
        and policy.same_result_block_threshold
        and same.distinct + 1 >= policy.same_result_block_threshold
    ):
        return Family.SAME_RESULT, same.distinct + 1, ()
    return None


def _error_warns(error: ErrorStreak, policy: Policy) -> bool:
    """The same error in a row earns a warning at the warn threshold; coming back through the tool's other
    failures (it never worked between), two calls before its refusal, so that none comes unwarned."""
    through = max(policy.same_error_warn_threshold, policy.same_error_block_threshold - 2)
    return error.run >= policy.same_error_warn_threshold or error.count >= through


def sequential_warning(state: State, entry: Entry, policy: Policy) -> tuple[int, Owed | None]:
    """(streak, warning or None) for the call whose result was just folded in."""
    runs = state.runs
    best_count, best_period = 1 + runs[0], 1
    # a cycle of period p needs a run of p: with no run of 2, no period is looked at
    longest = min(policy.cycle_max_period, len(runs)) if max(runs[1:], default=0) >= 2 else 1
    for period in range(2, longest + 1):
        if runs[period - 1] >= period and is_cycle(state.history, period, runs[period - 1]):
            count = cycle_count(runs[period - 1], period)
            if count > best_count:
                best_count, best_period = count, period
    family = Family.IDENTICAL
    cycle: tuple[str, ...] = ()
    if best_period > 1:
        family, cycle = Family.CYCLE, tuple(e.tool for e in state.history[-best_period:])
    warned = _pattern_warning(family, entry.tool, best_count, policy.warn_threshold, policy.block_threshold, cycle)
    if warned is not None:
        return best_count, warned
    warn = policy.recurring_warn
    # a write redone is no news; a call shown fewer times than the threshold cannot have come back that often
    if warn and not entry.held and not (entry.acts and not entry.error) and mentions(state, entry.call) >= warn:
        seen = recurrences(state, entry.call, through_writes=True)[0]
        warned = _pattern_warning(Family.RECURRING, entry.tool, seen, policy.recurring_warn, policy.recurring_block)
        if warned is not None and seen > best_count:
            return best_count, warned
    if (
        policy.same_result_warn_threshold
        and not (entry.error or entry.acts or entry.says_nothing or entry.held)
        and not answered_news(state)  # an answer new to the window has come back once: no echoes to count
        and mentions(state, entry.result, answer=True) >= max(policy.same_result_warn_threshold, 3)
    ):
        answers, calls = echoes(state, entry.result)
        if calls > 2 and answers >= policy.same_result_warn_threshold and answers > best_count:
            text = wording.warning(Family.SAME_RESULT, entry.tool, answers, policy.same_result_block_threshold)
            return best_count, (Family.SAME_RESULT, answers, Action.WARN, text)
    error = failure_of(state, entry.tool, entry.result) if entry.error else None
    if (
        entry.error
        and error is not None
        and policy.same_error_warn_threshold
        and not policy.ignore_errors
        and _error_warns(error, policy)
        and error.count > best_count
    ):
        text = wording.warning(Family.SAME_ERROR, entry.tool, error.count, policy.same_error_block_threshold)
        return best_count, (Family.SAME_ERROR, error.count, Action.WARN, text)
    same = state.same
    if same is not None and policy.same_result_warn_threshold and same.distinct >= policy.same_result_warn_threshold:
        text = wording.warning(Family.SAME_RESULT, entry.tool, same.distinct, policy.same_result_block_threshold)
        return best_count, (Family.SAME_RESULT, same.distinct, Action.WARN, text)
    return best_count, None


def _pattern_warning(  # noqa: PLR0917 - one pattern's count and thresholds
    family: Family, tool: str, count: int, warn: int, block: int, cycle: tuple[str, ...] = ()
) -> Owed | None:
    if not warn or count < warn:
        return None
    if block and count >= block:  # only where refusals are held back (warn, shadow), or a probe let through
        return family, count, Action.WARN, wording.held_back(family, tool, count, cycle)
    return family, count, Action.WARN, wording.warning(family, tool, count, block, cycle)


def burst_warning(state: State, call: Call, policy: Policy, copies: int) -> Owed | None:
    """The warning of a call with identical copies in flight, once they reach the warning threshold."""
    history, runs = state.history, state.runs
    base = runs[0] + 1 if history and history[-1].call == call.loose else 0
    count = base + copies + 1
    if count < policy.warn_threshold:
        return None
    text = wording.warning(Family.BURST, call.tool, count, policy.block_threshold)
    return Family.BURST, count, Action.WARN, text


def effect_warning(state: State, call: Call, policy: Policy) -> Owed | None:
    """Count a side-effect call; its warning once it repeats."""
    warn, block = policy.side_effect_warn_threshold, policy.side_effect_block_threshold
    if not (call.side_effect and policy.trust_annotations and (warn or block)):
        return None
    count = count_effect(state, call.key, call.tool)  # counted even with no warning step: refusals need it
    if not warn or count < warn:
        return None
    text = wording.warning(Family.SIDE_EFFECT, call.tool, count, policy.side_effect_block_threshold)
    return Family.SIDE_EFFECT, count, Action.WARN, text


def count_effect(state: State, key: str, tool: str) -> int:
    """One more side-effect call with this key; returns how many so far."""
    count = state.effects.pop(key, ("", 0))[1] + 1
    state.effects[key] = (tool, count)  # most recent last
    while len(state.effects) > MAX_EFFECTS:
        del state.effects[next(iter(state.effects))]
    return count


def forget_effects_of_others(state: State, tool: str) -> None:
    """A call that may change things, to another tool: repeating an earlier action may be meant now.

    Running the tests again after an edit is not sending the same email twice.
    """
    state.effects = {key: value for key, value in state.effects.items() if value[0] == tool}
