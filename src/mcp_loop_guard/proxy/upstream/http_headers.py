"""The HTTP headers a 2026-07-28 message needs on its way to a streamable HTTP server.

In that era every request names itself in headers as well as in its body: the protocol
version (from the body's ``_meta``), ``Mcp-Method``, ``Mcp-Name`` for the methods that name
a tool, prompt or resource, and ``Mcp-Param-*`` for the arguments a tool's input schema marks
with ``x-mcp-header``. A server checks each against the body, so they are derived from it
with the SDK's own encoders. The SDK is loaded only for such a message: a handshake-era
session (every client of 2025) never pays for it. The method and version go in as they are,
so one holding a control character is refused (the message reader refuses it first); the
name and arguments are base64-wrapped by the encoder when they are not plain text, and a
schema whose ``x-mcp-header`` is not a header name is not used.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp_loop_guard.proxy.wire.header_text import UnsafeHeaderError, has_control

__all__ = ["MODERN_META", "ParamHeaders", "routing_headers"]

logger = logging.getLogger(__name__)

MODERN_META = "io.modelcontextprotocol/protocolVersion"
"""The key every 2026-07-28 request carries in its ``_meta``."""
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_ANNOTATION = "x-mcp-header"


class ParamHeaders:
    """Which arguments of which tools go in ``Mcp-Param-*`` headers, from the tools the server listed."""

    def __init__(self) -> None:
        """Nothing is known before the first tools/list."""
        self._schemas: dict[str, Any] = {}

    def learn(self, tools: list[Any]) -> None:
        """Keep the input schemas that declare headers (most declare none)."""
        for tool in tools:
            if isinstance(tool, dict) and isinstance(name := tool.get("name"), str):
                schema = tool.get("inputSchema")
                if _ANNOTATION in _text(schema):
                    self._schemas[name] = schema
                else:
                    self._schemas.pop(name, None)

    def headers(self, tool: object, arguments: object) -> list[tuple[bytes, bytes]]:
        """The ``Mcp-Param-*`` headers of one call; none for a schema whose declarations are invalid."""
        schema = self._schemas.get(tool) if isinstance(tool, str) else None
        if schema is None or not isinstance(arguments, dict):
            return []
        from mcp.shared.inbound import (  # noqa: PLC0415 - see the module text
            find_invalid_x_mcp_header,
            mcp_param_headers,
            x_mcp_header_map,
        )

        problem = find_invalid_x_mcp_header(schema)
        if problem is not None:  # a header name that is no token, say: said once, then the tool sends none
            logger.warning("upstream tool %r declares headers wrongly (%s); none sent", str(tool)[:80], problem)
            self._schemas.pop(str(tool), None)
            return []
        found = mcp_param_headers(x_mcp_header_map(schema), arguments)
        return [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in found.items()]


def routing_headers(method: str | None, params: object, tools: ParamHeaders) -> list[tuple[bytes, bytes]]:
    """The headers of a 2026-07-28 request; none for a message of the handshake era.

    Raises:
        UnsafeHeaderError: the method or the version holds a control character.
    """
    if method is None or not isinstance(params, dict):
        return []
    meta = params.get("_meta")
    version = meta.get(MODERN_META) if isinstance(meta, dict) else None
    if not isinstance(version, str):
        return []
    if has_control(method) or has_control(version):
        raise UnsafeHeaderError("the method or the _meta protocol version holds a control character")
    headers = [(b"mcp-protocol-version", version.encode("latin-1", "replace")), (b"mcp-method", method.encode())]
    key = _NAMED.get(method)
    if key is not None and isinstance(name := params.get(key), str):
        from mcp.shared.inbound import encode_header_value  # noqa: PLC0415 - see the module text

        headers.append((b"mcp-name", encode_header_value(name).encode("latin-1")))
    if method == "tools/call":
        headers.extend(tools.headers(params.get("name"), params.get("arguments")))
    return headers


def _text(value: object) -> str:
    """A cheap look for the annotation anywhere in a schema."""
    return repr(value) if isinstance(value, dict) else ""
