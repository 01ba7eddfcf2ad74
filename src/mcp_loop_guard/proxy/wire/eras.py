"""The protocol's eras as the wire names them, without importing the SDK.

Loading the SDK costs an HTTP guard more than a second of start-up and about 30 MB, so the
relays, which need only these names, carry their own copy; ``tests/unit/test_compat.py``
holds it equal to the SDK's, so a release that adds a version fails there first.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CACHEABLE_METHODS",
    "CLIENT_CAPABILITIES_META_KEY",
    "CLIENT_INFO_META_KEY",
    "HANDSHAKE_PROTOCOL_VERSIONS",
    "MODERN_PROTOCOL_VERSIONS",
    "PROTOCOL_VERSION_META_KEY",
    "SERVER_INFO_META_KEY",
]

HANDSHAKE_PROTOCOL_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The versions negotiated by ``initialize`` (oldest first)."""
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
"""The versions carried by every request's ``_meta`` instead (no handshake, no session)."""
PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META_KEY: Final = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_META_KEY: Final = "io.modelcontextprotocol/serverInfo"
"""The ``_meta`` key naming the server on every 2026-07-28 result."""
CACHEABLE_METHODS: Final = frozenset(
    {"resources/list", "prompts/list", "resources/read", "resources/templates/list", "server/discover", "tools/list"}
)
"""The methods whose 2026-07-28 results carry freshness hints (``ttlMs``, ``cacheScope``)."""
