"""The client's requests on their way upstream through the stdio relay, until each is answered.

A request is kept to route its answer, to refuse a reused id, and to answer it anyway when
the upstream never will: the call timeout, a dead child, shutdown. The timeout restarts
with each progress notification, so a request without a progress token gets one of the
guard's own; progress on that token is for the guard only. What the guard adds to a
request's ``_meta`` (that token, its trace context) is added here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.relay.judge import Judge, Pending
from mcp_loop_guard.proxy.relay.verdicts import complete, failed
from mcp_loop_guard.proxy.upstream.channel import Channel, UpstreamDownError
from mcp_loop_guard.proxy.upstream.stdio import HANDSHAKE_TIMEOUT
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message, RequestId
from mcp_loop_guard.trace_context import CARRIER_KEYS

logger = logging.getLogger(__name__)

MODERN_META = "io.modelcontextprotocol/protocolVersion"
"""The key every 2026-07-28 request carries in its ``_meta``."""
OPEN_ENDED = frozenset({"subscriptions/listen", "tasks/result"})
"""Requests that rightly stay open with no answer or progress: a listen stream lasts as long as the
client keeps it, and ``tasks/result`` waits for a task that its own time-to-live bounds."""
_OWN_TOKEN = "mcp-loop-guard-progress-"  # noqa: S105 - a progress token prefix, not a secret
"""Progress tokens the guard adds (for the call timeout) to requests that carry none."""


@dataclass(slots=True)
class InFlight:
    """A client request on its way upstream."""

    method: str
    deadline: float
    token: object
    own_token: bool
    judged: Pending | None = None
    first_page: bool = False
    modern: bool = False
    """A 2026-07-28 request: results the guard writes for it name their type."""
    task: str | None = None
    """``tasks/result`` or ``tasks/cancel`` of a task whose call the guard holds."""


def carry(message: Message, entries: dict[str, str]) -> None:
    """Put the guard's trace context in a request's ``_meta`` instead of the client's (for the upstream to continue)."""
    params = message.body.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    kept = {key: value for key, value in meta.items() if key not in CARRIER_KEYS} if isinstance(meta, dict) else {}
    message.body["params"] = {**params, "_meta": {**kept, **entries}}
    message.changed()


class Flights:
    """The requests in flight of one relayed client, with their call-timeout deadlines."""

    def __init__(
        self, upstream: Channel, limits: Limits, send: Callable[[bytes], Awaitable[None]], judge: Judge
    ) -> None:
        """``send`` writes a line to the client: the answer to a request the guard fails."""
        self.upstream = upstream
        self.limits = limits
        self.send = send
        self.judge = judge
        self._flights: dict[RequestId, InFlight] = {}
        self.server_info: object = None
        """The upstream's 2026-07-28 ``serverInfo``, stamped on the results the guard writes in that era."""
        self._tokens = 0
        self._wake = anyio.Event()
        self._sleeping_until = math.inf
        """When :meth:`watch` wakes next: only an earlier deadline needs to wake it sooner."""

    def __contains__(self, ident: object) -> bool:
        return ident in self._flights

    def track(self, message: Message, method: str, params: dict[str, Any]) -> InFlight:
        """The bookkeeping of one request; a progress token of the guard's own when only the timeout needs one."""
        timeout = None if method in OPEN_ENDED else self.limits.call_timeout
        if method == "initialize":
            timeout = timeout or HANDSHAKE_TIMEOUT
        deadline = anyio.current_time() + timeout if timeout else math.inf
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        own = False
        if token is None and timeout and method not in ("initialize", "ping"):
            self._tokens += 1
            token, own = f"{_OWN_TOKEN}{self._tokens}", True
            message.body["params"] = {
                **params,
                "_meta": {**(meta if isinstance(meta, dict) else {}), "progressToken": token},
            }
            message.changed()
        modern = isinstance(meta, dict) and MODERN_META in meta
        return InFlight(method, deadline, token, own, modern=modern)

    def add(self, ident: RequestId, flight: InFlight) -> None:
        """Keep a request until it is answered."""
        self._flights[ident] = flight
        if flight.deadline < self._sleeping_until:
            self._wake.set()

    def pop(self, ident: RequestId) -> InFlight | None:
        """The request an answer (or a cancellation) is for, no longer in flight."""
        return self._flights.pop(ident, None)

    def progressed(self, token: object) -> bool:
        """Progress restarts its request's timeout; True when the token is the guard's own (not for the client)."""
        for flight in self._flights.values():
            if flight.token == token:
                if self.limits.call_timeout and math.isfinite(flight.deadline):
                    flight.deadline = anyio.current_time() + self.limits.call_timeout
                return flight.own_token
        return False

    async def fail(self, ident: RequestId, reason: str, fault: str) -> None:
        """Answer a request the guard could not complete: an isError result for tools/call, else an error."""
        flight = self._flights.pop(ident, None)
        if flight is not None and flight.method == "tools/call":
            if flight.judged is not None:
                await self.judge.dropped(flight.judged)
            logger.warning("tools/call failed: %s", reason)
            result = complete(failed(reason), modern=flight.modern, server_info=self.server_info)
            await self.send(wire.result(ident, result).line())
            return
        await self.send(wire.error(ident, wire.INTERNAL_ERROR, reason, {wire.GUARD_FAULT: fault}).line())

    async def fail_all(self, reason: str, fault: str) -> None:
        """Answer every request in flight with the reason instead of leaving it hanging."""
        for ident in list(self._flights):
            await self.fail(ident, reason, fault)

    async def watch(self) -> None:
        """Cancel requests that go too long without an answer or progress (the call timeout)."""
        while True:
            self._sleeping_until = min((flight.deadline for flight in self._flights.values()), default=math.inf)
            self._wake = anyio.Event()
            with anyio.CancelScope(deadline=self._sleeping_until + 0.01):
                await self._wake.wait()
            now = anyio.current_time()
            for ident, flight in list(self._flights.items()):
                if flight.deadline <= now:
                    await self._time_out(ident, flight)

    async def _time_out(self, ident: RequestId, flight: InFlight) -> None:
        seconds = self.limits.call_timeout or HANDSHAKE_TIMEOUT
        if flight.method == "initialize":
            reason = f"upstream {self.upstream.label} did not answer initialize within {seconds:g}s"
        else:
            reason = (
                f"upstream {self.upstream.label} sent no answer or progress for {flight.method} within {seconds:g}s "
                "(call timeout); the request was cancelled"
            )
        cancel = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": ident, "reason": "timeout"},
        }
        try:
            await self.upstream.send_message(Message(cancel))
        except UpstreamDownError as down:
            logger.debug("dropped a notifications/cancelled for the upstream: %s", down)
        await self.fail(ident, reason, "timeout")
