"""Every use of the MCP SDK's private modules and attributes, in one place.

The SDK is 2.x and moves fast; whatever the guard needs that the SDK does not publish is
reached here and nowhere else, and ``tests/unit/test_compat.py`` pins each use, so the next
release breaks this file with a clear failure instead of the guard at run time.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp import ClientSession
from mcp.server import Server

# The SDK's single-exchange entry for 2026-07-28 requests over streamable HTTP; its session
# manager is the only public caller, and the guard keeps its own manager.
from mcp.server._streamable_http_modern import handle_modern_request

# The stream types the SDK's transports hand over.
from mcp.shared._stream_protocols import ReadStream, WriteStream

__all__ = [
    "MirrorSession",
    "ReadStream",
    "WriteStream",
    "forget_server_info",
    "handle_modern_request",
]

CONNECTION_CLOSED_MESSAGE = "Connection closed"
"""What the SDK's dispatcher says when a connection ends under a request (code -32000, no data)."""


class MirrorSession(ClientSession):
    """A client session that announces another client's identity and capabilities.

    Upstreams adapt to what the client supports (server-everything only offers its sampling
    tools to clients that can sample), so a proxy must claim exactly what the real client
    claims. The SDK builds the ``initialize`` capabilities in a private method and keeps the
    client's identity in a private attribute.
    """

    mirrored: types.ClientCapabilities = types.ClientCapabilities()

    def mirror(self, client_info: types.Implementation, capabilities: types.ClientCapabilities) -> None:
        """Announce ``client_info`` and ``capabilities`` at the next ``initialize``."""
        self.mirrored = capabilities
        self._client_info = client_info

    def _build_capabilities(self, version: str) -> types.ClientCapabilities:
        return self.mirrored


def forget_server_info(server: Server[Any]) -> None:
    """Make a server stamp its results with its current identity (the SDK caches it privately)."""
    server.__dict__.pop("_server_info_stamp_source", None)


def connection_closed(error: types.ErrorData) -> bool:
    """The SDK's own "the connection ended" error, not an upstream's answer that uses the same code."""
    return error.code == types.CONNECTION_CLOSED and error.message == CONNECTION_CLOSED_MESSAGE and error.data is None
