"""The messages in a streamable HTTP answer: one JSON body, or the events of a stream, as they arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from mcp_loop_guard.proxy.upstream.http11 import Response
from mcp_loop_guard.proxy.wire import sse
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import Message, RequestId, parse

__all__ = ["EVENTS", "JSON", "Resume", "drain", "read_bounded", "read_messages"]

JSON = b"application/json"
EVENTS = b"text/event-stream"


@dataclass
class Resume:
    """Where an event stream can be picked up again: its last event id, and the wait the server asked for."""

    last_id: bytes | None = None
    retry: float | None = None
    """Seconds, from the stream's ``retry`` field."""

    def saw(self, event: bytes) -> None:
        """Note an event's ``id`` and ``retry`` fields."""
        event_id = sse.field_of(event, b"id")
        if event_id is not None:
            self.last_id = event_id or None
        retry = sse.field_of(event, b"retry")
        if retry is not None and retry.isdigit():
            self.retry = int(retry) / 1000


async def read_messages(
    response: Response, ident: RequestId | None, limit: int, resume: Resume | None = None
) -> AsyncIterator[Message | Oversized]:
    """The JSON-RPC messages of one answer, in order; an :class:`Oversized` for one over ``limit`` bytes.

    A refusal at the HTTP level (a 4xx with a JSON-RPC error naming no id) is the answer to
    the request ``ident`` that was refused. ``resume`` follows an event stream's ids.
    """
    content_type = (response.header(b"content-type") or b"").lower()
    if content_type.startswith(EVENTS):
        splitter = sse.EventSplitter(limit)
        try:
            async for chunk in response.chunks():
                for event in splitter.feed(chunk):
                    if resume is not None:
                        resume.saw(event)
                    data = sse.data_of(event)
                    parsed = parse(data) if data else None
                    if isinstance(parsed, Message):
                        yield parsed
        except ValueError:
            yield Oversized(limit, ident)
        return
    raw = await read_bounded(response, limit)
    if raw is None:
        yield Oversized(_length(response, limit), ident)
        return
    parsed = parse(raw) if raw else None
    if isinstance(parsed, Message):
        if not response.is_success and parsed.is_response and parsed.id is None and ident is not None:
            parsed.body["id"] = ident
            parsed.changed()
        yield parsed


async def read_bounded(response: Response, limit: int) -> bytes | None:
    """The whole body, or None once it grows over ``limit`` bytes (the rest is left unread)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.chunks():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _length(response: Response, limit: int) -> int:
    """The body's declared length, or just over the limit when it has none."""
    declared = response.header(b"content-length")
    return int(declared) if declared is not None and declared.strip().isdigit() else limit + 1


async def drain(response: Response) -> None:
    """Read an answer to its end (so its connection can serve the next request)."""
    async for _ in response.chunks():
        pass
