"""What a session's event streams carry, kept so that a client whose stream was cut can resume it.

Every event a session's stream carries gets an id, ``<stream>/<n>``, unique in the session
(stream 0 is the session's GET stream). A request's log lives until its stream has been
written to the end. A stream cut before that (the client's connection dropped, a proxy
timed it out) goes on taking what belongs to its request, the answer included, and a GET
whose ``Last-Event-ID`` names one of its events gets the rest: the streamable HTTP
transport's resumability, as the SDK client uses it. The call is not made again.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator
from itertools import islice

import anyio
from starlette.types import Receive, Send

from mcp_loop_guard.proxy.downstream.http.replies import EVENTS, json_reply, until_disconnected
from mcp_loop_guard.proxy.wire import sse
from mcp_loop_guard.proxy.wire.messages import Message

__all__ = ["KEPT", "EventLog", "parse_event_id", "primes", "serve_log", "single_answer"]

KEPT = 256
"""Events a log keeps (the oldest go first: a resumed stream of a very chatty call may miss early progress)."""

PING = b": ping\n\n"
"""An SSE comment: no event for the client, bytes on the wire for a proxy's idle timer."""

PRIMED_SINCE = b"2025-11-25"
"""The first protocol version whose clients read an event without data (the priming event)."""


class EventLog:
    """The events of one stream: each line with its number, and a wake-up for whoever writes them out."""

    __slots__ = ("_released", "_stop", "_wake", "done", "events", "following", "last", "number", "written")

    def __init__(self, number: int) -> None:
        """``number`` is the stream's, in its session (0: the GET stream)."""
        self.number = number
        self.events: deque[tuple[int, bytes]] = deque(maxlen=KEPT)
        self.last = 0
        """The newest event's number (0: none yet; the priming event's id)."""
        self.written = 0
        """The newest event written to a response (what a GET without ``Last-Event-ID`` goes on from)."""
        self.done = False
        """No more events come: the request's answer is in, or its session ended."""
        self.following = False
        """A response is writing this log out now."""
        self._wake: anyio.Event | None = None
        self._stop: anyio.CancelScope | None = None
        self._released: anyio.Event | None = None

    def put(self, line: bytes) -> None:
        """One more event."""
        self.last += 1
        self.events.append((self.last, line))
        self._poke()

    def end(self) -> None:
        """The last event is in."""
        self.done = True
        self._poke()

    def event_id(self, number: int) -> bytes:
        """The id of this log's event ``number``."""
        return b"%d/%d" % (self.number, number)

    async def follow(self, after: int, *, ping: float = 0) -> AsyncIterator[tuple[int, bytes]]:
        """Every kept event after ``after``, then each as it comes, until the log is done.

        With ``ping``, each ``ping`` seconds without an event yield ``(0, b"")``.
        """
        while True:
            if self.events and self.last > after:
                first = self.events[0][0]
                for number, line in list(islice(self.events, max(after + 1 - first, 0), None)):
                    after = number
                    yield number, line
                continue
            if self.done:
                return
            self._wake = wake = anyio.Event()
            with anyio.move_on_after(ping or math.inf):
                await wake.wait()
            if not wake.is_set():
                yield 0, b""

    async def take_over(self) -> None:
        """Stop the response writing this log, if one is: its client resumed, so that stream is dead to it.

        The guard may not have seen the old connection drop yet (a proxy between them cut it).
        """
        while self.following and self._stop is not None and self._released is not None:
            self._stop.cancel()
            await self._released.wait()

    def _poke(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = None


def parse_event_id(value: bytes) -> tuple[int, int] | None:
    """``(stream, event)`` of an id this guard gave; None for anything else."""
    stream, slash, event = value.strip().partition(b"/")
    if not slash or not stream.isdigit() or not event.isdigit() or len(value) > 40:
        return None
    return int(stream), int(event)


async def serve_log(
    log: EventLog,
    after: int,
    headers: list[tuple[bytes, bytes]],
    receive: Receive,
    send: Send,
    *,
    ids: bool = True,
    prime: bool = False,
    ping: float = 0,
) -> bool:
    """Write ``log``'s events after ``after`` as an event stream until it is done; False if the client left first.

    Without ``ids`` (a request of no session, which nothing could resume) the events carry
    none. With ``prime``, the stream opens with an event that carries only an id, so a client
    cut before the first message can still resume. Each ``ping`` seconds without an event
    (0: never) the stream carries a comment, which clients skip and proxies take for traffic.
    """
    headers = [(b"content-type", EVENTS), (b"cache-control", b"no-cache"), *headers]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    log.following = True
    log._released = released = anyio.Event()
    finished = False
    try:
        async with anyio.create_task_group() as tg:
            log._stop = tg.cancel_scope

            tg.start_soon(until_disconnected, receive, tg.cancel_scope)
            if prime:
                await send({"type": "http.response.body", "body": _priming(log, after), "more_body": True})
            async for number, line in log.follow(after, ping=ping):
                if not number:
                    await send({"type": "http.response.body", "body": PING, "more_body": True})
                    continue
                body = sse.encode(line.rstrip(b"\n"), event_id=log.event_id(number) if ids else None)
                await send({"type": "http.response.body", "body": body, "more_body": True})
                log.written = number
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            finished = True
            tg.cancel_scope.cancel()
    finally:
        log.following = False
        log._stop = None
        released.set()
    return finished


async def single_answer(log: EventLog, headers: list[tuple[bytes, bytes]], send: Send) -> None:
    """The answer alone as a JSON body (for a client that takes no event stream); the rest is dropped."""
    answer = b""
    async for _, line in log.follow(0):
        answer = line
    await json_reply(send, 200, Message({}, answer.rstrip(b"\n")), headers)


def _priming(log: EventLog, after: int) -> bytes:
    return b"event: message\nid: " + log.event_id(after) + b"\ndata: \n\n"


def primes(version: bytes | None) -> bool:
    """Whether a client of this version reads a priming event (older ones would take its empty data for a message)."""
    return version is not None and version >= PRIMED_SINCE
