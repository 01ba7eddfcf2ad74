"""A streamable HTTP upstream spoken to request by request, below the SDK's session layer.

The HTTP guard relays each client request to it as the same HTTP request (a POST with the
same body, a GET event stream, a DELETE), through one pool of keep-alive connections shared
by every session, and hands the answer back as it comes: a JSON body, or an event stream
passed on event by event. Nothing here keeps a session: the upstream's ``Mcp-Session-Id``
goes back and forth with the client's requests.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import httpx2

from mcp_loop_guard.config import HttpServer
from mcp_loop_guard.proxy.upstream.transports import CONNECT_TIMEOUT, tls_context

logger = logging.getLogger(__name__)

__all__ = ["FORWARDED_REQUEST_HEADERS", "HttpExchange", "UpstreamHttpError", "forwarded_response_headers"]

FORWARDED_REQUEST_HEADERS = frozenset({b"accept", b"content-type", b"last-event-id", b"traceparent", b"tracestate"})
"""What of a client's request reaches the upstream, besides MCP's own ``Mcp-*`` headers (the session, the
protocol version, and 2026-07-28's ``Mcp-Method``, ``Mcp-Name`` and ``Mcp-Param-*``): the trace context.
Not the client's credentials for the guard (its bearer token), its cookies, or the guard's key header."""
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"transfer-encoding",
        b"content-length",
        b"content-encoding",
        b"upgrade",
        b"proxy-authenticate",
        b"trailer",
        b"te",
        b"date",
        b"server",
    }
)
"""Response headers the guard's own HTTP server writes, or that describe the upstream's framing only."""


class UpstreamHttpError(Exception):
    """The upstream could not be reached or broke off its answer; the text says why, without its URL."""


def forwarded_response_headers(headers: httpx2.Headers) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers a client should see (MCP's session and version headers among them)."""
    return [(key.lower(), value) for key, value in headers.raw if key.lower() not in _HOP_BY_HOP]


class HttpExchange:
    """One streamable HTTP upstream and the connection pool every session's requests share."""

    def __init__(self, spec: HttpServer, *, connections: int = 256) -> None:
        """Connections are opened on demand, at most ``connections`` at once (an event stream holds one)."""
        self.spec = spec
        self.name = spec.name
        self.url = spec.url
        timeout = httpx2.Timeout(30.0, connect=CONNECT_TIMEOUT, read=None)
        limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=min(connections, 64))
        headers = {**spec.headers, "accept-encoding": "identity"}
        self.client = httpx2.AsyncClient(
            headers=headers, timeout=timeout, limits=limits, verify=tls_context(), trust_env=False
        )

    def use_headers(self, headers: Mapping[str, str]) -> None:
        """Send other configured headers from the next request on (a config reload, e.g. a rotated token)."""
        self.client.headers = httpx2.Headers({**headers, "accept-encoding": "identity"})

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self.client.aclose()

    @asynccontextmanager
    async def send(
        self, method: str, headers: Sequence[tuple[bytes, bytes]], body: bytes = b""
    ) -> AsyncIterator[httpx2.Response]:
        """One request with the client's MCP headers; the response, its body still to be read.

        Raises:
            UpstreamHttpError: the upstream cannot be reached, or the connection broke.
        """
        sent = [(key, value) for key, value in headers if key in FORWARDED_REQUEST_HEADERS or key.startswith(b"mcp-")]
        request = self.client.build_request(method, self.url, headers=sent, content=body or None)
        try:
            response = await self.client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            raise UpstreamHttpError(_why(self.name, exc)) from None
        try:
            yield response
        except httpx2.HTTPError as exc:
            raise UpstreamHttpError(_why(self.name, exc)) from None
        finally:
            await response.aclose()


def _why(name: str, error: httpx2.HTTPError) -> str:
    kind = type(error).__name__
    if isinstance(error, httpx2.ConnectError | httpx2.ConnectTimeout):
        return f"upstream {name!r} is unreachable ({kind})"
    return f"upstream {name!r} broke off its answer ({kind})"
