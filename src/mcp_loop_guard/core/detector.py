"""The loop detector: pure functions folding one agent's calls into its :class:`State`.

The proxy calls :func:`begin` before forwarding a call, then exactly one of :func:`finish`
(the upstream answered: a result or a JSON-RPC error) or :func:`abandon` (no answer:
cancellation, upstream gone). Time comes in as ``now``; nothing here reads a clock or does
I/O, so every rule can be tested without sleeping, and a state store can re-run a fold.

Calls that start before any call of the current batch has completed form a batch (one model
response asking for several tools). Inside a batch, identical calls count like a streak
(a burst); distinct ones never advance a streak: when the batch ends, only its
last-completing result joins the sequence, counted once per member that completed with the
same call and result. A lone call is a batch of one.

Sequential rules look at that sequence: a call equal (call and result) to the call one period
earlier repeats a cycle, period 1 being identical calls; the same error from one tool whatever
its arguments; the same result from one tool for different arguments. Side effects count
identical calls of destructive, non-idempotent tools whatever their results.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, Final

from mcp_loop_guard.core import budget, wording
from mcp_loop_guard.core.fingerprint import call_key, canonical_json, result_key
from mcp_loop_guard.core.model import Action, Family, Mode, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.state import (
    DIGEST,
    MAX_BATCHES,
    MAX_EFFECTS,
    MAX_MEMBERS,
    Batch,
    Entry,
    ErrorStreak,
    SameResult,
    State,
)

__all__ = [
    "MARK_TTL_SECONDS",
    "Call",
    "LoopDetector",
    "Outcome",
    "Ticket",
    "abandon",
    "begin",
    "call_of",
    "error_outcome",
    "finish",
    "outcome_of",
    "take_over",
]

MARK_TTL_SECONDS: Final = 900.0
"""A batch with no member begun or ended for this long was left by a process that died mid-call."""


@dataclass(frozen=True, slots=True)
class Call:
    """What the detector sees of a call before it is forwarded."""

    tool: str
    key: str
    """16-hex fingerprint of tool and arguments."""
    side_effect: bool = False
    """The tool is annotated destructive and not idempotent."""
    read_only: bool = False
    """The tool is annotated read-only: calling it changes nothing."""
    acts: bool = False
    """The tool is annotated as not read-only (``readOnlyHint: false``): it performs actions."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the detector sees of an answer: a result's fingerprint, or an error's."""

    key: str
    error: bool = False


@dataclass(frozen=True, slots=True)
class Ticket:
    """One forwarded call in flight; hand it back to :func:`finish` or :func:`abandon` once."""

    batch: int
    tool: str
    call: str
    policy: Policy
    owed: tuple[Family, int, Action, str] | None = None
    """A verdict judged at begin and delivered with the result: (family, count, action, reason)."""
    acts: bool = False
    """The call's tool performs actions (annotated not read-only)."""


def call_of(
    tool: str,
    arguments: Mapping[str, Any] | None,
    annotations: Mapping[str, Any] | None = None,
    *,
    trusted: bool = True,
) -> Call:
    """The detector's view of a call; its tool's MCP annotations count only when ``trusted``."""
    hints = annotations if trusted and annotations else {}
    read_only = hints.get("readOnlyHint") is True
    side_effect = hints.get("destructiveHint") is True and hints.get("idempotentHint") is not True
    acts = hints.get("readOnlyHint") is False
    return Call(tool, call_key(tool, arguments)[:DIGEST], side_effect and not read_only, read_only, acts)


def outcome_of(result: Mapping[str, Any], policy: Policy) -> Outcome:
    """The detector's view of a ``tools/call`` result in wire form, scrubbed as the policy says."""
    return Outcome(result_key(policy.scrub.apply(result))[:DIGEST], result.get("isError") is True)


def error_outcome(code: object, message: object) -> Outcome:
    """The detector's view of a JSON-RPC error answering a call: an error result like any other."""
    return Outcome(sha256(canonical_json(["jsonrpc-error", code, message])).hexdigest()[:DIGEST], error=True)


