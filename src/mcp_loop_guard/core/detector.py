"""The loop detector: pure functions folding one agent's calls into its :class:`State`.

The proxy calls :func:`begin` before forwarding a call, then exactly one of :func:`finish`
(the upstream answered: a result or a JSON-RPC error) or :func:`abandon` (no answer:
cancellation, upstream gone). Time comes in as ``now``; nothing here reads a clock or does
I/O, so every rule can be tested without sleeping, and a state store can re-run a fold.

How calls fold into a sequence (batches, windows) is :mod:`~mcp_loop_guard.core.sequence`;
which patterns refuse or warn is :mod:`~mcp_loop_guard.core.families`; when a repeat is the
agent waiting on purpose is :mod:`~mcp_loop_guard.core.patience`; which argument differences
are trivial is :mod:`~mcp_loop_guard.core.arguments`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any, Final

from mcp_loop_guard.core import budget, intent, wording
from mcp_loop_guard.core.arguments import NO_RULES, ArgumentRules, forms, loose_text
from mcp_loop_guard.core.families import (
    PATTERNS,
    Found,
    Owed,
    burst_warning,
    effect_warning,
    forget_effects_of_others,
    refusal,
    sequential_warning,
)
from mcp_loop_guard.core.fingerprint import call_key, canonical_json, result_key
from mcp_loop_guard.core.model import Action, Call, Family, Mode, Outcome, Verdict
from mcp_loop_guard.core.patience import backing_off, long_gap, note_gap
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.sequence import (
    MARK_TTL_SECONDS,
    close_idle_window,
    count_failure,
    decrement,
    expire,
    failure_key,
    find,
    fold,
    fold_completed,
    fold_refused,
    holding,
    member_token,
    open_batch,
    recurrences,
    settle,
    size,
    uncount,
)
from mcp_loop_guard.core.state import DIGEST, MAX_MEMBERS, MAX_REFUSED, TOKEN, Batch, Entry, State

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


@dataclass(slots=True)
class Ticket:
    """One forwarded call in flight; hand it back to :func:`finish` or :func:`abandon` once.

    Not frozen, though nothing changes one: one is made for every call, and a frozen dataclass sets
    each field through ``object.__setattr__``, four times the cost.
    """

    batch: int
    tool: str
    call: str
    """The call's loose fingerprint."""
    policy: Policy
    owed: Owed | None = None
    """A verdict judged at begin and delivered with the result: (family, count, action, reason)."""
    acts: bool = False
    """The call may change things."""
    key: str = ""
    """The call's key fingerprint ("": :attr:`call`)."""
    waits: bool = False
    held: bool = False
    """A patient repeat: it does not lengthen the streak it continues."""
    probe: bool = False
    """A call refused in an earlier request window, let through once to see whether its result changed."""


def call_of(
    tool: str,
    arguments: Mapping[str, Any] | None,
    annotations: Mapping[str, Any] | None = None,
    *,
    trusted: bool = True,
    rules: ArgumentRules = NO_RULES,
) -> Call:
    """The detector's view of a call; its tool's MCP annotations count only when ``trusted``.

    A call that waits (``sleep 30`` through a shell tool marked destructive) repeats no effect.
    """
    hints = annotations if trusted and annotations else {}
    read_only = hints.get("readOnlyHint") is True
    side_effect = hints.get("destructiveHint") is True and hints.get("idempotentHint") is not True
    keyed, loosened = forms(arguments, rules)
    key = call_key(tool, keyed)[:DIGEST]
    loose = key if loosened is keyed or loosened == keyed else call_key(tool, loosened)[:DIGEST]
    acts = intent.writes(tool, arguments, hints)
    waits = intent.waits(tool, arguments)
    return Call(tool, key, side_effect and not (read_only or waits), read_only, acts, loose, waits)


ERROR_TEXT: Final = 4096
"""Longest error text compared loosely; a longer one is compared as it is."""


def outcome_of(result: Mapping[str, Any], policy: Policy) -> Outcome:
    """The detector's view of a ``tools/call`` result in wire form, scrubbed as the policy says.

    A text result that says it failed (``Error: ...``) is a failure even without ``isError``. An error
    result's short texts are compared loosely (:func:`~mcp_loop_guard.core.arguments.loose_text`):
    a failure that echoes a variant of its arguments, or a fresh request id, is the same failure.
    """
    failed = result.get("isError") is True or _reads_as_error(result)
    if failed:
        result = _loose_error(result)
    return Outcome(result_key(policy.scrub.apply(result))[:DIGEST], failed, not failed and _says_nothing(result))


