"""Newline-delimited JSON-RPC framing shared by the stdio transports.

Parsing happens here, not in the SDK, so that a broken line gets the JSON-RPC
error the spec prescribes (-32700 / -32600) instead of being dropped silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is not a JSON-RPC message, with the error response it deserves."""

    reply: bytes
    """The serialized JSON-RPC error to send back, newline included."""
    problem: str
    response_to: types.RequestId | None = None
    """For a malformed response: the id of the request it answers, when readable."""


def parse_line(line: bytes) -> SessionMessage | BadLine | None:
    """Parse one line; None for a blank line."""
    if not line.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError:
        return _diagnose(line)
    if isinstance(message, types.JSONRPCNotification) and b'"id"' in line and _has_top_level_id(line):
        # An id the schema rejects (null, true, an object) made the parser read a notification.
        return BadLine(
            _error(None, INVALID_REQUEST, "Invalid Request: the id must be a string or an integer"), "invalid id"
        )
    return SessionMessage(message)


def _has_top_level_id(line: bytes) -> bool:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and "id" in value


def _diagnose(line: bytes) -> BadLine:
    try:
        value: Any = json.loads(line)
    except (ValueError, RecursionError):
        return BadLine(_error(None, PARSE_ERROR, "Parse error: the line is not valid JSON"), "invalid JSON")
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        request_id = None
    if isinstance(value, dict) and "method" not in value and "id" in value:
        # A response we cannot parse: answering it would start a ping-pong, but the
        # request it answers must not wait forever.
        return BadLine(b"", "malformed response", request_id)
    return BadLine(
        _error(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 request or notification"),
        "not a JSON-RPC message",
    )


def error_line(request_id: types.RequestId | None, code: int, message: str) -> bytes:
    """A JSON-RPC error response, serialized as a line."""
    return _error(request_id, code, message)


def _error(request_id: str | int | None, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


GUARD_FAULT = "mcp-loop-guard/fault"
"""Key in an error's ``data`` marking a failure the guard detected, not one the upstream sent."""


def too_large(line: Oversized, limit: int) -> SessionMessage:
    """The error response standing in for an upstream message too large to relay."""
    error = types.ErrorData(
        code=types.INTERNAL_ERROR,
        message=f"the upstream's answer of {line.size} bytes is over the limit of {limit} "
        "(LOOP_GUARD_MAX_MESSAGE_BYTES); it was not relayed",
        data={GUARD_FAULT: "too-large"},
    )
    assert line.request_id is not None
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=line.request_id, error=error))


def malformed_answer(request_id: types.RequestId) -> SessionMessage:
    """The error response standing in for an upstream answer that is not a JSON-RPC response."""
    error = types.ErrorData(
        code=types.INTERNAL_ERROR,
        message="the upstream answered with a response of the wrong shape (its result must be an object)",
        data={GUARD_FAULT: "invalid-result"},
    )
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def encode(message: SessionMessage) -> bytes:
    """Serialize one message as a line."""
    return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def response_id(message: SessionMessage) -> types.RequestId | None:
    """The id of a response or error message, None for requests and notifications."""
    inner = message.message
    if isinstance(inner, (types.JSONRPCResponse, types.JSONRPCError)):
        return inner.id
    return None


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit: dropped, with what is needed to answer it."""

    size: int
    request_id: types.RequestId | None
    """The top-level ``id`` when it could be read from the line's ends."""


_ID_AT_START = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_AT_END = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')
_KEEP = 256


def _read_id(head: bytes, tail: bytes) -> types.RequestId | None:
    """The top-level id of a message too large to parse: it is near one end or the other."""
    match = _ID_AT_START.match(head) or _ID_AT_END.search(tail)
    if match is None:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, (str, int)) else None


class LineReader:
    """Split a byte stream into lines, never holding more than ``limit`` bytes of one line.

    Appending to one buffer keeps a large message linear to assemble; a line over the
    limit is counted and dropped as it streams by, keeping only its two ends.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._skipped = 0
        self._head = b""

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        """The lines (without newline) completed by ``chunk``."""
        lines: list[bytes | Oversized] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(chunk[start:end])
            lines.append(self._finish())
            start = end + 1
        self._take(chunk[start:])
        return lines

    def _take(self, piece: bytes) -> None:
        if self._skipped:
            self._skipped += len(piece)
            self._buffer[:] = (bytes(self._buffer) + piece)[-_KEEP:]
            return
        self._buffer += piece
        if len(self._buffer) > self.limit:
            self._skipped = len(self._buffer)
            self._head = bytes(self._buffer[:_KEEP])
            del self._buffer[: len(self._buffer) - _KEEP]

    def _finish(self) -> bytes | Oversized:
        if self._skipped:
            found = Oversized(self._skipped, _read_id(self._head, bytes(self._buffer)))
            self._skipped, self._head = 0, b""
            self._buffer.clear()
            return found
        line = bytes(self._buffer)
        self._buffer.clear()
        return line