def _allow(state: State, tool: str, streak: int = 0) -> Verdict:
    return _allowed(tool, streak, state.blocks)


@functools.lru_cache(maxsize=1024)
def _allowed(tool: str, streak: int, blocks: int) -> Verdict:
    """The verdict of most calls, shared: a verdict is immutable, and building one costs more than the lookup."""
    return Verdict(Action.ALLOW, tool, streak, blocks=blocks)


def begin(state: State, call: Call, policy: Policy, session: Policy, now: float) -> tuple[Ticket | None, Verdict]:
    """Judge a call before it is forwarded.

    Returns ALLOW with a ticket (None when the call is invisible to the detector), or, in
    enforce mode, BLOCK/ABORT without one: the call must then not reach the upstream, and the
    verdict's reason is the refusal to hand to the model. A call over one of its budgets is
    refused (BLOCK, family ``budget``) before any loop rule; a call refused for looping is
    not counted against its budgets.
    """
    over = budget.over_budget(state.budget_use, policy.budgets, now) if policy.budgets else None
    if over is not None and session.mode is Mode.ENFORCE:
        spent, used, resets = over
        state.last_verdict = f"block:{Family.BUDGET.value}:{call.tool}"
        text = budget.wording(spent, resets)
        return None, Verdict(Action.BLOCK, call.tool, used + 1, text, state.blocks, Family.BUDGET)
    ticket, verdict = _begin(state, call, policy, session, now)
    if policy.budgets and verdict.action < Action.BLOCK:
        budget.charge(state.budget_use, policy.budgets, now)
        if over is not None and ticket is not None and (ticket.owed is None or ticket.owed[2] < Action.BLOCK):
            spent, used, resets = over
            if session.mode is Mode.SHADOW:
                text = budget.wording(spent, resets)
                ticket = dataclasses.replace(ticket, owed=(Family.BUDGET, used + 1, Action.BLOCK, text))
                verdict = Verdict(
                    Action.ALLOW, call.tool, used + 1, text, state.blocks, Family.BUDGET, shadow=Action.BLOCK
                )
            else:
                text = budget.wording(spent, resets, held_back=True)
                ticket = dataclasses.replace(ticket, owed=(Family.BUDGET, used + 1, Action.WARN, text))
    return ticket, verdict


def _begin(state: State, call: Call, policy: Policy, session: Policy, now: float) -> tuple[Ticket | None, Verdict]:
    """The loop rules of :func:`begin`."""
    if not policy.active or policy.ignores(call.tool):
        return None, _allow(state, call.tool)
    _size(state, session)
    _expire(state, session, now)
    if not state.batches:
        _close_idle_window(state, session, now)
    batch = state.batches[-1] if state.batches and not state.batches[-1].closed else None
    if batch is None:
        _fold_completed(state)
    copies = sum(held.members.get(call.key, 0) for held in state.batches) if policy.burst_detection else 0
    gap = now - state.idle_since if not state.batches and state.idle_since is not None else 0.0
    patient = _patient(state, call, policy, gap)
    found = _refusal(state, call, policy, copies, patient=patient)
    owed: Owed | None = None
    if found is not None:
        family, count, cycle = found
        if session.mode is Mode.ENFORCE:
            return None, _refuse(state, call, family, count, cycle, batch, session, now)
        owed = _held_back(state, call, found, session)
    if batch is None:
        batch = _open_batch(state, session)
        batch.gap, batch.patient = gap, patient
    _join(state, batch, call, now)
    if owed is None and copies:
        owed = _burst_warning(state, call, policy, copies)
    effect = _effect_warning(state, call, policy)
    owed = owed or effect
    ticket = Ticket(batch.id, call.tool, call.key, policy, owed, call.acts)
    if owed is not None and session.mode is Mode.SHADOW and owed[2] >= Action.BLOCK:
        return ticket, Verdict(Action.ALLOW, call.tool, owed[1], owed[3], state.blocks, owed[0], shadow=owed[2])
    return ticket, _allow(state, call.tool)