_ERROR_TEXT = re.compile(
    r"\s*\[?\s*(?:error|exception|fatal|failed|failure)\s*[:!\]]|\s*traceback \(most recent call last\)"
    r"|\s*(?:invalid|unknown|unrecognized|unsupported)\s+(?:action|command|input|argument|parameter|option|request"
    r"|tool|query|syntax)\b"
    r"|\s*(?:/[\w/.-]*/)?(?:ba|da|z)?sh: (?:-c: )?line \d+: ",
    re.I,
)
"""A text result that says it failed (``Error: ...``) from a server that does not set ``isError``."""
_ERROR_STARTS: Final = ("[", "er", "ex", "fa", "tr", "in", "un", "/", "ba", "da", "zs", "sh")


def _reads_as_error(result: Mapping[str, Any]) -> bool:
    content = result.get("content")
    if not isinstance(content, list) or not content or not isinstance(content[0], Mapping):
        return False
    text = content[0].get("text")
    if not isinstance(text, str) or not intent.may_start(text[:200], _ERROR_STARTS):
        return False
    return _ERROR_TEXT.match(text, 0, 200) is not None


_NOTHING = re.compile(
    r"\s*(?:\[\s*\]|\{\s*\}|(?:null|none|0 results?|no (?:more )?(?:results?|matches|items|entries|records|rows|"
    r"data|files?|issues?|documents?|pages?)(?: found)?|nothing found|not found|could not find|couldn'?t find"
    r"|no such \w+)\b.*)?",
    re.I | re.S,
)
"""A text that tells nothing new: empty, an empty list or object, or a plain negative answer."""
_NOTHING_STARTS: Final = ("[", "{", "nu", "no", "0 ", "co")


def _says_nothing(result: Mapping[str, Any]) -> bool:
    content = result.get("content")
    if _holds_something(result.get("structuredContent")) or not isinstance(content, list) or len(content) > 1:
        return False
    if not content:
        return True
    item = content[0]
    text = item.get("text") if isinstance(item, Mapping) and item.get("type") == "text" else None
    if not isinstance(text, str) or len(text) > 1000 or not intent.may_start(text, _NOTHING_STARTS):
        return False
    return _NOTHING.fullmatch(text) is not None


def _holds_something(value: object) -> bool:
    """Structured content with a value in it (``{"content": ""}`` beside an empty text holds nothing)."""
    if isinstance(value, Mapping):
        return any(_holds_something(item) for item in value.values())
    if isinstance(value, list):
        return bool(value)
    return value not in (None, "")


def _loose_error(result: Mapping[str, Any]) -> Mapping[str, Any]:
    content = result.get("content")
    if not isinstance(content, list):
        return result
    texts = [item.get("text") for item in content if isinstance(item, Mapping)]
    if sum(len(text) for text in texts if isinstance(text, str)) > ERROR_TEXT:
        return result
    return {**result, "content": [_loose_item(item) for item in content]}


def _loose_item(item: object) -> object:
    if isinstance(item, Mapping) and isinstance(item.get("text"), str):
        return {**item, "text": _loose_error_text(item["text"])}
    return item


def _loose_error_text(text: str) -> str:
    """An error text as compared: spaces collapsed, volatile values and numbers (a process id, a line, a
    count) left out, so that the same failure reads the same."""
    lines = sorted(_NUMBERS.sub("#", loose_text(line)) for line in text.splitlines())
    return "\n".join(line for line in lines if line)  # the same lines in another order: the same failure


_NUMBERS = re.compile(r"\d+")


