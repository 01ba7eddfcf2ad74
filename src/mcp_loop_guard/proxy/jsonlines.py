"""Newline-delimited JSON-RPC framing shared by the stdio transports.

Parsing happens here, not in the SDK, so that a broken line gets the JSON-RPC
error the spec prescribes (-32700 / -32600) instead of being dropped silently.
"""

from __future__ import annotations

import json
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


def parse_line(line: bytes) -> SessionMessage | BadLine | None:
    """Parse one line; None for a blank line."""
    if not line.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError:
        return _diagnose(line)
    return SessionMessage(message)


def _diagnose(line: bytes) -> BadLine:
    try:
        value: Any = json.loads(line)
    except (ValueError, RecursionError):
        return BadLine(_error(None, PARSE_ERROR, "Parse error: the line is not valid JSON"), "invalid JSON")
    request_id = value.get("id") if isinstance(value, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        request_id = None
    if isinstance(value, dict) and "method" not in value and "id" in value:
        # A response we cannot parse: answering it would start a ping-pong.
        return BadLine(b"", "malformed response")
    return BadLine(
        _error(request_id, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 request or notification"),
        "not a JSON-RPC message",
    )


def _error(request_id: str | int | None, code: int, message: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def encode(message: SessionMessage) -> bytes:
    """Serialize one message as a line."""
    return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def response_id(message: SessionMessage) -> types.RequestId | None:
    """The id of a response or error message, None for requests and notifications."""
    inner = message.message
    if isinstance(inner, (types.JSONRPCResponse, types.JSONRPCError)):
        return inner.id
    return None