def finish(state: State, ticket: Ticket, outcome: Outcome, session: Policy, now: float) -> Verdict:
    """Judge the upstream's answer for a forwarded call: ALLOW or WARN (shadow: ALLOW, with ``shadow``).

    Inside a batch only the call that completes it is judged by the sequential rules; the
    others get only what was judged for them at begin (burst, side effect). An ``isError``
    result is invisible when the policy ignores errors. A stale ticket changes nothing.
    """
    _size(state, session)
    batch = _find(state, ticket.batch)
    if batch is None or batch.live <= 0:
        return _allow(state, ticket.tool)
    policy = ticket.policy
    visible = not (policy.ignore_errors and outcome.error)
    entry = Entry(ticket.tool, ticket.call, outcome.key, outcome.error, ticket.acts)
    if visible:
        batch.last = entry
        done = ticket.call + outcome.key
        if policy.burst_detection and (len(batch.done) < MAX_MEMBERS or done in batch.done):
            batch.done[done] = batch.done.get(done, 0) + 1
    batch.live -= 1
    batch.closed = True
    batch.touched = now
    judged: tuple[Family, int, Action, str] | None = ticket.owed
    streak = 0
    if batch.live == 0:
        quiet = _quiet(state, batch, policy)
        settled = _settle(state, batch, session, now, keep_refused=True)
        if visible and settled is entry:
            streak, warning = _sequential_warning(state, entry, policy)
            if warning is not None and quiet and warning[0] in _PACED:
                warning = None
            if warning is not None and (judged is None or judged[2] < Action.BLOCK):
                judged = warning
        _fold_refused(state, batch)
    if judged is None:
        return _allow(state, ticket.tool, streak)
    family, count, action, text = judged
    if session.mode is Mode.SHADOW:
        return Verdict(Action.ALLOW, ticket.tool, count, text, state.blocks, family, shadow=max(action, Action.WARN))
    state.last_verdict = f"warn:{family.value}:{ticket.tool}"
    return Verdict(Action.WARN, ticket.tool, count, text, state.blocks, family)


def _patient(state: State, call: Call, policy: Policy, gap: float) -> bool:
    """The agent waited ``poll_seconds`` before repeating: a patient poll, not a loop.

    A loop already refused stays refused, however long the agent waits in between.
    """
    if not policy.poll_seconds or gap < policy.poll_seconds:
        return False
    history = state.history
    refused = bool(history) and history[-1].call == call.key and state.runs[0] + 2 >= policy.block_threshold
    return not refused


_PACED = frozenset({Family.IDENTICAL, Family.CYCLE, Family.SAME_ERROR})
"""Families whose warnings a patient agent (slow repeats, a backoff) does not get."""


def _quiet(state: State, batch: Batch, policy: Policy) -> bool:
    """The agent waited before this call (``quiet_seconds``), or is backing off: warning it is wrong advice.

    Records the wait for the next call's comparison.
    """
    gap, previous = batch.gap, state.gap
    if gap > 0:
        state.gap = gap
    if not policy.quiet_seconds or gap <= 0:
        return False
    return gap >= policy.quiet_seconds or (previous >= 1.0 and gap >= 1.5 * previous)


def abandon(state: State, ticket: Ticket, session: Policy, now: float) -> None:
    """Release a forwarded call that ended without an answer; no pattern moves for it."""
    batch = _find(state, ticket.batch)
    if batch is None or batch.live <= 0:
        return
    batch.live -= 1
    _uncount(batch, ticket.call, 1)
    batch.closed = True
    batch.touched = now
    if batch.live == 0:
        _settle(state, batch, session, now)


def take_over(state: State, session: Policy, now: float) -> None:
    """A guard continuing the state of one that has exited: its calls in flight will never end."""
    for batch in list(state.batches):
        _settle(state, batch, session, now)


# --- refusals ---------------------------------------------------------------------------------


