"""JSON-RPC messages as the relay sees them: a parsed body and the bytes it came in, and every error.

A message the guard does not change is relayed as the bytes it arrived in; only a body the
guard rewrites (a warning appended) is serialized again. Every JSON-RPC error the guard itself
writes is built here, by :func:`error`.
"""

from __future__ import annotations

import itertools
import re
import secrets
from dataclasses import dataclass
from typing import Any, Final

from mcp_loop_guard import codec
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.wire.eras import PROTOCOL_VERSION_META_KEY
from mcp_loop_guard.proxy.wire.header_text import has_control

__all__ = [
    "GUARD_FAULT",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "OWN_ID_PREFIX",
    "PARSE_ERROR",
    "BadLine",
    "Message",
    "RequestId",
    "error",
    "own_request_id",
    "parse",
    "response_id",
    "top_level_id",
    "with_id",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603

OWN_ID_PREFIX: Final = "mcp-loop-guard-"
"""Ids of the guard's own requests upstream start with this (a client never picks these)."""
_OWN_NONCE = secrets.token_hex(4)
_own_ids = itertools.count(1)

GUARD_FAULT: Final = "mcp-loop-guard/fault"
"""Key in an error's ``data`` marking a failure the guard detected, not one the upstream sent."""

RequestId = str | int


@dataclass(slots=True)
class Message:
    """One JSON-RPC message: its body, and the bytes it arrived in (None once the body is changed)."""

    body: dict[str, Any]
    raw: bytes | None = None

    @property
    def method(self) -> str | None:
        """The method of a request or notification, None for a response."""
        method = self.body.get("method")
        return method if isinstance(method, str) else None

    @property
    def id(self) -> RequestId | None:
        """The id of a request or response, None for a notification."""
        ident = self.body.get("id")
        return ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None

    @property
    def is_request(self) -> bool:
        """A request (method and id)."""
        return "method" in self.body and "id" in self.body

    @property
    def is_notification(self) -> bool:
        """A notification (method, no id)."""
        return "method" in self.body and "id" not in self.body

    @property
    def is_response(self) -> bool:
        """A response: a result or an error, for an id."""
        return "method" not in self.body and ("result" in self.body or "error" in self.body)

    def line(self) -> bytes:
        """The message as one line, newline included: the original bytes when unchanged."""
        if self.raw is not None:
            return self.raw + b"\n"
        return codec.dumps(self.body) + b"\n"

    def changed(self) -> Message:
        """Mark the body as changed: it will be serialized again."""
        self.raw = None
        return self


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line that is no JSON-RPC message, with what to answer."""

    problem: str
    reply: Message | None
    """The error response to send back; None when none is due (a broken response)."""
    response_to: RequestId | None = None
    """For a broken response: the id of the request it answers, when readable."""


_ID_HEAD = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_TAIL = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')


def with_id(message: Message, ident: RequestId) -> Message:
    """The message with another top-level ``id``, its other bytes untouched where the id can be found in them.

    SDKs write the id first (after ``jsonrpc``) or last, where an anchored match finds the
    top-level member and no nested one: a large result keeps its bytes. Elsewhere the body
    is written anew.
    """
    old, raw = message.body.get("id"), message.raw
    message.body["id"] = ident
    if raw is None:
        return message
    found = _ID_HEAD.match(raw) or _ID_TAIL.search(raw, max(0, len(raw) - 512))
    if found is None or _id_value(found.group(1), 0) != old:  # a duplicate "id" member: the parsed one won
        return message.changed()
    message.raw = raw[: found.start(1)] + codec.dumps(ident) + raw[found.end(1) :]
    return message


def response_id(raw: bytes) -> RequestId | None:
    """The top-level id of a message too large to parse again: where SDKs write it, else found by a scan."""
    found = _ID_HEAD.match(raw) or _ID_TAIL.search(raw, max(0, len(raw) - 512))
    return _id_value(found.group(1), 0) if found is not None else top_level_id(raw)


def own_request_id() -> str:
    """An id for a request of the guard's own, unique to this process.

    A guard behind another guard sees the outer one's own requests pass by: they must never
    look like its own, or it would keep their answers.
    """
    return f"{OWN_ID_PREFIX}{_OWN_NONCE}-{next(_own_ids)}"


def error(request_id: RequestId | None, code: int, message: str, data: Any = None) -> Message:
    """A JSON-RPC error response."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    if data is not None:
        body["error"]["data"] = data
    return Message(body)


def result(request_id: RequestId, value: dict[str, Any]) -> Message:
    """A JSON-RPC result response."""
    return Message({"jsonrpc": "2.0", "id": request_id, "result": value})


def parse(line: bytes) -> Message | BadLine | None:  # noqa: PLR0911 - one return per kind of line
    """Parse one line into a message; None for a blank line.

    Checks the JSON-RPC 2.0 envelope only (what the relay needs to route a message), and the
    protocol version a 2026-07-28 request carries in its ``_meta``: over HTTP both the method
    and that version go in headers, so neither may hold a control character. The meaning of a
    method's parameters is the upstream's business, not the relay's.
    """
    if not line.strip():
        return None
    try:
        body = codec.loads(line)
    except RecursionError:
        return _invalid(top_level_id(line), replies.TOO_DEEP)
    except ValueError:
        return BadLine("invalid JSON", error(None, PARSE_ERROR, replies.NOT_JSON))
    if not isinstance(body, dict):
        return _invalid(None, replies.A_BATCH)
    ident = body.get("id")
    usable = ident if isinstance(ident, str | int) and not isinstance(ident, bool) else None
    if body.get("jsonrpc") != "2.0":
        if "method" not in body and "id" in body:
            return BadLine("malformed response", None, usable)
        return _invalid(usable, replies.NOT_A_MESSAGE)
    if "method" in body:
        return _request(body, line, usable)
    return _response(body, line, usable)


def _request(body: dict[str, Any], line: bytes, usable: RequestId | None) -> Message | BadLine:
    method = body["method"]
    if not isinstance(method, str):
        return _invalid(usable, replies.METHOD_NOT_TEXT)
    if "id" in body and usable is None:
        return _invalid(None, replies.ID_NOT_USABLE)
    if has_control(method):
        return _invalid(usable, replies.METHOD_WITH_CONTROL)
    params = body.get("params")
    if params is not None and not isinstance(params, dict):
        return _invalid(usable, replies.PARAMS_NOT_OBJECT)
    if params and _unsafe_version(params):
        why = replies.version_with_control(PROTOCOL_VERSION_META_KEY)
        return BadLine(why, error(usable, INVALID_PARAMS, replies.invalid_params(why)))
    return Message(body, line)


def _unsafe_version(params: dict[str, Any]) -> bool:
    """A 2026-07-28 protocol version that no HTTP header could carry."""
    meta = params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return isinstance(version, str) and has_control(version)


def _response(body: dict[str, Any], line: bytes, usable: RequestId | None) -> Message | BadLine:
    if "id" not in body:
        return _invalid(None, replies.NOT_A_MESSAGE)
    if ("result" not in body and "error" not in body) or ("result" in body and not isinstance(body["result"], dict)):
        return BadLine("malformed response", None, usable)
    return Message(body, line)


def _invalid(request_id: RequestId | None, why: str) -> BadLine:
    return BadLine(why, error(request_id, INVALID_REQUEST, replies.invalid_request(why)))


def top_level_id(line: bytes | bytearray) -> RequestId | None:
    """The top-level ``id`` of a JSON object, found without parsing nested values (any depth, any order).

    For messages too deep or too large to parse, so that their error can still be matched to
    their request.
    """
    depth = 0
    position = 0
    length = len(line)
    want_key = False
    while position < length:
        char = line[position]
        if char == 0x22:  # a string
            end = _string_end(line, position)
            if end < 0:
                return None
            if depth == 1 and want_key:
                key = bytes(line[position + 1 : end])
                colon = _skip_space(line, end + 1)
                if key == b"id" and colon < length and line[colon] == 0x3A:
                    return _id_value(line, _skip_space(line, colon + 1))
                want_key = False
            position = end + 1
            continue
        if char in (0x7B, 0x5B):  # { [
            depth += 1
            want_key = depth == 1 and char == 0x7B
        elif char in (0x7D, 0x5D):  # } ]
            depth -= 1
        elif char == 0x2C and depth == 1:  # , between top-level members
            want_key = True
        position += 1
    return None


_STRING_OR_INT = re.compile(rb'-?\d+|"(?:[^"\\]|\\.)*"')


def _id_value(line: bytes | bytearray, position: int) -> RequestId | None:
    match = _STRING_OR_INT.match(line, position)
    if match is None:
        return None
    try:
        value = codec.loads(match.group(0))
    except ValueError:
        return None
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _skip_space(line: bytes | bytearray, position: int) -> int:
    while position < len(line) and line[position] in b" \t\r\n":
        position += 1
    return position


def _string_end(line: bytes | bytearray, start: int) -> int:
    """Index of the closing quote of the string starting at ``start``, or -1."""
    position = start + 1
    while True:
        quote = line.find(b'"', position)
        if quote < 0:
            return -1
        backslashes = 0
        back = quote - 1
        while back > start and line[back] == 0x5C:
            backslashes += 1
            back -= 1
        if backslashes % 2 == 0:
            return quote
        position = quote + 1
