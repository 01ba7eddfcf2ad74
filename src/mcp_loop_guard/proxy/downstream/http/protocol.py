"""The HTTP connection layer: slow clients cut, excess connections shed, descriptors kept in hand.

uvicorn has no limit on the time a client may take to send its request headers or body, so
a few thousand sockets trickling bytes would hold the guard's descriptors forever. This
protocol closes a connection whose request line and headers are not complete within the
header timeout, or whose body is not complete within the body timeout after its headers
(the app answers a POST body that is late 408 a moment before; this also ends bodies no app
reads, and those still coming after the answer). At the connection cap it makes room by
closing the oldest connection that has not yet sent a whole request, headers or body (a
slow one), before refusing a newcomer with 503.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - uvicorn's protocols are asyncio protocols
import logging
import resource
import time
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

_SHED = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
BODY_GRACE = 1.0
"""Seconds past the body timeout before the connection is closed: the app's own 408 goes first."""


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with header and body timeouts and a connection cap (set on the class per server)."""

    header_timeout: ClassVar[float] = 10.0
    body_timeout: ClassVar[float] = 30.0
    max_connections: ClassVar[int] = 500
    waiting: ClassVar[dict[GuardedH11, float]] = {}
    """Connections still waiting for a complete request (headers or body), with when the wait began (oldest first)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """As uvicorn's; plus the header and body timers."""
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Count the connection; at the cap, cut the oldest slow one, or refuse this one."""
        if len(self.connections) >= self.max_connections and not self._shed_slowest():
            transport.write(_SHED)
            transport.close()
            return
        super().connection_made(transport)
        self._await_headers()

    def _await_headers(self) -> None:
        self.waiting[self] = time.monotonic()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _headers_too_slow(self) -> None:
        self.waiting.pop(self, None)
        if self.transport is not None and not self.transport.is_closing():
            logger.debug("closed a connection that sent no complete request headers in %gs", self.header_timeout)
            self.transport.close()

    def _headers_done(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _await_body(self) -> None:
        """Headers in, body still coming: the connection stays among the slow ones, on the body's clock."""
        self._headers_done()
        self.waiting.setdefault(self, time.monotonic())
        if self._body_timer is None:
            self._body_timer = self.loop.call_later(self.body_timeout + BODY_GRACE, self._body_too_slow)

    def _body_too_slow(self) -> None:
        self._body_timer = None
        self.waiting.pop(self, None)
        if self.transport is not None and not self.transport.is_closing():
            logger.debug("closed a connection whose request body was not complete in %gs", self.body_timeout)
            self.transport.close()

    def _request_done(self) -> None:
        """The whole request is in (or the connection is gone): no clock runs, and it is not a slow one."""
        self._headers_done()
        self.waiting.pop(self, None)
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _shed_slowest(self) -> bool:
        """Close the connection waiting longest for its headers; False when none can be closed."""
        while self.waiting:
            slow = next(iter(self.waiting))
            del self.waiting[slow]
            if slow.transport is not None and not slow.transport.is_closing():
                slow.transport.close()
                return True
        return False

    def handle_events(self) -> None:
        """Move from the header clock to the body clock, and stop it once the whole request is in."""
        super().handle_events()
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._await_body()
        elif state is not h11.IDLE:
            self._request_done()

    def on_response_complete(self) -> None:
        """A kept-alive connection waits for its next request's headers again (once the body it was sending is in)."""
        if not self.transport.is_closing() and self.conn.their_state is not h11.SEND_BODY:
            self._request_done()
            self._await_headers()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        """Forget the connection."""
        self._request_done()
        super().connection_lost(exc)


def protocol_class(*, header_timeout: float, body_timeout: float, max_connections: int) -> type[GuardedH11]:
    """A protocol class with these limits (one per server: the limits are class attributes)."""
    limits = {"header_timeout": header_timeout, "body_timeout": body_timeout, "max_connections": max_connections}
    return type("LimitedH11", (GuardedH11,), {**limits, "waiting": {}})


def raise_open_file_limit() -> int:
    """Raise the soft limit on open descriptors to the hard one; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft
        return target
    return soft