def _refusal(
    state: State, call: Call, policy: Policy, copies: int, *, patient: bool
) -> tuple[Family, int, tuple[str, ...]] | None:
    """(family, count, cycle tools) when this call must be refused, else None.

    A patient poll (the agent waited ``poll_seconds``) starts its streak and cycle over.
    """
    history, runs = state.history, state.runs
    base = runs[0] + 1 if history and history[-1].call == call.key and not patient else 0
    identical = base + copies + 1
    if identical >= policy.block_threshold:
        return (Family.BURST if copies else Family.IDENTICAL), identical, ()
    for period in range(2, 1 if patient else min(policy.cycle_max_period, len(runs), len(history)) + 1):
        run = runs[period - 1] + 1
        if history[-period].call == call.key and _is_cycle(history, period, run):
            count = _cycle_count(run, period)
            if count >= policy.block_threshold:
                return Family.CYCLE, count, tuple(entry.tool for entry in history[-period:])
    done_before = state.effects.get(call.key, ("", 0))[1]
    if (
        call.side_effect
        and policy.trust_annotations
        and policy.side_effect_block_threshold
        and done_before + 1 >= policy.side_effect_block_threshold
    ):
        return Family.SIDE_EFFECT, done_before + 1, ()
    error = state.error
    if (
        error is not None
        and error.tool == call.tool
        and policy.same_error_block_threshold
        and not policy.ignore_errors
        and error.count + 1 >= policy.same_error_block_threshold
    ):
        return Family.SAME_ERROR, error.count + 1, ()
    same = state.same
    if (
        same is not None
        and same.tool == call.tool
        and same.last_call != call.key
        and policy.same_result_block_threshold
        and same.distinct + 1 >= policy.same_result_block_threshold
    ):
        return Family.SAME_RESULT, same.distinct + 1, ()
    return None


Owed = tuple[Family, int, Action, str]
"""A verdict judged at begin and delivered with the result: (family, count, action, reason)."""


def _held_back(state: State, call: Call, found: tuple[Family, int, tuple[str, ...]], session: Policy) -> Owed:
    """Warn and shadow modes: the call goes on, and what enforce mode would have done is owed."""
    family, count, cycle = found
    action = _count_refusal(state, session) if session.mode is Mode.SHADOW else Action.WARN
    text = wording.refusal(family, call.tool, count, cycle)
    if session.mode is Mode.WARN:
        text = wording.held_back(family, call.tool, count, cycle)
    elif action is Action.ABORT:
        text += wording.ABORTING
    return family, count, action, text


def _join(state: State, batch: Batch, call: Call, now: float) -> None:
    """The call becomes a member of its batch; a call that may change things forgets other tools' effects."""
    if not call.read_only and state.effects:
        _forget_effects_of_others(state, call.tool)
    if len(batch.members) < MAX_MEMBERS or call.key in batch.members:
        batch.members[call.key] = batch.members.get(call.key, 0) + 1
    batch.live += 1
    batch.touched = now


def _effect_warning(state: State, call: Call, policy: Policy) -> Owed | None:
    """Count a side-effect call; its warning once it repeats."""
    warn, block = policy.side_effect_warn_threshold, policy.side_effect_block_threshold
    if not (call.side_effect and policy.trust_annotations and (warn or block)):
        return None
    count = _count_effect(state, call.key, call.tool)  # counted even with no warning step: refusals need it
    if not warn or count < warn:
        return None
    text = wording.warning(Family.SIDE_EFFECT, call.tool, count, policy.side_effect_block_threshold)
    return Family.SIDE_EFFECT, count, Action.WARN, text


def _count_refusal(state: State, session: Policy) -> Action:
    state.blocks += 1
    if session.use_terminate or state.blocks >= session.abort_threshold:
        return Action.ABORT
    return Action.BLOCK