def error_outcome(code: object, message: object) -> Outcome:
    """The detector's view of a JSON-RPC error answering a call: an error result like any other."""
    if isinstance(message, str) and len(message) <= ERROR_TEXT:
        message = _loose_error_text(message)
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
    size(state, session)
    expire(state, session, now)
    if not state.batches:
        close_idle_window(state, session, now)
    batch = state.batches[-1] if state.batches and not state.batches[-1].closed else None
    if batch is None:
        fold_completed(state)
    bursts = policy.burst_detection and state.batches
    copies = sum(open_.members.get(call.key, 0) for open_ in state.batches) if bursts else 0
    gap = now - state.idle_since if not state.batches and state.idle_since is not None else 0.0
    seen = recurrences(state, call.loose)[0] if policy.recurring_block or gap > 0 else 0
    held = _patient(state, call, policy, gap, seen)
    if gap > 0:
        note_gap(state, gap)
    found = refusal(state, call, policy, copies, held=held, seen=seen)
    probe = False
    owed: Owed | None = None
    if found is not None and call.loose in state.probes:
        state.probes.remove(call.loose)  # refused in an earlier window: once more, to see whether it changed
        found, probe = None, True
    if found is not None:
        if session.mode is Mode.ENFORCE:
            return None, _refuse(state, call, found, batch, session, now=now)
        owed = _held_back(state, call, found, session)
    if batch is None:
        batch = open_batch(state, session)
        batch.gap, batch.held = gap, held
    _join(state, batch, call, now)
    if owed is None and copies:
        owed = burst_warning(state, call, policy, copies)
    effect = effect_warning(state, call, policy)
    owed = owed or effect
    ticket = Ticket(batch.id, call.tool, call.loose, policy, owed, call.acts, call.key, call.waits, held, probe)
    if owed is not None and session.mode is Mode.SHADOW and owed[2] >= Action.BLOCK:
        return ticket, Verdict(Action.ALLOW, call.tool, owed[1], owed[3], state.blocks, owed[0], shadow=owed[2])
    return ticket, _allow(state, call.tool)


def _patient(state: State, call: Call, policy: Policy, gap: float, seen: int) -> bool:
    """Evidence that this repeat is the agent waiting on purpose (see :mod:`~mcp_loop_guard.core.patience`).

    A loop already refused stays refused, however the agent waits in between. ``seen``: the call's
    unchanged answers among the recent calls.
    """
    history, runs = state.history, state.runs
    if history and runs and history[-1].call == call.loose and runs[0] + 1 >= policy.block_threshold:
        return False
    if policy.pollable or call.waits:
        return True
    if gap <= 0 or (not (history and history[-1].call == call.loose) and not seen):
        return False  # only a repeat can be patient
    return long_gap(state, gap) or backing_off(state, call.loose, gap)


def finish(state: State, ticket: Ticket, outcome: Outcome, session: Policy, now: float) -> Verdict:
    """Judge the upstream's answer for a forwarded call: ALLOW or WARN (shadow: ALLOW, with ``shadow``).

    Inside a batch only the call that completes it is judged by the sequential rules; the
    others get only what was judged for them at begin (burst, side effect). An ``isError``
    result is invisible when the policy ignores errors. A stale ticket changes nothing.
    """
    size(state, session)
    batch = find(state, ticket.batch)
    if batch is None or batch.live <= 0:
        return _allow(state, ticket.tool)
    policy = ticket.policy
    visible = not (policy.ignore_errors and outcome.error)
    entry = Entry(
        ticket.tool,
        ticket.call,
        outcome.key,
        outcome.error,
        ticket.acts,
        ticket.waits,
        ticket.held,
        batch.gap,
        outcome.says_nothing,
    )
    key = ticket.key or ticket.call
    decrement(batch.tools, ticket.tool, 1)
    if visible:
        prior = batch.last
        copy = prior is not None and prior.same(entry)
        if prior is not None and len(batch.seen) < MAX_MEMBERS * TOKEN and (policy.burst_detection or not copy):
            batch.seen += member_token(prior)
        batch.last = entry
        done = key + outcome.key
        batch.last_done = done
        if policy.burst_detection and (len(batch.done) < MAX_MEMBERS or done in batch.done):
            batch.done[done] = batch.done.get(done, 0) + 1
        if outcome.error:
            failed = failure_key(ticket.tool, outcome.key)
            if len(batch.failed) < MAX_MEMBERS or failed in batch.failed:
                batch.failed[failed] = batch.failed.get(failed, 0) + 1
    batch.live -= 1
    batch.closed = True
    batch.touched = now
    judged: Owed | None = ticket.owed
    streak = 0
    if batch.live == 0:
        settled = settle(state, batch, session, now, keep_refused=True)
        if visible and settled is entry:
            streak, warning = sequential_warning(state, entry, policy)
            if warning is not None and ticket.probe and warning[0] in PATTERNS:
                warning = _still_the_same(warning, entry.tool, policy)
            if warning is not None and (judged is None or judged[2] < Action.BLOCK):
                judged = warning
        fold_refused(state, batch)
    size(state, session)
    if judged is None:
        return _allow(state, ticket.tool, streak)
    family, count, action, text = judged
    if session.mode is Mode.SHADOW:
        return Verdict(Action.ALLOW, ticket.tool, count, text, state.blocks, family, shadow=max(action, Action.WARN))
    state.last_verdict = f"warn:{family.value}:{ticket.tool}"
    return Verdict(Action.WARN, ticket.tool, count, text, state.blocks, family)


