"""The loop detector: one per downstream session, fed with every tool call and result.

The proxy calls :meth:`LoopDetector.begin` before forwarding a call, then exactly one of
:meth:`LoopDetector.finish` (the upstream answered) or :meth:`LoopDetector.abandon` (no
answer: error, cancellation, upstream gone). Time comes in as ``now``; nothing here reads a
clock, so every rule can be tested without sleeping.

Calls that overlap in flight form a batch (one model response asking for several tools).
While a batch is open the sequential state does not move: each new call is judged against
the state before the batch, and when the last call of the batch ends, only the
last-completing visible result is compared with that state. A lone call is a batch of one.

With several upstream servers, each tool may follow its own server's policy (``policy_for``):
thresholds, ignore lists, ``ignore_errors`` and ``enabled`` come from it, while the request
window (``reset_after_seconds``) and the refusal count that ends the session
(``abort_threshold``, ``use_terminate``) stay the session's. There is one streak per session:
a visible call to any other tool, on any server, ends it.

State is a handful of scalars and digests; it does not grow with the number of calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_loop_guard.core.fingerprint import call_key, result_key
from mcp_loop_guard.core.model import Action, CallKey, ResultKey, Verdict
from mcp_loop_guard.core.policy import Policy

__all__ = ["LoopDetector", "Ticket"]


@dataclass(frozen=True, slots=True)
class Ticket:
    """One forwarded call in flight; hand it back to ``finish`` or ``abandon`` once."""

    tool: str
    call: CallKey
    batch: int
    slot: int


class LoopDetector:
    """Streaks of identical (tool, arguments, result) calls, graded into verdicts."""

    __slots__ = (
        "_batch",
        "_blocks",
        "_call",
        "_idle_since",
        "_in_flight",
        "_next_slot",
        "_pending",
        "_policy",
        "_policy_for",
        "_refused",
        "_result",
        "_streak",
    )

    def __init__(self, policy: Policy, policy_for: Callable[[str], Policy] | None = None) -> None:
        """Start a session: no streak, no blocks, nothing in flight.

        ``policy`` rules the session; ``policy_for(tool)``, when given, returns the policy
        that judges calls to ``tool`` (its server's), and is asked on every call.
        """
        self._policy = policy
        self._policy_for = policy_for
        self._call: CallKey | None = None
        """Call of the current streak (the last visible sequential result)."""
        self._result: ResultKey | None = None
        self._streak = 0
        self._refused = 0
        """Identical calls refused since the streak last changed."""
        self._blocks = 0
        """Refusals in the current request window."""
        self._idle_since: float | None = None
        """When the session last had nothing in flight; None before the first call."""
        self._batch = 0
        self._next_slot = 0
        self._in_flight: set[int] = set()
        """Slots of the current batch still in flight."""
        self._pending: tuple[CallKey, ResultKey] | None = None
        """Last-completing visible result of the current batch."""

    @property
    def blocks(self) -> int:
        """Refusals in the current request window (for logs and metrics)."""
        return self._blocks

    def begin(self, tool: str, arguments: Mapping[str, Any] | None, now: float) -> tuple[Ticket | None, Verdict]:
        """Judge a call before it is forwarded.

        Returns ALLOW with a ticket (None when the call is invisible to the detector), or
        BLOCK/ABORT without one: the call must then not reach the upstream, and the
        verdict's reason is the refusal to hand to the model.
        """
        policy = self._rules(tool)
        if not policy.active or policy.ignores(tool):
            return None, Verdict(Action.ALLOW, tool, 0, blocks=self._blocks)
        key = call_key(tool, arguments)
        if not self._in_flight:
            self._close_idle_window(now)
        if key == self._call and self._streak + 1 >= policy.block_threshold:
            return None, self._refuse(tool, now)
        if not self._in_flight:
            self._batch += 1
            self._next_slot = 0
        slot = self._next_slot
        self._next_slot += 1
        self._in_flight.add(slot)
        return Ticket(tool, key, self._batch, slot), Verdict(Action.ALLOW, tool, 0, blocks=self._blocks)

    def finish(self, ticket: Ticket, result: Mapping[str, Any], now: float) -> Verdict:
        """Judge the upstream's raw result for a forwarded call: ALLOW or WARN.

        Inside a batch only the call that completes it can be warned; the others are ALLOW
        with streak 0 (not compared). An ``isError`` result is invisible when errors are
        ignored. Verdict streak 0 always means "not compared".
        """
        allow = Verdict(Action.ALLOW, ticket.tool, 0, blocks=self._blocks)
        if not self._release(ticket):
            return allow
        visible = not (self._rules(ticket.tool).ignore_errors and result.get("isError") is True)
        if visible:
            self._pending = (ticket.call, result_key(result))
        if self._in_flight:
            return allow
        self._idle_since = now
        streak = self._settle()
        if not visible:
            return allow
        return self._graded(ticket.tool, streak)

    def abandon(self, ticket: Ticket, now: float) -> None:
        """Release a forwarded call that ended without a result; no streak moves for it."""
        if self._release(ticket) and not self._in_flight:
            self._idle_since = now
            self._settle()

    def _rules(self, tool: str) -> Policy:
        """The policy that judges calls to ``tool``."""
        return self._policy if self._policy_for is None else self._policy_for(tool)

    def _release(self, ticket: Ticket) -> bool:
        """Free the ticket's slot; False for a stale or already released ticket."""
        if ticket.batch != self._batch or ticket.slot not in self._in_flight:
            return False
        self._in_flight.discard(ticket.slot)
        if not self._in_flight:
            self._in_flight.clear()  # an emptied set keeps its grown table; clear() frees it
        return True

    def _close_idle_window(self, now: float) -> None:
        """Start a new request window after ``reset_after_seconds`` with nothing going on."""
        idle_since = self._idle_since
        if idle_since is not None and now - idle_since >= self._policy.reset_after_seconds:
            self._blocks = 0

    def _settle(self) -> int:
        """Fold the batch's last visible result into the streak; return the new streak."""
        pending = self._pending
        if pending is None:
            return self._streak
        self._pending = None
        call, result = pending
        if call == self._call and result == self._result:
            self._streak += 1
        else:
            self._call, self._result, self._streak = call, result, 1
        self._refused = 0
        return self._streak

    def _graded(self, tool: str, streak: int) -> Verdict:
        """ALLOW, or WARN with the model-visible warning once the streak reaches warn."""
        policy = self._rules(tool)
        if not policy.warn_threshold <= streak < policy.block_threshold:
            return Verdict(Action.ALLOW, tool, streak, blocks=self._blocks)
        if streak == policy.block_threshold - 1:
            when = "The next identical call will be refused."
        else:
            when = f"Identical calls will be refused from call #{policy.block_threshold}."
        reason = (
            f"Loop guard warning: `{tool}` has now been called {streak} times in a row with the "
            f"same arguments and returned the same result each time. {when} Change your "
            "approach (another tool or other arguments), or give your final answer if you "
            "already have what you need."
        )
        return Verdict(Action.WARN, tool, streak, reason, self._blocks)

    def _refuse(self, tool: str, now: float) -> Verdict:
        """Count a refusal and word it; ABORT once the window has seen enough of them (session rules)."""
        policy = self._policy
        self._refused += 1
        self._blocks += 1
        if not self._in_flight:
            self._idle_since = now
        number = self._streak + self._refused
        reason = (
            f"Refused by the loop guard: this is identical call #{number} to `{tool}`. The "
            f"last {self._streak} identical calls (same tool, same arguments) all returned "
            "the same result, so this call was not run. Do not repeat it: change the tool, "
            "the arguments or your approach, or give your final answer with what you have."
        )
        if policy.use_terminate or self._blocks >= policy.abort_threshold:
            reason += " The loop guard is closing this session now to stop the loop."
            return Verdict(Action.ABORT, tool, number, reason, self._blocks)
        return Verdict(Action.BLOCK, tool, number, reason, self._blocks)
