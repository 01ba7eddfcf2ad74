"""Server-sent events as streamable HTTP carries MCP messages: split as they arrive, written back as they came.

An event is relayed as the bytes it arrived in; only the one event the guard rewrites (a
judged result with a warning) is written anew, keeping its ``event`` and ``id`` fields so a
client can still resume the stream after it.
"""

from __future__ import annotations

import re

__all__ = ["EventSplitter", "data_of", "encode", "field_of", "with_data"]

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_LINE = re.compile(rb"\r\n|\n|\r")


class EventSplitter:
    """Whole events out of a byte stream, each with the blank line that ends it."""

    def __init__(self, limit: int) -> None:
        """``limit``: the most bytes one event may take (an endless event would otherwise grow without end)."""
        self.limit = limit
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events completed by ``chunk``.

        Raises:
            ValueError: an event grew over the limit.
        """
        buffer = self._buffer + chunk if self._buffer else chunk
        events: list[bytes] = []
        start = 0
        for found in _BOUNDARY.finditer(buffer):
            events.append(buffer[start : found.end()])
            start = found.end()
        self._buffer = buffer[start:]
        if len(self._buffer) > self.limit:
            msg = f"an event of over {self.limit} bytes"
            raise ValueError(msg)
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet complete (what a stream that ends leaves over)."""
        return self._buffer


def data_of(event: bytes) -> bytes | None:
    """The event's data (its ``data`` lines joined by newlines); None for an event without data (a comment, a retry)."""
    if b"data" not in event:
        return None
    parts = [line[5:].removeprefix(b" ") for line in _LINE.split(event) if line.startswith(b"data:") or line == b"data"]
    return b"\n".join(parts) if parts else None


def field_of(event: bytes, name: bytes) -> bytes | None:
    """The value of one field of the event (its last ``id`` or ``retry``); None when it has none."""
    if name not in event:
        return None
    prefix = name + b":"
    found = None
    for line in _LINE.split(event):
        if line.startswith(prefix):
            found = line[len(prefix) :].removeprefix(b" ")
        elif line == name:
            found = b""
    return found


def with_data(event: bytes, data: bytes) -> bytes:
    """The same event (its ``event``, ``id`` and ``retry`` fields) carrying other data."""
    kept = [line for line in _LINE.split(event) if line and not line.startswith((b"data:", b":")) and line != b"data"]
    return b"\n".join([*kept, b"data: " + data]) + b"\n\n"


def encode(data: bytes, *, event_id: bytes | None = None) -> bytes:
    """A ``message`` event holding one JSON-RPC message, as MCP servers write them."""
    head = b"event: message\n" + (b"id: " + event_id + b"\n" if event_id is not None else b"")
    return head + b"data: " + data + b"\n\n"
