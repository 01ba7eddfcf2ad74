"""Client text on its way into upstream HTTP headers: refused where it would break them, wrapped where it may."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_loop_guard.proxy.upstream.http_headers import ParamHeaders, routing_headers
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.header_text import UnsafeHeaderError

VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
MODERN = {VERSION_KEY: "2026-07-28"}
CONTROLS = ["\r", "\n", "\x00", "\t", "\x7f", "\x85"]


def _line(method: str, params: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": 4, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


@pytest.mark.parametrize("control", CONTROLS)
def test_a_method_with_a_control_character_is_an_invalid_request(control: str) -> None:
    """The reader answers -32600 with the request's own id; the message goes nowhere."""
    parsed = wire.parse(_line(f"tools/call{control}x", {"_meta": MODERN}))
    assert isinstance(parsed, wire.BadLine)
    assert parsed.reply is not None
    assert parsed.reply.body["id"] == 4
    assert parsed.reply.body["error"]["code"] == wire.INVALID_REQUEST


@pytest.mark.parametrize("control", CONTROLS)
def test_a_meta_protocol_version_with_a_control_character_is_invalid_params(control: str) -> None:
    """The 2026-07-28 version in ``_meta`` becomes a header: with a control character it gets -32602."""
    parsed = wire.parse(_line("tools/list", {"_meta": {VERSION_KEY: f"2026-07-28{control}x"}}))
    assert isinstance(parsed, wire.BadLine)
    assert parsed.reply is not None
    assert parsed.reply.body["error"]["code"] == wire.INVALID_PARAMS
    assert VERSION_KEY in parsed.reply.body["error"]["message"]


def test_control_characters_elsewhere_in_a_message_are_the_upstreams_business() -> None:
    """Arguments, tool names and other ``_meta`` entries are relayed as they came (no header is built raw from them)."""
    raw = _line("tools/call", {"name": "a\r\nb", "arguments": {"text": "x\r\ny"}, "_meta": {**MODERN, "k": "\n"}})
    parsed = wire.parse(raw)
    assert isinstance(parsed, wire.Message)
    assert parsed.raw == raw


def test_the_header_builder_refuses_what_the_reader_lets_through_by_mistake() -> None:
    """routing_headers itself refuses a method or version with a control character."""
    with pytest.raises(UnsafeHeaderError):
        routing_headers("tools/call", {"_meta": {VERSION_KEY: "2026\n"}, "name": "x"}, ParamHeaders())
    with pytest.raises(UnsafeHeaderError):
        routing_headers("tools/call\n", {"_meta": MODERN, "name": "x"}, ParamHeaders())


def test_a_name_and_header_arguments_with_control_characters_go_base64_wrapped() -> None:
    """Mcp-Name and Mcp-Param-* values that are not plain text are wrapped, never written as they are."""
    params = ParamHeaders()
    schema = {"type": "object", "properties": {"key": {"type": "string", "x-mcp-header": "Key"}}}
    params.learn([{"name": "a\r\nb", "inputSchema": schema}])
    call = {"_meta": MODERN, "name": "a\r\nb", "arguments": {"key": "k\r\nX-Other: y"}}
    headers = dict(routing_headers("tools/call", call, params))
    assert headers[b"mcp-name"].startswith(b"=?base64?")
    assert headers[b"mcp-param-key"].startswith(b"=?base64?")


def test_a_schema_declaring_a_header_name_that_is_no_token_sends_no_headers() -> None:
    """An upstream's x-mcp-header with CR/LF (or any non-token) is not used: no Mcp-Param-* header at all."""
    params = ParamHeaders()
    schema = {"type": "object", "properties": {"key": {"type": "string", "x-mcp-header": "Key\r\nX-Other"}}}
    params.learn([{"name": "lookup", "inputSchema": schema}])
    call = {"_meta": MODERN, "name": "lookup", "arguments": {"key": "k"}}
    assert [name for name, _ in routing_headers("tools/call", call, params)] == [
        b"mcp-protocol-version",
        b"mcp-method",
        b"mcp-name",
    ]
