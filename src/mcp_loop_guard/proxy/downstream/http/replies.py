"""Answers of the HTTP relay written to the client, and the upstream's answers read within bounds."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from starlette.types import Receive, Send

from mcp_loop_guard import __version__, codec
from mcp_loop_guard.proxy.upstream.exchange import HttpExchange, Response, UpstreamHttpError, forwarded_response_headers
from mcp_loop_guard.proxy.upstream.http_answers import EVENTS, JSON, read_bounded, read_messages
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.eras import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    HANDSHAKE_PROTOCOL_VERSIONS,
    MODERN_PROTOCOL_VERSIONS,
    PROTOCOL_VERSION_META_KEY,
)
from mcp_loop_guard.proxy.wire.messages import BadLine, Message

__all__ = [
    "ASK_TIMEOUT",
    "EVENTS",
    "JSON",
    "Handshake",
    "HandshakeRefusedError",
    "Headers",
    "handshake",
    "is_modern",
    "json_reply",
    "learn_tools",
    "opens_sessions",
    "read_answer",
    "read_body",
    "read_bounded",
    "read_posted",
    "relay_plain",
    "speaks_modern",
    "until_disconnected",
]

logger = logging.getLogger(__name__)

Headers = Sequence[tuple[bytes, bytes]]
ASK_TIMEOUT = 10.0
"""Seconds the server may take to say whether it speaks 2026-07-28, or whether it opens sessions."""
_LIST_CHANGED = b"notifications/tools/list_changed"


def is_modern(headers: Headers) -> bool:
    """A 2026-07-28 request (its protocol version header names no handshake-era version)."""
    version = next((value for key, value in headers if key == b"mcp-protocol-version"), None)
    return version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS


async def read_body(receive: Receive) -> bytes:
    """The request body (whole: the front door has bounded it already)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def until_disconnected(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` when the client goes away (a long-lived stream ends with it)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def read_posted(receive: Receive, send: Send) -> tuple[bytes, Message | BadLine] | None:
    """A POST's body and the message it carries; None when it was answered with the spec's 400 instead."""
    body = await read_body(receive)
    parsed = wire.parse(body)
    if parsed is None or (isinstance(parsed, BadLine) and parsed.reply is not None):
        refusal = parsed.reply if parsed is not None else wire.error(None, wire.PARSE_ERROR, "Parse error: empty")
        assert refusal is not None
        await json_reply(send, 400, refusal)
        return None
    return body, parsed


async def json_reply(send: Send, status: int, message: Message, headers: Headers = ()) -> None:
    """One message as the whole response."""
    body = message.raw if message.raw is not None else codec.dumps(message.body)
    kept = [(key, value) for key, value in headers if key not in (b"content-length", b"content-type")]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", JSON), (b"content-length", str(len(body)).encode()), *kept],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def relay_plain(upstream: HttpExchange, facts: ToolFacts, method: str, headers: Headers, send: Send) -> None:
    """A request relayed as it is, its answer streamed back as it comes (a GET event stream, a DELETE).

    A tools/list_changed seen passing makes the guard learn the tools' annotations again.
    """
    started = False
    try:
        async with upstream.send(method, headers) as response:
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": forwarded_response_headers(response.headers),
                }
            )
            started = True
            async for chunk in response.chunks():
                if _LIST_CHANGED in chunk:
                    facts.forget()
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except UpstreamHttpError as error:
        if not started:
            await json_reply(send, 502, wire.error(None, wire.INTERNAL_ERROR, str(error)))
    finally:
        if started:
            with anyio.CancelScope(shield=True):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


async def read_answer(response: Response, ident: wire.RequestId | None, limit: int) -> dict[str, Any] | None:
    """The body of the response to ``ident`` in a JSON body or an event stream; None when there is none."""
    if not response.is_success:
        return None
    async for item in read_messages(response, None, limit):
        if isinstance(item, Message) and item.is_response and item.id == ident:
            return item.body
    return None


async def speaks_modern(upstream: HttpExchange, limit: int) -> bool | None:
    """Whether the upstream answers 2026-07-28 requests (``server/discover``), asked with a request of the guard's own
    (and logged); None when it cannot be asked now (unreachable, or no answer within :data:`ASK_TIMEOUT`)."""
    version = MODERN_PROTOCOL_VERSIONS[0]
    ident = wire.own_request_id()
    meta = {
        PROTOCOL_VERSION_META_KEY: version,
        CLIENT_INFO_META_KEY: {"name": "mcp-loop-guard", "version": __version__},
        CLIENT_CAPABILITIES_META_KEY: {},
    }
    body = {"jsonrpc": "2.0", "id": ident, "method": "server/discover", "params": {"_meta": meta}}
    headers = [
        (b"mcp-protocol-version", version.encode()),
        (b"mcp-method", b"server/discover"),
        (b"accept", JSON + b", " + EVENTS),
        (b"content-type", JSON),
    ]
    try:
        with anyio.fail_after(ASK_TIMEOUT):
            async with upstream.send("POST", headers, codec.dumps(body)) as response:
                answer = await read_answer(response, ident, limit)
    except (UpstreamHttpError, TimeoutError) as error:
        logger.debug("could not ask upstream %r which protocol eras it speaks: %s", upstream.name, error)
        return None
    except ValueError:
        answer = None
    result = (answer or {}).get("result")
    said = isinstance(result, dict) and version in (result.get("supportedVersions") or ())
    logger.info("upstream %r %s", upstream.name, "speaks 2026-07-28" if said else "speaks the handshake era only")
    return said


class HandshakeRefusedError(UpstreamHttpError):
    """The upstream answered an ``initialize`` of the guard's own, but with no result."""

    def __init__(self, status: int, error: object) -> None:
        """``status``: the HTTP status; ``error``: the JSON-RPC error it gave, if any."""
        said = error.get("message") if isinstance(error, dict) else None
        self.status = status
        self.said = f"HTTP {status}" + (f": {str(said)[:200]}" if said else "")
        """The status and the server's own words, for logs."""
        super().__init__(f"the upstream refused initialize ({self.said})")


@dataclass(frozen=True, slots=True)
class Handshake:
    """The upstream's answer to an ``initialize`` of the guard's own."""

    session_id: bytes | None
    """The session it opened, if it opens sessions."""
    version: str
    """The protocol version it chose."""


async def handshake(upstream: HttpExchange, limit: int) -> Handshake:
    """An ``initialize`` of the guard's own (offering no client capabilities); what the upstream answered.

    Raises:
        HandshakeRefusedError: the upstream answered it with no result.
        UpstreamHttpError: the upstream cannot be reached.
    """
    version = HANDSHAKE_PROTOCOL_VERSIONS[-1]
    ident = wire.own_request_id()
    params = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "mcp-loop-guard", "version": __version__},
    }
    body = {"jsonrpc": "2.0", "id": ident, "method": "initialize", "params": params}
    headers = [(b"accept", JSON + b", " + EVENTS), (b"content-type", JSON)]
    async with upstream.send("POST", headers, codec.dumps(body)) as response:
        session = response.header(b"mcp-session-id")
        try:
            answer = await read_answer(response, ident, limit)
        except ValueError:
            answer = None
    result = (answer or {}).get("result")
    if not isinstance(result, dict):
        raise HandshakeRefusedError(response.status_code, (answer or {}).get("error"))
    return Handshake(session, str(result.get("protocolVersion") or version))


async def opens_sessions(upstream: HttpExchange, limit: int) -> bool:
    """Whether the upstream gives each client a session (``Mcp-Session-Id``), asked with an ``initialize`` of its own.

    A session it opens for the question is ended at once.

    Raises:
        UpstreamHttpError: the upstream cannot be reached, or did not answer the question.
    """
    opened = await handshake(upstream, limit)
    if opened.session_id is not None:
        ended = [(b"mcp-session-id", opened.session_id), (b"mcp-protocol-version", opened.version.encode())]
        with contextlib.suppress(UpstreamHttpError):  # best effort: the answer stands either way
            async with upstream.send("DELETE", ended):
                pass
        return True
    return False


async def learn_tools(
    upstream: HttpExchange, headers: Headers, envelope: dict[str, Any], facts: ToolFacts, limit: int
) -> None:
    """List the upstream's tools with a request of the guard's own, for their annotations (up to 20 pages).

    ``headers``: the session's MCP headers; ``envelope``: a 2026-07-28 request's ``_meta``
    envelope, so an upstream of that era answers the guard as it answers the client.

    Raises:
        UpstreamHttpError: the upstream cannot be reached.
        ValueError: an event over ``limit`` bytes.
    """
    cursor: object = None
    for page in range(20):
        ident = wire.own_request_id()
        params: dict[str, Any] = {"cursor": cursor} if cursor else {}
        if envelope:
            params["_meta"] = envelope
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": "tools/list"}
        if params:
            body["params"] = params
        sent = [*headers, (b"accept", JSON + b", " + EVENTS), (b"content-type", JSON)]
        async with upstream.send("POST", sent, codec.dumps(body)) as response:
            answer = await read_answer(response, ident, limit)
        result = (answer or {}).get("result")
        if not isinstance(result, dict):
            facts.listed = True  # nothing to learn from this server (no tools, or no answer)
            return
        facts.note(result.get("tools") or [], first_page=page == 0)
        cursor = result.get("nextCursor")
        if not cursor:
            return
