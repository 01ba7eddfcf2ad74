"""Event logs of the shared-child HTTP relay: what a cut stream missed, kept for the client to resume.

The logs are driven here as the relay drives them: lines put as the child sends them, and
written out as ASGI messages the way uvicorn receives them, with a client that goes away in
the middle.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import pytest

from mcp_loop_guard.proxy.downstream.http.event_log import KEPT, PING, EventLog, parse_event_id, primes, serve_log
from mcp_loop_guard.proxy.downstream.http.muxed_sessions import MuxedSession
from mcp_loop_guard.proxy.wire.messages import Message

pytestmark = pytest.mark.anyio


class Response:
    """One ASGI response as the server writes it, and the client's end of its connection."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.left = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    async def receive(self) -> dict[str, Any]:
        await self.left.wait()
        return {"type": "http.disconnect"}

    @property
    def events(self) -> list[tuple[bytes | None, bytes]]:
        """(id, data) of every event written."""
        body = b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")
        found = []
        for event in body.split(b"\n\n")[:-1]:
            lines = event.split(b"\n")
            fields = dict(line.split(b": ", 1) if b": " in line else (line.rstrip(b":"), b"") for line in lines)
            found.append((fields.get(b"id"), fields.get(b"data", b"")))
        return found

    @property
    def ended(self) -> bool:
        return any(m["type"] == "http.response.body" and not m.get("more_body", False) for m in self.messages)


def call(ident: int, token: str | None = None) -> Message:
    params: dict[str, Any] = {"name": "slow", "arguments": {}}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return Message({"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params})


def progress(token: str, step: int) -> bytes:
    return b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"%s","progress":%d}}\n' % (
        token.encode(),
        step,
    )


def answer(ident: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}\n' % ident


def session() -> MuxedSession:
    return MuxedSession(b"s" * 32, "", view=None)  # type: ignore[arg-type]  # routing needs no child


async def test_a_stream_cut_before_the_answer_is_resumed_after_its_last_event() -> None:
    s = session()
    log = s.opened(call(7, "p"))
    first = Response()
    async with anyio.create_task_group() as tg:
        finished: list[bool] = []

        async def serve() -> None:
            finished.append(await serve_log(log, 0, [], first.receive, first.send, prime=True))

        tg.start_soon(serve)
        await s.send(progress("p", 1))
        await s.send(progress("p", 2))
        await anyio.wait_all_tasks_blocked()
        first.left.set()  # the client's connection drops
    assert finished == [False]
    assert not first.ended
    assert [event_id for event_id, _ in first.events] == [b"1/0", b"1/1", b"1/2"]  # the priming event first

    await s.send(progress("p", 3))  # while no one reads: the log still takes them, and the answer
    await s.send(answer(7))
    assert 7 not in s.streams  # the request is over for routing; its log waits in the session
    resumed = Response()
    with anyio.fail_after(5):
        assert await serve_log(s.logs[1], 1, [], resumed.receive, resumed.send)
    assert [event_id for event_id, _ in resumed.events] == [b"1/2", b"1/3", b"1/4"]
    assert resumed.events[-1][1] == answer(7).rstrip(b"\n")
    assert resumed.ended


async def test_a_resume_takes_the_log_over_from_a_response_whose_client_is_gone_unseen() -> None:
    """A proxy cut the client's stream and the guard has not seen it yet: the resuming GET wins."""
    s = session()
    log = s.opened(call(1))
    stale, fresh = Response(), Response()
    async with anyio.create_task_group() as tg:
        results: dict[str, bool] = {}

        async def serve(name: str, response: Response, after: int) -> None:
            results[name] = await serve_log(log, after, [], response.receive, response.send)

        tg.start_soon(serve, "stale", stale, 0)
        await anyio.wait_all_tasks_blocked()
        assert log.following
        with anyio.fail_after(5):
            await log.take_over()
        assert not log.following
        tg.start_soon(serve, "fresh", fresh, 0)
        await anyio.wait_all_tasks_blocked()
        await s.send(answer(1))
    assert results == {"stale": False, "fresh": True}
    assert fresh.events == [(b"1/1", answer(1).rstrip(b"\n"))]