def _still_the_same(warning: Owed, tool: str, policy: Policy) -> Owed:
    """A call let through in a new window came back unchanged: the next one is refused, and it says so."""
    family, count, action, _ = warning
    block = policy.recurring_block if family is Family.RECURRING else policy.block_threshold
    return family, count, action, wording.warning(family, tool, count, block)


def abandon(state: State, ticket: Ticket, session: Policy, now: float) -> None:
    """Release a forwarded call that ended without an answer; no pattern moves for it."""
    batch = find(state, ticket.batch)
    if batch is None or batch.live <= 0:
        return
    batch.live -= 1
    uncount(batch, ticket.key or ticket.call, 1)
    decrement(batch.tools, ticket.tool, 1)
    batch.closed = True
    batch.touched = now
    if batch.live == 0:
        settle(state, batch, session, now)


def take_over(state: State, session: Policy, now: float) -> None:
    """A guard continuing the state of one that has exited: its calls in flight will never end.

    The state is fitted to the session first: a record may hold fewer runs than calls remembered.
    """
    size(state, session)
    for batch in list(state.batches):
        settle(state, batch, session, now)


# --- refusals ---------------------------------------------------------------------------------


def _held_back(state: State, call: Call, found: Found, session: Policy) -> Owed:
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
        forget_effects_of_others(state, call.tool)
    if len(batch.members) < MAX_MEMBERS or call.key in batch.members:
        batch.members[call.key] = batch.members.get(call.key, 0) + 1
    if len(batch.tools) < MAX_MEMBERS or call.tool in batch.tools:
        batch.tools[call.tool] = batch.tools.get(call.tool, 0) + 1
    batch.live += 1
    batch.touched = now


def _count_refusal(state: State, session: Policy) -> Action:
    state.blocks += 1
    if session.use_terminate or state.blocks >= session.abort_threshold:
        return Action.ABORT
    return Action.BLOCK


def _refuse(state: State, call: Call, found: Found, batch: Batch | None, session: Policy, *, now: float) -> Verdict:
    """Count a refusal and word it; ABORT once the window has seen enough of them (session rules).

    A refused call keeps its place: in the sequence it stands for the result it would have
    repeated, so the same call stays refused until something changes; while copies of it are
    in flight it counts as one more copy (in the open batch, or the latest one holding them).
    """
    family, count, cycle = found
    action = _count_refusal(state, session)
    holder = batch if batch is not None else holding(state, call.key)
    if holder is not None:
        if len(holder.members) < MAX_MEMBERS or call.key in holder.members:
            holder.members[call.key] = holder.members.get(call.key, 0) + 1
            holder.refused[call.loose] = holder.refused.get(call.loose, 0) + 1
        holder.touched = now
    elif family in PATTERNS:
        fold(state, _assumed(state, call, family, cycle), 1)
    elif family is Family.SAME_ERROR and state.history:
        count_failure(state, call.tool, state.history[-1].result, 1)
    if call.loose not in state.refused:
        state.refused.append(call.loose)
        del state.refused[:-MAX_REFUSED]
    if not state.batches:
        state.idle_since = now
    reason = wording.refusal(family, call.tool, count, cycle)
    if action is Action.ABORT:
        reason += wording.ABORTING
    state.last_verdict = f"{action.name.lower()}:{family.value}:{call.tool}"
    return Verdict(action, call.tool, count, reason, state.blocks, family)


def _assumed(state: State, call: Call, family: Family, cycle: tuple[str, ...]) -> Entry:
    """The entry a refused call stands for: the result its pattern would have repeated."""
    if family is Family.RECURRING:
        _, result, error = recurrences(state, call.loose)
        return Entry(call.tool, call.loose, result, error, call.acts, call.waits)
    period = len(cycle) or 1
    assumed = state.history[-period]
    return Entry(call.tool, call.loose, assumed.result, assumed.error, call.acts, call.waits)


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
        size(self.state, policy)

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
        call = call_of(tool, arguments, annotations, trusted=policy.trust_annotations, rules=policy.arguments)
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
