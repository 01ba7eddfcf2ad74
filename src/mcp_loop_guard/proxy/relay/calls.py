"""A ``tools/call`` and its answer as the message relays judge them, whatever carries the messages.

The stdio relay and the HTTP relay both hand each ``tools/call`` request here before it goes
upstream, and its answer when it comes back: the request is refused (answered here, never
forwarded) or goes on with the judge's ticket, and the answer is passed on as its own bytes
unless a warning must be appended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_loop_guard.proxy.relay.flights import carry
from mcp_loop_guard.proxy.relay.judge import Judge, Pending, Refusal
from mcp_loop_guard.proxy.relay.tasks import wrong_shape
from mcp_loop_guard.proxy.relay.verdicts import complete
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message, RequestId
from mcp_loop_guard.trace_context import CARRIER_KEYS, checked_meta

__all__ = ["WRONG_SHAPE", "bad_call", "begin_call", "finish_call", "refusal_message"]

WRONG_SHAPE = "the upstream answered with a result of the wrong shape (its content must be a list)"


def bad_call(ident: RequestId, params: Mapping[str, Any]) -> Message | None:
    """The error for a ``tools/call`` whose name or arguments have the wrong type; None when they are right."""
    name, arguments = params.get("name"), params.get("arguments")
    if isinstance(name, str) and (arguments is None or isinstance(arguments, dict)):
        return None
    why = "the tool name must be a string" if not isinstance(name, str) else "arguments must be an object"
    return wire.error(ident, wire.INVALID_PARAMS, f"Invalid params: {why}")


async def begin_call(
    judge: Judge,
    server: str,
    message: Message,
    params: Mapping[str, Any],
    annotations: Mapping[str, Any] | None,
    *,
    carried: Mapping[str, str] | None = None,
) -> Pending | Refusal:
    """Judge a well-formed ``tools/call`` (see :func:`bad_call`) before it is forwarded.

    The client's trace context is its ``_meta``'s, else the one its transport ``carried``; a
    ``traceparent`` or ``tracestate`` in ``_meta`` that fails the W3C rules is taken out of
    the call. A call that goes on carries the guard's trace context in its ``_meta`` when
    tracing is on.
    """
    name = params["name"]
    sent = message.body.get("params")  # what goes upstream: the relay may have added to ``params`` already
    meta = sent.get("_meta") if isinstance(sent, dict) else None
    if isinstance(sent, dict) and isinstance(meta, dict) and (checked := checked_meta(meta)) is not None:
        message.body["params"] = {**sent, "_meta": checked}
        message.changed()
        meta = checked
    trace = meta if isinstance(meta, dict) and any(key in meta for key in CARRIER_KEYS) else carried
    decision = await judge.begin(server, name, name, params.get("arguments"), annotations=annotations, trace=trace)
    if isinstance(decision, Pending) and decision.span is not None:
        carry(message, decision.trace_meta())
    return decision


def refusal_message(ident: RequestId, refusal: Refusal, *, modern: bool, server_info: object = None) -> Message:
    """The answer standing in for a refused call."""
    return wire.result(ident, complete(refusal.result, modern=modern, server_info=server_info))


async def finish_call(judge: Judge, pending: Pending, message: Message) -> bool:
    """Judge the upstream's answer to a call, appending the warning to ``message`` when one is due.

    Returns False when the result has the wrong shape: the caller answers the call with an
    error instead (and the judge has let the call go, unjudged).
    """
    result = message.body.get("result")
    if isinstance(result, dict):
        if wrong_shape(result):
            await judge.dropped(pending)
            return False
        changed = await judge.finish(pending, result)
        if changed is not None:
            message.body["result"] = changed
            message.changed()
    else:
        await judge.failed(pending, message.body.get("error") or {})
    return True
