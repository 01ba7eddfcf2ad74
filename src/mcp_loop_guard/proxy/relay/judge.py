"""Judging one agent's ``tools/call`` requests, whatever the transport: the one place verdicts are applied.

Every path through the guard (the stdio message relay, the HTTP relay, the SDK-based
aggregate of several upstreams) hands each call to :meth:`Judge.begin` before forwarding it
and its answer to :meth:`Judge.finish` (or :meth:`Judge.failed`, :meth:`Judge.dropped`).
The judge asks the detector through the agent's state store, logs names and counts (never
arguments or results, unless asked), counts metrics, writes the event log, and returns what
the model must get: the refusal, the warned result, or nothing to change.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_loop_guard import tracing
from mcp_loop_guard.core.detector import Call, Outcome, Ticket, call_of, error_outcome, outcome_of
from mcp_loop_guard.core.model import Action, Family, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy.relay.verdicts import refused, warned, without_notes
from mcp_loop_guard.store.agent import AgentLoop
from mcp_loop_guard.tracing import CallSpan

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.relay.events import EventLog

logger = logging.getLogger(__name__)

PolicyFor = Callable[[str, str], Policy]
"""(server, the server's own tool name) -> the policy that judges calls to it."""


CallObserver = Callable[[str, str, Verdict, float], None]
"""(server, tool, verdict, seconds): told about every judged tools/call, for metrics."""


@dataclass(slots=True)
class Pending:
    """A call on its way upstream."""

    server: str
    tool: str
    """The name the client called (exported name with several upstreams)."""
    call: Call
    policy: Policy
    ticket: Ticket | None
    verdict: Verdict
    started: float
    at: float
    arguments: object
    annotations: Mapping[str, Any] | None
    seq: int = 0
    """The agent's calls begun before this one, plus one: replay begins calls in this order."""
    begun: int = 0
    """The agent's calls begun when this call's end was handed to the state store (0: not yet)."""
    ended: float | None = None
    span: CallSpan | None = None
    """The call's trace span, when OpenTelemetry is on."""

    def trace_meta(self) -> dict[str, str]:
        """``_meta`` entries that carry this call's trace context to the upstream (none when tracing is off)."""
        return self.span.carrier() if self.span is not None else {}


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call refused: the result to answer with, and whether the session must end after it."""

    result: dict[str, Any]
    verdict: Verdict

    @property
    def abort(self) -> bool:
        """The refusal is the last thing the session sends."""
        return self.verdict.action is Action.ABORT


_UNJUDGED = Verdict(Action.ALLOW, "", 0)
"""A call's verdict until the state has judged it (replaced before the call goes on)."""

_NOT_A_LOOP = {
    Family.BUDGET: "its call budget is used up",
    Family.STORE: "the state store is unavailable and the guard fails closed",
}


def _error_type(answer: Mapping[str, Any] | None) -> str | None:
    """The span's ``error.type``: a JSON-RPC error, or a tool error result."""
    if answer is None:
        return None
    if "error" in answer:
        return "jsonrpc_error"
    result = answer.get("result")
    return "tool_error" if isinstance(result, Mapping) and result.get("isError") is True else None


def _clip(value: object, limit: int = 2000) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class Judge:
    """One agent's calls, judged."""

    def __init__(
        self,
        agent: AgentLoop,
        policies: PolicyFor,
        *,
        label: str,
        events: EventLog | None = None,
        observe: CallObserver | None = None,
        log_contents: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``label`` names the agent in the event log."""
        self.agent = agent
        self.policies = policies
        self.label = label
        self.events = events
        self.observe = observe
        self.log_contents = log_contents
        self.clock = clock
        self.tracing = tracing.current()
        self.aborted: Verdict | None = None
        """The verdict that ended the session, once it has."""

    async def begin(
        self,
        server: str,
        tool: str,
        upstream_tool: str,
        arguments: object,
        *,
        annotations: Mapping[str, Any] | None = None,
        trace: Mapping[str, object] | None = None,
    ) -> Pending | Refusal:
        """Judge a call before it is forwarded: the call goes on (Pending) or is answered now (Refusal).

        ``trace``: where the client's trace context may be (``traceparent``, ``tracestate``).
        """
        policy = self.policies(server, upstream_tool)
        arguments_map = arguments if isinstance(arguments, dict | Mapping) else None
        call = call_of(tool, arguments_map, annotations, trusted=policy.trust_annotations, rules=policy.arguments)
        now = self.clock()
        pending = Pending(
            server,
            tool,
            call,
            policy,
            None,
            _UNJUDGED,
            time.perf_counter(),
            now,
            arguments,
            annotations,
        )

        def seen(verdict: Verdict) -> None:
            pending.verdict, pending.seq = verdict, self.agent.begun
            if verdict.action >= Action.BLOCK:
                pending.begun = pending.seq
                self._record(pending, verdict, None)

        pending.ticket, verdict = await self.agent.begin(call, policy, now, seen)
        if self.log_contents:
            logger.info("call %r arguments (LOOP_GUARD_LOG_CONTENTS): %s", tool, _clip(arguments))
        if self.tracing is not None:
            pending.span = self.tracing.start(tool, server, self.label, trace)
        if verdict.action >= Action.BLOCK:
            self._report(pending, verdict, None)
            if verdict.action is Action.ABORT:
                self.aborted = verdict
            return Refusal(refused(verdict, policy), verdict)
        return pending

    async def finish(self, pending: Pending, result: dict[str, Any]) -> dict[str, Any] | None:
        """Judge the upstream's result: the result to send instead (warned), or None to send it unchanged."""
        if self.log_contents:
            logger.info("result of %r (LOOP_GUARD_LOG_CONTENTS): %s", pending.tool, _clip(result.get("content")))
        ticket = pending.ticket
        answer = {"result": result}
        if ticket is None or result.get("resultType") not in (None, "complete"):
            # Not judged: an ignored tool, or an interim result (input_required, a task handle):
            # the call's outcome is not known yet.
            await self._release(pending, answer)
            self._report(pending, pending.verdict, answer)
            return None
        seen = without_notes(result)
        verdict = await self._end(pending, ticket, outcome_of(seen, pending.policy), answer)
        if verdict.action is Action.WARN:
            return warned(seen, verdict, pending.policy)  # one note: the nearest guard's
        return None

    async def failed(self, pending: Pending, error: Mapping[str, Any]) -> None:
        """The upstream answered with a JSON-RPC error: the same error again and again is a loop too."""
        answer = {"error": dict(error)}
        if pending.ticket is None:
            self._record(pending, pending.verdict, answer)
            self._report(pending, pending.verdict, answer)
            return
        await self._end(pending, pending.ticket, error_outcome(error.get("code"), error.get("message")), answer)

    async def dropped(self, pending: Pending) -> None:
        """The call ended without an answer (cancelled, upstream gone, timed out): nothing moves.

        Its line has no outcome: replay releases the call where the guard did.
        """
        await self._release(pending, None)
        if pending.span is not None:
            pending.span.end(pending.verdict, error="no_answer")
        if self.observe is not None:
            self.observe(pending.server, pending.tool, pending.verdict, time.perf_counter() - pending.started)

    async def _end(self, pending: Pending, ticket: Ticket, outcome: Outcome, answer: dict[str, Any]) -> Verdict:
        """Fold the call's outcome; its line is written as the state takes it, in the state's order."""
        pending.ended = self.clock()

        def seen(verdict: Verdict) -> None:
            pending.begun = self.agent.begun
            self._record(pending, verdict, answer, outcome.key)

        verdict = await self.agent.finish(ticket, outcome, pending.ended, seen)
        self._report(pending, verdict, answer)
        return verdict

    async def _release(self, pending: Pending, answer: dict[str, Any] | None) -> None:
        """Let a call go without an outcome (ignored, interim, dropped), its line written in the state's order."""
        pending.ended = self.clock()

        def seen() -> None:
            pending.begun = self.agent.begun
            self._record(pending, pending.verdict, answer)

        if pending.ticket is None:
            seen()
        else:
            await self.agent.abandon(pending.ticket, pending.ended, seen)

    def _report(self, pending: Pending, verdict: Verdict, answer: dict[str, Any] | None) -> None:
        """Log a verdict that is not a plain allow, end its span and count it."""
        judged = verdict.judged
        if judged is not Action.ALLOW:
            family = (verdict.family or Family.IDENTICAL).value
            if verdict.shadow:
                logger.info(
                    "shadow mode: would %s tool %r (%s, count %d)",
                    judged.name.lower(),
                    verdict.tool,
                    family,
                    verdict.streak,
                )
            elif verdict.family in {Family.BUDGET, Family.STORE} and judged >= Action.BLOCK:
                logger.warning("refused tool %r: %s", verdict.tool, _NOT_A_LOOP[verdict.family])
            elif judged is Action.WARN:
                logger.info("warn tool %r: %s, count %d", verdict.tool, family, verdict.streak)
            else:
                logger.warning(
                    "%s tool %r: %s, count %d, refusal %d in this window",
                    judged.name.lower(),
                    verdict.tool,
                    family,
                    verdict.streak,
                    verdict.blocks,
                )
        if pending.span is not None:
            pending.span.end(verdict, error=_error_type(answer))
        if self.observe is not None:
            self.observe(pending.server, pending.tool, verdict, time.perf_counter() - pending.started)

    def _record(
        self, pending: Pending, verdict: Verdict, answer: dict[str, Any] | None, outcome: str | None = None
    ) -> None:
        """Write the call's event log line (when there is a log)."""
        if self.events is not None:
            self.events.record(self._line(pending, answer, outcome), verdict)

    def _line(self, pending: Pending, answer: dict[str, Any] | None, outcome: str | None) -> dict[str, Any]:
        line: dict[str, Any] = {
            "session": self.label,
            "server": pending.server,
            "tool": pending.tool,
            "at": round(pending.at, 3),
            "seq": pending.seq,
            "begun": pending.begun,
        }
        if pending.ended is not None:
            line["ended"] = round(pending.ended, 3)
        if self.events is not None and self.events.contents:
            line["arguments"] = pending.arguments if isinstance(pending.arguments, dict) else {}
            if answer is not None:
                line.update(answer)
        else:
            call = pending.call
            line["call"] = call.key
            if call.loose != call.key:
                line["loose"] = call.loose
            if call.waits:
                line["waits"] = True
            if call.acts:
                line["writes"] = True
            if outcome is not None:
                line["outcome"] = outcome
                error = (answer or {}).get("error")
                result = (answer or {}).get("result")
                line["isError"] = error is not None or (isinstance(result, dict) and result.get("isError") is True)
        if pending.ticket is not None:
            line["batch"] = pending.ticket.batch
        if pending.annotations:
            line["annotations"] = dict(pending.annotations)
        return line
