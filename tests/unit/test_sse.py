"""Server-sent events as the HTTP relay splits, reads and rewrites them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.proxy.wire import sse

STREAM = (
    b'event: message\nid: 1\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
    b": a comment keeps the stream alive\n\n"
    b'event: message\r\nid: 2\r\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\r\n\r\n'
)


def test_events_are_split_whole_with_their_blank_line() -> None:
    """Each event comes out as its own bytes, blank line included, whatever the line endings."""
    events = sse.EventSplitter(1 << 20).feed(STREAM)
    assert b"".join(events) == STREAM
    assert len(events) == 3
    assert events[2].endswith(b"\r\n\r\n")


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunking_gives_the_same_events(cuts: list[int]) -> None:
    """However the bytes arrive, the same events come out, none before its end."""
    points = sorted({0, len(STREAM), *cuts})
    splitter = sse.EventSplitter(1 << 20)
    events = [event for start, end in itertools.pairwise(points) for event in splitter.feed(STREAM[start:end])]
    assert events == sse.EventSplitter(1 << 20).feed(STREAM)
    assert splitter.pending == b""


def test_data_joins_data_lines_and_skips_events_without_any() -> None:
    """An event's data is its data lines joined by newlines; a comment has none."""
    assert sse.data_of(b"event: message\ndata: first\ndata:second\n\n") == b"first\nsecond"
    assert sse.data_of(b": keep-alive\n\n") is None
    assert sse.data_of(b"retry: 1000\n\n") is None


def test_other_data_keeps_the_events_name_and_id() -> None:
    """A rewritten event still says what it is and where a client may resume after it."""
    event = b'event: message\r\nid: 42\r\ndata: {"old":true}\r\n\r\n'
    rewritten = sse.with_data(event, b'{"new":true}')
    assert rewritten == b'event: message\nid: 42\ndata: {"new":true}\n\n'
    assert sse.data_of(rewritten) == b'{"new":true}'


def test_an_endless_event_is_refused() -> None:
    """An event that never ends cannot grow the guard past the limit."""
    splitter = sse.EventSplitter(100)
    splitter.feed(b"data: " + b"x" * 50)
    with pytest.raises(ValueError, match="over 100 bytes"):
        splitter.feed(b"x" * 60)


def test_an_event_of_the_guards_own() -> None:
    """The guard's own events look as MCP servers write them."""
    assert sse.encode(b"{}") == b"event: message\ndata: {}\n\n"
    assert sse.encode(b"{}", event_id=b"9") == b"event: message\nid: 9\ndata: {}\n\n"
