"""The one session table of the message relays: cap and eviction, token binding, expiry, ended ids, the gauge."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.proxy.downstream.session_table import SessionTable

pytestmark = pytest.mark.anyio

GAUGE = "loop_guard_active_sessions"
TEAM = "team"
"""The token every session here was opened with."""


@dataclass(eq=False)
class Held:
    """A session as the table reads it."""

    session_id: bytes
    token: str = TEAM
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)


@dataclass
class Rig:
    """A table with a real metrics gauge, and the sessions it was told to end."""

    cap: int = 2
    metrics: Metrics = field(default_factory=Metrics)
    ended: list[bytes] = field(default_factory=list)
    table: SessionTable[Held] = field(init=False)

    def __post_init__(self) -> None:
        self.table = SessionTable(self.cap, self.metrics.sessions, kept=3)

    async def end(self, session: Held) -> None:
        """What a relay does to end a session: the table forgets it, and the relay closes what it holds."""
        self.ended.append(session.session_id)
        self.table.end(session)

    def open(self, *ids: bytes) -> list[Held]:
        sessions = [Held(session_id) for session_id in ids]
        for session in sessions:
            self.table.add(session)
        return sessions

    @property
    def gauge(self) -> float | None:
        return self.metrics.registry.get_sample_value(GAUGE)


async def test_room_ends_the_least_recently_used_idle_session() -> None:
    """At the cap, room for one more ends the least recently used session with nothing in flight, no other."""
    rig = Rig(cap=3)
    a, b, _ = rig.open(b"a", b"b", b"c")
    a.in_flight = 1  # the oldest is busy: never the one ended
    assert rig.table.lookup(b"b", TEAM) is b  # b is used again: c is now the least recently used idle one

    assert await rig.table.room(rig.end)

    assert rig.ended == [b"c"]
    assert list(rig.table.live) == [b"a", b"b"]
    assert rig.table.lookup(b"c", TEAM) is None
    assert await rig.table.room(rig.end)  # below the cap now: nothing more ended
    assert rig.ended == [b"c"]


async def test_no_room_when_every_session_is_busy() -> None:
    """At the cap with every session in flight, there is no room (the client gets 503) and none is ended."""
    rig = Rig(cap=2)
    for session in rig.open(b"a", b"b"):
        session.in_flight = 1

    assert not await rig.table.room(rig.end)

    assert rig.ended == []
    assert list(rig.table.live) == [b"a", b"b"]
    assert rig.gauge == 2


async def test_a_session_answers_only_to_its_token() -> None:
    """Another token gets nothing for a live session's id (404), and the session stays live for its own."""
    rig = Rig()
    (a,) = rig.open(b"a")

    assert rig.table.lookup(b"a", "other") is None
    assert rig.table.lookup(b"a", "") is None
    assert rig.table.lookup(b"a", TEAM) is a
    assert rig.table.known(b"a")


async def test_sessions_idle_too_long_expire() -> None:
    """Expiry ends the sessions unused for longer than the idle time with nothing in flight, not the others."""
    rig = Rig(cap=5)
    old, busy, fresh = rig.open(b"old", b"busy", b"fresh")
    old.last_used = busy.last_used = time.monotonic() - 120
    busy.in_flight = 1

    await rig.table.expire(60, rig.end)

    assert rig.ended == [b"old"]
    assert list(rig.table.live) == [b"busy", b"fresh"]
    assert fresh.last_used > old.last_used


async def test_an_ended_id_is_refused_and_remembered() -> None:
    """An ended session is not found again, even by its token, and its id is known as ended (404 at once)."""
    rig = Rig()
    (a,) = rig.open(b"a")

    assert rig.table.end(a)

    assert rig.table.lookup(b"a", TEAM) is None
    assert rig.table.get(b"a") is None
    assert rig.table.known(b"a")
    assert not rig.table.known(b"never")


async def test_ended_ids_kept_are_bounded() -> None:
    """Only the newest ended ids are remembered (the bound given), the oldest forgotten first."""
    rig = Rig(cap=10)
    for session in rig.open(b"1", b"2", b"3", b"4"):
        rig.table.end(session)

    assert list(rig.table.ended) == [b"2", b"3", b"4"]


async def test_the_gauge_moves_once_per_session() -> None:
    """The sessions gauge goes up once per session added and down once, however often the session is ended."""
    rig = Rig(cap=5)
    a, b = rig.open(b"a", b"b")
    assert rig.gauge == 2

    assert rig.table.end(a)
    assert not rig.table.end(a)
    assert not rig.table.forget(a)
    assert rig.gauge == 1

    assert rig.table.forget(b)  # over elsewhere: not remembered as ended
    assert not rig.table.end(b)
    assert rig.gauge == 0
