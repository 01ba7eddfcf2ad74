"""A request of the aggregating proxy as its parts see it: the SDK's context, and relaying it upstream."""

from __future__ import annotations

from typing import Any, Protocol

from mcp.server import ServerRequestContext
from pydantic import BaseModel

Context = ServerRequestContext[Any, Any]


class Relay(Protocol):
    """Sends one request to one upstream on behalf of the client."""

    async def __call__(self, ctx: Context, server: str, method: str, params: BaseModel | None) -> dict[str, Any]:
        """The upstream's raw result."""
        ...