def _refuse(  # noqa: PLR0917 - the pieces of one refusal, all needed
    state: State,
    call: Call,
    family: Family,
    count: int,
    cycle: tuple[str, ...],
    batch: Batch | None,
    session: Policy,
    now: float,
) -> Verdict:
    """Count a refusal and word it; ABORT once the window has seen enough of them (session rules).

    A refused call keeps its place: in the sequence it stands for the result it would have
    repeated, so the same call stays refused until something changes; while copies of it are
    in flight it counts as one more copy (in the open batch, or the latest one holding them).
    """
    action = _count_refusal(state, session)
    holder = batch if batch is not None else _holding(state, call.key)
    if holder is not None:
        if len(holder.members) < MAX_MEMBERS or call.key in holder.members:
            holder.members[call.key] = holder.members.get(call.key, 0) + 1
            holder.refused[call.key] = holder.refused.get(call.key, 0) + 1
        holder.touched = now
    elif family in {Family.IDENTICAL, Family.CYCLE}:
        period = len(cycle) or 1
        assumed = state.history[-period]
        _fold(state, Entry(call.tool, call.key, assumed.result, assumed.error, call.acts), 1)
    elif family is Family.SAME_ERROR and state.error is not None:
        state.error.count += 1
    if not state.batches:
        state.idle_since = now
    reason = wording.refusal(family, call.tool, count, cycle)
    if action is Action.ABORT:
        reason += wording.ABORTING
    state.last_verdict = f"{action.name.lower()}:{family.value}:{call.tool}"
    return Verdict(action, call.tool, count, reason, state.blocks, family)


def _burst_warning(state: State, call: Call, policy: Policy, copies: int) -> tuple[Family, int, Action, str] | None:
    history, runs = state.history, state.runs
    base = runs[0] + 1 if history and history[-1].call == call.key else 0
    count = base + copies + 1
    if count < policy.warn_threshold:
        return None
    text = wording.warning(Family.BURST, call.tool, count, policy.block_threshold)
    return Family.BURST, count, Action.WARN, text


def _count_effect(state: State, key: str, tool: str) -> int:
    count = state.effects.pop(key, ("", 0))[1] + 1
    state.effects[key] = (tool, count)  # most recent last
    while len(state.effects) > MAX_EFFECTS:
        del state.effects[next(iter(state.effects))]
    return count


def _forget_effects_of_others(state: State, tool: str) -> None:
    """A call that may change things, to another tool: repeating an earlier action may be meant now.

    Running the tests again after an edit is not sending the same email twice.
    """
    state.effects = {key: value for key, value in state.effects.items() if value[0] == tool}


# --- the sequence -----------------------------------------------------------------------------


def _is_cycle(history: list[Entry], period: int, run: int) -> bool:
    """A cycle has repeated in full at least once, and is made of different calls.

    One call repeated with alternating results is polling, not a cycle.
    """
    if run < period:
        return False
    first = history[-period].call
    return any(entry.call != first for entry in history[-period:])


