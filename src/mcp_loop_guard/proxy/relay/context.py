"""A request of the SDK path as its parts see it: the SDK's context."""

from __future__ import annotations

from typing import Any

from mcp.server import ServerRequestContext

Context = ServerRequestContext[Any, Any]
