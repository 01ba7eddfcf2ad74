"""The live sessions of a guard's message relays, kept one way for every kind of session.

Whichever relay a session belongs to (the request-by-request relay to one streamable HTTP
server, whose ids are the server's, or the guard's own sessions in front of shared children,
a router or one remote server), the same rules hold: a session answers only to the token
that opened it; at most ``cap`` are live, and making room ends the least recently used one
with nothing in flight (none idle: no room, the client is told to come back); a session
unused for long ends; an ended id is remembered, so its requests are refused at once; the
sessions gauge moves once per session, however often it is ended. What ending a session
means beyond that (streams closed, the server told) is its relay's business.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["CLOSED_KEPT", "Gauge", "Session", "SessionTable"]

logger = logging.getLogger(__name__)

CLOSED_KEPT = 4096
"""Ended session ids remembered, so their requests are refused at once."""


class Session(Protocol):
    """What the table reads of a session: its id, the token that opened it, and its use."""

    session_id: bytes
    token: str
    in_flight: int
    """Requests of the session being served now: a session with any is never ended to make room or for idleness."""
    last_used: float
    """``time.monotonic()`` of its last use."""


class Gauge(Protocol):
    """The sessions gauge: one up when a session is added, one down when it goes."""

    def inc(self) -> None:
        """One more session."""
        ...

    def dec(self) -> None:
        """One session fewer."""
        ...


S = TypeVar("S", bound=Session)


def short(session: Session) -> str:
    """The id's first characters, for logs."""
    return session.session_id[:8].decode("latin-1")


class SessionTable(Generic[S]):
    """Live sessions by id, least recently used first, at most ``cap``; ended ids remembered."""

    def __init__(self, cap: int, gauge: Gauge, *, kept: int = CLOSED_KEPT) -> None:
        """``cap``: ``LOOP_GUARD_MAX_SESSIONS``; ``kept``: how many ended ids are remembered."""
        self.cap = cap
        self.gauge = gauge
        self.kept = kept
        self.live: OrderedDict[bytes, S] = OrderedDict()
        self.ended: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.live)

    def known(self, session_id: bytes) -> bool:
        """Whether the id is live or was ended (either way, not one to ask anyone about)."""
        return session_id in self.live or session_id in self.ended

    def get(self, session_id: bytes) -> S | None:
        """The live session with this id, whoever opened it (no use counted)."""
        return self.live.get(session_id)

    def lookup(self, session_id: bytes, token: str) -> S | None:
        """The live session with this id, opened with this token, now the most recently used; None: refused (404)."""
        session = self.live.get(session_id)
        if session is None or session.token != token:
            return None
        self.live.move_to_end(session_id)
        session.last_used = time.monotonic()
        return session

    def add(self, session: S) -> None:
        """A new session, the most recently used (room was made for it: see :meth:`room`)."""
        assert session.session_id not in self.live, "a live session is added once"
        self.live[session.session_id] = session
        self.gauge.inc()

    def evictable(self) -> S | None:
        """The least recently used session with nothing in flight, if any."""
        return next((session for session in self.live.values() if session.in_flight == 0), None)

    async def room(self, end: Callable[[S], Awaitable[object]]) -> bool:
        """Room for one more session: the least recently used idle one is ended with ``end``; False: none is idle."""
        if len(self.live) < self.cap:
            return True
        idle = self.evictable()
        if idle is None:
            return False
        logger.info("session limit reached: closing the least recently used idle session %s", short(idle))
        await end(idle)
        return True

    def idle(self, seconds: float) -> list[S]:
        """The sessions unused for ``seconds`` with nothing in flight."""
        cutoff = time.monotonic() - seconds
        return [session for session in self.live.values() if session.last_used < cutoff and session.in_flight == 0]

    async def expire(self, seconds: float, end: Callable[[S], Awaitable[object]]) -> None:
        """End with ``end`` the sessions unused for ``seconds`` with nothing in flight."""
        for session in self.idle(seconds):
            logger.info("session %s expired after %.0fs idle", short(session), seconds)
            await end(session)

    def forget(self, session: S) -> bool:
        """Drop a session without remembering its id (it is over elsewhere too); False when it was not live."""
        if self.live.get(session.session_id) is not session:
            return False
        del self.live[session.session_id]
        self.gauge.dec()
        return True

    def end(self, session: S) -> bool:
        """End a session: its id is refused from now on; False when it was not live (ended or forgotten before)."""
        was_live = self.forget(session)
        self.ended[session.session_id] = None
        self.ended.move_to_end(session.session_id)
        while len(self.ended) > self.kept:
            self.ended.popitem(last=False)
        return was_live
