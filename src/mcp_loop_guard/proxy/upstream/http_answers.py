"""The messages in a streamable HTTP answer: one JSON body, or the events of a stream, as they arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator

from mcp_loop_guard.proxy.upstream.http11 import Response
from mcp_loop_guard.proxy.wire import sse
from mcp_loop_guard.proxy.wire.lines import Oversized
from mcp_loop_guard.proxy.wire.messages import Message, RequestId, parse

__all__ = ["EVENTS", "JSON", "drain", "read_messages"]

JSON = b"application/json"
EVENTS = b"text/event-stream"


async def read_messages(response: Response, ident: RequestId | None, limit: int) -> AsyncIterator[Message | Oversized]:
    """The JSON-RPC messages of one answer, in order; an :class:`Oversized` for one over ``limit`` bytes.

    A refusal at the HTTP level (a 4xx with a JSON-RPC error naming no id) is the answer to
    the request ``ident`` that was refused.
    """
    content_type = (response.header(b"content-type") or b"").lower()
    if content_type.startswith(EVENTS):
        splitter = sse.EventSplitter(limit)
        try:
            async for chunk in response.chunks():
                for event in splitter.feed(chunk):
                    data = sse.data_of(event)
                    parsed = parse(data) if data else None
                    if isinstance(parsed, Message):
                        yield parsed
        except ValueError:
            yield Oversized(limit, ident)
        return
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.chunks():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
    if size > limit:
        yield Oversized(size, ident)
        return
    parsed = parse(b"".join(chunks)) if size else None
    if isinstance(parsed, Message):
        if not response.is_success and parsed.is_response and parsed.id is None and ident is not None:
            parsed.body["id"] = ident
            parsed.changed()
        yield parsed


async def drain(response: Response) -> None:
    """Read an answer to its end (so its connection can serve the next request)."""
    async for _ in response.chunks():
        pass