def _cycle_count(run: int, period: int) -> int:
    """Occurrences of one position of a cycle: 1 + ceil(run / period) (period 1: the streak)."""
    return 1 + -(-run // period)


def _fold(state: State, entry: Entry, copies: int, *, fresh: bool = False) -> None:
    """Append one call (completed ``copies`` times identically) to the sequence; move every pattern.

    ``fresh``: a patient poll, whose repetitions start over.
    """
    history, runs = state.history, state.runs
    for period in range(1, len(runs) + 1):
        step = copies if period == 1 else 1
        if not fresh and len(history) >= period and history[-period].same(entry):
            runs[period - 1] += step
        else:
            runs[period - 1] = step - 1
    history.append(entry)
    del history[: -len(runs)]
    if entry.error:
        error = state.error
        if error is not None and error.tool == entry.tool and error.result == entry.result:
            error.count += copies
        else:
            state.error = ErrorStreak(entry.tool, entry.result, copies)
        state.same = None
        return
    state.error = None
    same = state.same
    if entry.acts:  # an action's acknowledgment ("staged", "sent") is the same for every item, as it should be
        state.same = None
        return
    if same is not None and same.tool == entry.tool and same.result == entry.result:
        same.count += copies
        same.distinct += same.last_call != entry.call
        same.last_call = entry.call
    else:
        state.same = SameResult(entry.tool, entry.result, copies, entry.call, distinct=1)


def _sequential_warning(
    state: State, entry: Entry, policy: Policy
) -> tuple[int, tuple[Family, int, Action, str] | None]:
    """(streak, warning or None) for the call whose result was just folded in."""
    runs = state.runs
    best_count, best_period = 1 + runs[0], 1
    for period in range(2, min(policy.cycle_max_period, len(runs)) + 1):
        if _is_cycle(state.history, period, runs[period - 1]):
            count = _cycle_count(runs[period - 1], period)
            if count > best_count:
                best_count, best_period = count, period
    if best_count >= policy.warn_threshold:
        cycle: tuple[str, ...] = ()
        family = Family.IDENTICAL
        if best_period > 1:
            family, cycle = Family.CYCLE, tuple(e.tool for e in state.history[-best_period:])
        if best_count >= policy.block_threshold:  # only where refusals are held back (warn, shadow)
            text = wording.held_back(family, entry.tool, best_count, cycle)
            return best_count, (family, best_count, Action.WARN, text)
        text = wording.warning(family, entry.tool, best_count, policy.block_threshold, cycle)
        return best_count, (family, best_count, Action.WARN, text)
    error = state.error
    if (
        entry.error
        and error is not None
        and policy.same_error_warn_threshold
        and not policy.ignore_errors
        and error.count >= policy.same_error_warn_threshold
        and error.count > best_count
    ):
        text = wording.warning(Family.SAME_ERROR, entry.tool, error.count, policy.same_error_block_threshold)
        return best_count, (Family.SAME_ERROR, error.count, Action.WARN, text)
    same = state.same
    if same is not None and policy.same_result_warn_threshold and same.distinct >= policy.same_result_warn_threshold:
        text = wording.warning(Family.SAME_RESULT, entry.tool, same.distinct, policy.same_result_block_threshold)
        return best_count, (Family.SAME_RESULT, same.distinct, Action.WARN, text)
    return best_count, None


# --- batches and windows ----------------------------------------------------------------------


def _size(state: State, session: Policy) -> None:
    """Fit the remembered sequence to the session's longest cycle (a new state, or new settings)."""
    wanted = session.cycle_max_period
    if len(state.runs) != wanted:
        state.runs = (state.runs + [0] * wanted)[:wanted]
        del state.history[:-wanted]


def _find(state: State, ident: int) -> Batch | None:
    for batch in state.batches:
        if batch.id == ident:
            return batch
    return None


def _open_batch(state: State, session: Policy) -> Batch:
    """A new batch. What earlier batches have completed joins the sequence first: a call made after
    another one has completed saw that result, even while a long call of its batch is still running."""
    while len(state.batches) >= MAX_BATCHES:
        _settle(state, state.batches[0], session, state.batches[0].touched)
    _fold_completed(state)
    batch = Batch(state.next_batch)
    state.next_batch += 1
    state.batches.append(batch)
    return batch


def _fold_completed(state: State) -> None:
    """What earlier batches have completed joins the sequence: a call made after another one has
    completed saw that result, even while a long call of its batch is still running. Its copies
    still in flight, and refused ones, go on counting as copies."""
    for earlier in state.batches:
        entry = earlier.last
        if entry is None:
            continue
        _fold(state, entry, _completed_copies(earlier, entry), fresh=earlier.patient)
        earlier.patient = False  # its fresh start is made; later completions continue it
        for done, count in earlier.done.items():
            _uncount(earlier, done[:DIGEST], count)
        earlier.last = None
        earlier.done.clear()


def _completed_copies(batch: Batch, entry: Entry) -> int:
    """Members of the batch that completed as ``entry`` did: how many times it joins the sequence.

    Refused copies count as copies while the batch is open, not in the sequence after it.
    """
    return batch.done.get(entry.call + entry.result, 1)


def _uncount(batch: Batch, call: str, count: int) -> None:
    """``count`` members with this call are no longer copies in flight."""
    left = batch.members.get(call, 0) - count
    if left > 0:
        batch.members[call] = left
    else:
        batch.members.pop(call, None)


def _holding(state: State, call: str) -> Batch | None:
    """The latest unsettled batch with copies of ``call`` in flight."""
    for batch in reversed(state.batches):
        if call in batch.members:
            return batch
    return None


def _settle(state: State, batch: Batch, session: Policy, now: float, *, keep_refused: bool = False) -> Entry | None:
    """End a batch: fold its last-completing result into the sequence. Returns that entry.

    Its refused copies then lengthen the streak (``keep_refused``: the caller does that, after
    judging the last answer on the copies that were answered).
    """
    state.batches.remove(batch)
    entry = batch.last
    if entry is not None:
        _fold(state, entry, _completed_copies(batch, entry), fresh=batch.patient)
    if not keep_refused:
        _fold_refused(state, batch)
    if not state.batches:
        state.idle_since = now
    return entry


def _fold_refused(state: State, batch: Batch) -> None:
    """A batch's refused copies of the call that ended the sequence count in its streak: the agent made them."""
    history = state.history
    for call, count in batch.refused.items():
        if history and history[-1].call == call and state.runs:
            state.runs[0] += count
    batch.refused.clear()


def _expire(state: State, session: Policy, now: float) -> None:
    for batch in list(state.batches):
        if now - batch.touched >= MARK_TTL_SECONDS:
            _settle(state, batch, session, batch.touched + MARK_TTL_SECONDS)


def _close_idle_window(state: State, session: Policy, now: float) -> None:
    """Start a new request window after ``reset_after_seconds`` with nothing going on."""
    idle_since = state.idle_since
    if idle_since is not None and now - idle_since >= session.reset_after_seconds:
        state.blocks = 0
        state.effects.clear()


# --- an in-memory detector --------------------------------------------------------------------


class LoopDetector:
    """One agent's state in memory, judged by the session policy and, per tool, ``policy_for``."""

    __slots__ = ("_policy", "_policy_for", "state")

    def __init__(
        self, policy: Policy, policy_for: Callable[[str], Policy] | None = None, state: State | None = None
    ) -> None:
        """Start an agent (or continue ``state``); ``policy_for(tool)`` returns the policy of the tool's route."""
        self._policy = policy
        self._policy_for = policy_for
        self.state = state if state is not None else State()
        _size(self.state, policy)

    @property
    def blocks(self) -> int:
        """Refusals in the current request window (for logs and metrics)."""
        return self.state.blocks

    def rules(self, tool: str) -> Policy:
        """The policy that judges calls to ``tool``."""
        return self._policy if self._policy_for is None else self._policy_for(tool)

    def begin(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        now: float,
        *,
        annotations: Mapping[str, Any] | None = None,
    ) -> tuple[Ticket | None, Verdict]:
        """See :func:`begin`; ``annotations`` are the tool's MCP annotations, when known."""
        policy = self.rules(tool)
        call = call_of(tool, arguments, annotations, trusted=policy.trust_annotations)
        return begin(self.state, call, policy, self._policy, now)

    def finish(self, ticket: Ticket, result: Mapping[str, Any], now: float) -> Verdict:
        """See :func:`finish`; ``result`` is the raw result as the upstream sent it."""
        return finish(self.state, ticket, outcome_of(result, ticket.policy), self._policy, now)

    def finish_error(self, ticket: Ticket, code: object, message: object, now: float) -> Verdict:
        """See :func:`finish`, for a call answered with a JSON-RPC error."""
        return finish(self.state, ticket, error_outcome(code, message), self._policy, now)

    def abandon(self, ticket: Ticket, now: float) -> None:
        """See :func:`abandon`."""
        abandon(self.state, ticket, self._policy, now)