async def test_what_belongs_to_no_request_waits_in_the_get_streams_log_and_replays_from_an_id() -> None:
    s = session()
    note = b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n'
    await s.send(note)  # no stream open: kept for the GET stream
    first = Response()
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_log, s.listener, s.listener.written, [], first.receive, first.send)
        await anyio.wait_all_tasks_blocked()
        await s.send(note)
        await anyio.wait_all_tasks_blocked()
        first.left.set()
    assert [event_id for event_id, _ in first.events] == [b"0/1", b"0/2"]
    await s.send(note)
    again = Response()  # the client missed 0/2 (its connection died with it in flight)
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_log, s.listener, 1, [], again.receive, again.send)
        await anyio.wait_all_tasks_blocked()
        s.close_streams()  # the session ends: the stream ends after what it holds
    assert [event_id for event_id, _ in again.events] == [b"0/2", b"0/3"]
    assert again.ended


async def test_a_request_without_a_session_gets_a_notification_that_comes_before_its_stream_is_written() -> None:
    """A request without a session (it has no GET stream) keeps a notification that beats its stream's first write.

    A 2026-07-28 listen stream's acknowledgement can come back before the response starts to
    be written: it belongs to the request, whose client waits for it there.
    """
    s = MuxedSession(b"", "", view=None)  # type: ignore[arg-type]  # routing needs no child
    log = s.opened(call(7))
    acknowledged = b'{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}\n'
    await s.send(acknowledged)  # before anything writes the request's stream
    await s.send(answer(7))
    response = Response()
    await serve_log(log, 0, [], response.receive, response.send)
    assert [data for _, data in response.events] == [acknowledged.rstrip(b"\n"), answer(7).rstrip(b"\n")]


async def test_a_request_of_a_followed_stream_is_preferred_over_a_cut_one() -> None:
    """The child asks the client something: on a stream that is being read, not on one nobody reads."""
    s = session()
    cut = s.opened(call(1))
    read = s.opened(call(2))
    response = Response()
    async with anyio.create_task_group() as tg:
        tg.start_soon(serve_log, read, 0, [], response.receive, response.send)
        await anyio.wait_all_tasks_blocked()
        await s.send(b'{"jsonrpc":"2.0","id":"c1","method":"sampling/createMessage","params":{}}\n')
        await anyio.wait_all_tasks_blocked()
        response.left.set()
    assert len(response.events) == 1
    assert cut.last == 0
    # With no stream read, a newer cut one takes it, for the client to get on resuming.
    await s.send(b'{"jsonrpc":"2.0","id":"c2","method":"sampling/createMessage","params":{}}\n')
    assert read.last == 2


async def test_a_log_keeps_its_newest_events_and_a_session_its_newest_logs() -> None:
    log = EventLog(3)
    for n in range(KEPT + 10):
        log.put(b"%d" % n)
    log.end()
    replayed = [number async for number, _ in log.follow(0)]
    assert replayed == list(range(11, KEPT + 11))  # the oldest went; the rest replays in order
    assert [number async for number, _ in log.follow(KEPT + 5)] == list(range(KEPT + 6, KEPT + 11))

    s = session()
    for ident in range(40):
        log = s.opened(call(ident))
        await s.send(answer(ident))
    assert sorted(s.logs) == list(range(25, 41))  # answered but never written out: the newest 16 are kept


def test_event_ids_are_read_back_and_anything_else_is_refused() -> None:
    assert parse_event_id(b"12/345") == (12, 345)
    assert parse_event_id(b" 0/7 ") == (0, 7)
    for bad in (b"", b"12", b"a/1", b"1/b", b"1/2/3", b"-1/2", b"1/" + b"9" * 50):
        assert parse_event_id(bad) is None, bad
    assert primes(b"2025-11-25")
    assert not primes(b"2025-06-18")
    assert not primes(None)


async def test_a_silent_stream_carries_comments_until_its_next_event() -> None:
    """Proxies cut event streams that stay silent (nginx: after 60 s); a comment each ``ping`` seconds keeps them."""
    s = session()
    log = s.opened(call(1))
    response = Response()
    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(serve_log, log, 0, [], response.receive, response.send, ping=0.05))
        await anyio.sleep(0.3)
        await s.send(answer(1))
    body = b"".join(m.get("body", b"") for m in response.messages if m["type"] == "http.response.body")
    head, _, rest = body.partition(b"event: message")
    assert head.count(PING) >= 3
    assert head == PING * head.count(PING)  # nothing but whole comments before the answer
    assert b"data: " + answer(1).rstrip(b"\n") in rest
    assert response.ended
