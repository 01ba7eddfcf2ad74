"""2026-07-28 ``subscriptions/listen`` streams on the SDK path, with the resources they name subscribed upstream.

A listen stream that names resources (``resourceSubscriptions``) is one subscription to each
at the server that lists it (``resources/subscribe``, over the connection the sessionless
requests share), kept while any stream names it and ended (``resources/unsubscribe``) with
the last one. The server's ``notifications/resources/updated`` then reach the streams that
named the resource (:class:`~.sdk_server.SessionDownstream` publishes them).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.subscriptions import ListenHandler, SubscriptionBus
from mcp.shared.exceptions import MCPError

logger = logging.getLogger(__name__)

__all__ = ["RelayedListens"]

Handler = Callable[[Any, Any], Awaitable[Any]]
"""A relayed request's handler: the request's context and its params in, the upstream's result out."""


class RelayedListens:
    """Serves ``subscriptions/listen``; what a stream names is subscribed upstream while it is open."""

    def __init__(self, bus: SubscriptionBus, relayed: Callable[[str], Handler]) -> None:
        """``relayed(method)``: how a request of that method reaches the server that lists its resource."""
        self.streams = ListenHandler(bus)
        self.relayed = relayed
        self.named: Counter[str] = Counter()
        """Resource URI -> the open streams that name it."""

    async def __call__(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """One listen stream, from its acknowledgement to its end."""
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        for uri in uris:
            self.named[uri] += 1
            if self.named[uri] == 1:
                await self._ask(ctx, "resources/subscribe", uri)
        try:
            return await self.streams(ctx, params)
        finally:
            for uri in uris:
                self.named[uri] -= 1
                if self.named[uri] <= 0:
                    del self.named[uri]
                    await self._ask(ctx, "resources/unsubscribe", uri)

    async def _ask(self, ctx: Any, method: str, uri: str) -> None:
        """Subscribe or unsubscribe upstream; a server that cannot is logged, and the stream goes on without it."""
        params: types.SubscribeRequestParams | types.UnsubscribeRequestParams
        if method == "resources/subscribe":
            params = types.SubscribeRequestParams(uri=uri)
        else:
            params = types.UnsubscribeRequestParams(uri=uri)
        try:
            await self.relayed(method)(ctx, params)
        except MCPError as error:
            logger.info("%s of a listened resource failed upstream: %s", method, error)
