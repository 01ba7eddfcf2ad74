"""One ``tools/call`` from its request to its end: the lifecycle every relay of the guard hands its calls to.

Checked (a name and arguments of the right types), judged with the tool's annotations,
refused here (an aborting refusal ends the session once it is out) or forwarded by the
relay, given a deadline that every sign of life from the upstream moves, and ended one of
three ways: answered (the result judged, a warning appended, a task handle held until the
task's result is fetched), failed (the guard answers an ``isError`` result the model can act
on), or dropped (cancelled, cut off: nothing moves). Whatever carries the messages (the
message relay, the request-by-request HTTP relay, the SDK's sessions) only moves bytes; the
call's fate is decided here.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.relay.judge import Judge, Pending, Refusal
from mcp_loop_guard.proxy.relay.tasks import HeldTasks, created_task, wrong_shape
from mcp_loop_guard.proxy.relay.verdicts import complete, failed
from mcp_loop_guard.proxy.upstream.backoff import HANDSHAKE_TIMEOUT
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message, RequestId
from mcp_loop_guard.trace_context import CARRIER_KEYS, checked_meta

__all__ = [
    "OPEN_ENDED",
    "Annotations",
    "Call",
    "Refused",
    "begin",
    "cancellation",
    "carry",
    "failure",
    "timeout_of",
]

OPEN_ENDED = frozenset({"subscriptions/listen", "tasks/result"})
"""Requests that rightly stay open with no answer or progress: a listen stream lasts as long as the
client keeps it, and ``tasks/result`` waits for a task that its own time-to-live bounds."""


Annotations = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any] | None]]
"""(tool, the call's params) -> the tool's annotations as its server listed them (listed now if nobody has)."""


def timeout_of(method: str | None, call_timeout: float | None) -> float:
    """Seconds a request may go without an answer or progress (``inf``: no limit).

    ``initialize`` is always bounded, by the call timeout or :data:`HANDSHAKE_TIMEOUT`.
    """
    if method in OPEN_ENDED:
        return math.inf
    if method == "initialize":
        return call_timeout or HANDSHAKE_TIMEOUT
    return call_timeout or math.inf


def timed_out(label: str, method: str, seconds: float) -> str:
    """Why a request the upstream left unanswered past its deadline was given up (see :func:`timeout_of`)."""
    if method == "initialize":
        return replies.no_initialize(label, seconds)
    return replies.no_answer(label, method, seconds)


@dataclass(frozen=True, slots=True)
class Refused:
    """The call is answered by the guard and never reaches the upstream."""

    answer: Message
    abort: bool = False
    """The refusal is the last thing the session sends."""


class Call:
    """A judged ``tools/call`` on its way upstream, until it is answered, failed or dropped."""

    __slots__ = ("judge", "pending")

    def __init__(self, judge: Judge, pending: Pending) -> None:
        """The judge's ticket ``pending`` for one call."""
        self.judge = judge
        self.pending = pending

    async def answered(self, answer: Message, tasks: HeldTasks | None = None) -> Message | None:
        """Judge the upstream's answer: the message to pass on (``answer``, a warning appended when due).

        An answer creating a task is held in ``tasks`` until the task's result is fetched (then
        judged like the call's own). None when the result has the wrong shape: the relay fails
        the call with :func:`failure` (the judge has let it go unjudged).
        """
        result = answer.body.get("result")
        if isinstance(result, dict):
            task = created_task(result) if tasks is not None else None
            if tasks is not None and task is not None:
                await tasks.hold(task, self.pending)
                return answer
            if wrong_shape(result):
                await self.judge.dropped(self.pending)
                return None
            changed = await self.judge.finish(self.pending, result)
            if changed is not None:
                answer.body["result"] = changed
                answer.changed()
        else:
            await self.judge.failed(self.pending, answer.body.get("error") or {})
        return answer

    async def dropped(self) -> None:
        """The call ended without an answer the guard could judge (cancelled, cut off, failed): nothing moves."""
        await self.judge.dropped(self.pending)


async def begin(
    judge: Judge,
    server: str,
    message: Message,
    *,
    tool: str | None = None,
    annotations: Annotations | None = None,
    carried: Mapping[str, str] | None = None,
    modern: bool = False,
    server_info: object = None,
) -> Call | Refused:
    """Check and judge a ``tools/call`` request before it is forwarded.

    ``tool``: the server's own name for the tool, when the client called it by another (an
    exported ``server__name``); ``annotations`` looks up the tool's (asked only of a call whose
    name and arguments have the right types). The client's trace context is its ``_meta``'s, else the one
    its transport ``carried``; a ``traceparent`` or ``tracestate`` in ``_meta`` that fails the
    W3C rules is taken out of the call. A call that goes on carries the guard's trace
    context in its ``_meta`` when tracing is on.
    """
    ident = message.id
    assert ident is not None
    params = message.body.get("params")
    params = params if isinstance(params, dict) else {}
    name, arguments = params.get("name"), params.get("arguments")
    if not isinstance(name, str) or (arguments is not None and not isinstance(arguments, dict)):
        why = replies.TOOL_NAME_NOT_TEXT if not isinstance(name, str) else replies.ARGUMENTS_NOT_OBJECT
        return Refused(wire.error(ident, wire.INVALID_PARAMS, replies.invalid_params(why)))
    meta = params.get("_meta")
    if isinstance(meta, dict) and (checked := checked_meta(meta)) is not None:
        message.body["params"] = params = {**params, "_meta": checked}
        message.changed()
        meta = checked
    trace = meta if isinstance(meta, dict) and any(key in meta for key in CARRIER_KEYS) else carried
    found = await annotations(name, params) if annotations is not None else None
    decision = await judge.begin(server, name, tool or name, arguments, annotations=found, trace=trace)
    if isinstance(decision, Refusal):
        answer = wire.result(ident, complete(decision.result, modern=modern, server_info=server_info))
        return Refused(answer, decision.abort)
    if decision.span is not None:
        carry(message, decision.trace_meta())
    return Call(judge, decision)


def carry(message: Message, entries: dict[str, str]) -> None:
    """Put the guard's trace context in a request's ``_meta`` instead of the client's (for the upstream to continue)."""
    params = message.body.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    kept = {key: value for key, value in meta.items() if key not in CARRIER_KEYS} if isinstance(meta, dict) else {}
    message.body["params"] = {**params, "_meta": {**kept, **entries}}
    message.changed()


def failure(
    ident: RequestId, method: str | None, reason: str, fault: str, *, modern: bool = False, server_info: object = None
) -> Message:
    """The guard's answer to a request it could not complete: an ``isError`` result for a call, else an error.

    A model acts on a tool's error result; a JSON-RPC error would end its turn. ``fault``
    (``gone``, ``timeout``, ``too-large``...) marks the error as the guard's, not the upstream's.
    """
    if method == "tools/call":
        return wire.result(ident, complete(failed(reason), modern=modern, server_info=server_info))
    return wire.error(ident, wire.INTERNAL_ERROR, reason, {wire.GUARD_FAULT: fault})


def cancellation(ident: RequestId) -> Message:
    """The ``notifications/cancelled`` the upstream gets for a request the guard gave up on (its deadline passed)."""
    return Message(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": ident, "reason": "timeout"}}
    )
