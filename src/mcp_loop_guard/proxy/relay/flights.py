"""The client's requests on their way upstream through the message relay, until each is answered.

A request is kept to route its answer, to refuse a reused id, and to answer it anyway when
the upstream never will: the call timeout, a dead child, shutdown (what the answer then says
is the lifecycle's: :mod:`.lifecycle`). The timeout restarts with each progress
notification, so a request without a progress token gets one of the guard's own; progress
on that token is for the guard only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.lifecycle import Call, cancellation, failure, timed_out, timeout_of
from mcp_loop_guard.proxy.upstream.channel import Channel, UpstreamDownError
from mcp_loop_guard.proxy.wire.eras import PROTOCOL_VERSION_META_KEY
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

logger = logging.getLogger(__name__)

_OWN_TOKEN = "mcp-loop-guard-progress-"  # noqa: S105 - a progress token prefix, not a secret
"""Progress tokens the guard adds (for the call timeout) to requests that carry none."""


@dataclass(slots=True)
class InFlight:
    """A client request on its way upstream."""

    method: str
    timeout: float
    """Seconds it may go without an answer or progress (``inf``: no limit)."""
    deadline: float
    token: object
    own_token: bool
    call: Call | None = None
    """A judged ``tools/call``."""
    first_page: bool = False
    modern: bool = False
    """A 2026-07-28 request: results the guard writes for it name their type."""
    task: str | None = None
    """``tasks/result`` or ``tasks/cancel`` of a task whose call the guard holds."""


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

    def track(
        self, message: Message, method: str, params: dict[str, Any], call_timeout: float | None = None
    ) -> InFlight:
        """The bookkeeping of one request; a progress token of the guard's own when only the timeout needs one.

        ``call_timeout``: the server's own, when the request goes to one of several.
        """
        timeout = timeout_of(method, call_timeout or self.limits.call_timeout)
        deadline = anyio.current_time() + timeout
        meta = params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        own = False
        if token is None and math.isfinite(timeout) and method not in ("initialize", "ping"):
            self._tokens += 1
            token, own = f"{_OWN_TOKEN}{self._tokens}", True
            message.body["params"] = {
                **params,
                "_meta": {**(meta if isinstance(meta, dict) else {}), "progressToken": token},
            }
            message.changed()
        modern = isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta
        return InFlight(method, timeout, deadline, token, own, modern=modern)

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
                if math.isfinite(flight.timeout):
                    flight.deadline = anyio.current_time() + flight.timeout
                return flight.own_token
        return False

    async def fail(self, ident: RequestId, reason: str, fault: str) -> None:
        """Answer a request the guard could not complete (see :func:`~.lifecycle.failure`)."""
        flight = self._flights.pop(ident, None)
        if flight is not None and flight.call is not None:
            await flight.call.dropped()
        if flight is not None and flight.method == "tools/call":
            logger.warning("tools/call failed: %s", reason)
        method = flight.method if flight is not None else None
        modern = flight is not None and flight.modern
        await self.send(failure(ident, method, reason, fault, modern=modern, server_info=self.server_info).line())

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
        try:
            await self.upstream.send_message(cancellation(ident))
        except UpstreamDownError as down:
            logger.debug("dropped a notifications/cancelled for the upstream: %s", down)
        await self.fail(ident, timed_out(self.upstream.label_for(ident), flight.method, flight.timeout), "timeout")
