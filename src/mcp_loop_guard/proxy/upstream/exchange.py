"""A streamable HTTP upstream spoken to request by request, below the SDK's session layer.

The HTTP guard relays each client request to it as the same HTTP request (a POST with the
same body, a GET event stream, a DELETE), over one pool of keep-alive connections shared by
every session, and hands the answer back as it comes: a JSON body, or an event stream passed
on event by event. Nothing here keeps a session: the upstream's ``Mcp-Session-Id`` goes back
and forth with the client's requests.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urljoin, urlsplit

import anyio

from mcp_loop_guard.config import HttpServer, ServerSpec
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.upstream.channel import OwnRequests, Receiver
from mcp_loop_guard.proxy.upstream.forward_proxy import forward_proxy
from mcp_loop_guard.proxy.upstream.http11 import Http11Error, Http11Pool, Response
from mcp_loop_guard.proxy.upstream.tls import CONNECT_TIMEOUT, tls_context
from mcp_loop_guard.proxy.wire.header_text import UnsafeHeaderError
from mcp_loop_guard.proxy.wire.messages import RequestId
from mcp_loop_guard.trace_context import checked_headers

logger = logging.getLogger(__name__)

__all__ = [
    "FORWARDED_REQUEST_HEADERS",
    "HttpExchange",
    "OneHttpServer",
    "Response",
    "UpstreamHttpError",
    "forwarded_response_headers",
]

FORWARDED_REQUEST_HEADERS = frozenset({b"accept", b"content-type", b"last-event-id", b"traceparent", b"tracestate"})
"""What of a client's request reaches the upstream, besides MCP's own ``Mcp-*`` headers (the session, the
protocol version, and 2026-07-28's ``Mcp-Method``, ``Mcp-Name`` and ``Mcp-Param-*``): the trace context (as far
as it follows the W3C rules). Not the client's credentials for the guard (its bearer token), its cookies, or the
guard's key header."""
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


MAX_REDIRECTS = 5
"""Redirects followed for one request, as the SDK's client follows them (same origin, same method)."""


class UpstreamHttpError(Exception):
    """The upstream could not be reached or broke off its answer; the text says why, without its URL."""


def forwarded_response_headers(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers a client should see (MCP's session and version headers among them)."""
    return [(key, value) for key, value in headers if key not in _HOP_BY_HOP]


class HttpExchange:
    """One streamable HTTP upstream and the connection pool every session's requests share."""

    def __init__(self, spec: HttpServer) -> None:
        """Connections are opened on demand and kept while idle for the next request."""
        self.spec = spec
        self.name = spec.name
        self.url = spec.url
        self.pool = Http11Pool(
            spec.url,
            headers=_with_identity(spec.headers),
            tls=tls_context() if spec.url.lower().startswith("https:") else None,
            connect_timeout=CONNECT_TIMEOUT,
            proxy=forward_proxy(spec.url),
        )

    def use_headers(self, headers: Mapping[str, str]) -> None:
        """Send other configured headers from the next request on (a config reload, e.g. a rotated token)."""
        self.pool.use_headers(_with_identity(headers))

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self.pool.aclose()

    @asynccontextmanager
    async def send(
        self,
        method: str,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes = b"",
        *,
        sent: Callable[[], None] | None = None,
        target: str | None = None,
    ) -> AsyncIterator[Response]:
        """One request with the client's MCP headers; the response, its body still to be read.

        ``sent``: called once the request is written, before its answer. ``target``: a path on
        the endpoint's origin to send it to instead (a legacy SSE server's message endpoint).

        Raises:
            UpstreamHttpError: the upstream cannot be reached, the connection broke, or a header
                would have broken the request's framing (nothing was sent).
        """
        kept = checked_headers(
            [(key, value) for key, value in headers if key in FORWARDED_REQUEST_HEADERS or key.startswith(b"mcp-")]
        )
        try:
            for _ in range(MAX_REDIRECTS):
                async with self.pool.request(method, kept, body, sent=sent, target=target) as response:
                    target = self._redirected(method, response)
                    if target is None:
                        yield response
                        return
                    async for _chunk in response.chunks():
                        pass
                logger.info("upstream %r moved its endpoint to %s; following it from now on", self.name, target)
                self.pool.target = target
            raise UpstreamHttpError(f"upstream {self.name!r} redirected more than {MAX_REDIRECTS} times in a row")
        except Http11Error as error:
            how = "is unreachable" if error.connect else "broke off its answer"
            raise UpstreamHttpError(f"upstream {self.name!r} {how} ({error})") from None
        except UnsafeHeaderError as error:
            logger.warning("refused to send a request to upstream %r: %s", self.name, error)
            raise UpstreamHttpError(f"upstream {self.name!r} was not sent the request ({error})") from None

    def _redirected(self, method: str, response: Response) -> str | None:
        """The new path of a redirect to follow: on the endpoint's own origin, keeping the method; else None.

        A trailing-slash normalisation (``/mcp`` to ``/mcp/``) is the common case; a redirect
        elsewhere is not followed, and reaches whoever made the request as it came.
        """
        status = response.status_code
        if status not in (307, 308) and not (method == "GET" and status in (301, 302, 303)):
            return None
        location = response.header(b"location")
        if location is None:
            return None
        pool = self.pool
        current = f"{'https' if pool.secure else 'http'}://{pool.authority.decode()}{pool.target}"
        moved = urlsplit(urljoin(current, location.decode("latin-1")))
        default = 443 if moved.scheme == "https" else 80
        if (
            (moved.scheme == "https") != pool.secure
            or moved.hostname != pool.host
            or (moved.port or default) != pool.port
        ):
            return None
        return (moved.path or "/") + (f"?{moved.query}" if moved.query else "")


class OneHttpServer:
    """A channel to one HTTP server through an exchange: a config reload may give it new headers, nothing more."""

    def __init__(self, spec: HttpServer, receiver: Receiver, *, max_bytes: int, handshake_timeout: float) -> None:
        """What the server says goes to ``receiver``."""
        self.spec = spec
        self.exchange = HttpExchange(spec)
        self.owns_exchange = True
        """Whether the exchange's connections are this channel's alone (closed with it)."""
        self.receiver = receiver
        self.max_bytes = max_bytes
        self.handshake_timeout = handshake_timeout
        self.initialize: dict[str, Any] | None = None
        self.initialized: bytes | None = None
        self.restarts = 0
        self._own = OwnRequests()
        self._order = anyio.Lock()
        """Messages go to the server in the order they came."""

    @property
    def label(self) -> str:
        """How messages name the upstream: its server's name (never its URL, whose path may hold a key)."""
        return f"`{self.spec.name}`"

    def label_for(self, ident: RequestId) -> str:
        """Every request goes to the one server."""
        return self.label

    def share(self, exchange: HttpExchange) -> None:
        """Send through ``exchange``, whose keep-alive connections others use too (so it is not closed with this)."""
        self.exchange = exchange
        self.owns_exchange = False

    async def reconfigure(self, servers: Sequence[ServerSpec]) -> str | None:
        """The same endpoint with new headers goes with the next request (a rotated token); why not, otherwise:
        another URL or transport, or another number of servers, needs a restart."""
        spec = servers[0] if len(servers) == 1 else None
        if not isinstance(spec, HttpServer):
            return replies.ONE_AND_SEVERAL if len(servers) > 1 else replies.OTHER_SERVERS
        if spec.url != self.spec.url or spec.transport != self.spec.transport:
            return replies.OTHER_URL
        self.exchange.use_headers(spec.headers)
        self.spec = spec
        return None


def _with_identity(headers: Mapping[str, str]) -> dict[str, str]:
    """The configured headers, and no compressed answers: the guard reads what it relays."""
    return {**headers, "accept-encoding": "identity"}
