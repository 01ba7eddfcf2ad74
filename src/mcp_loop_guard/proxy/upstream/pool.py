"""Every configured upstream of the aggregating proxy, kept connected for the sessions that use it.

Two ways to reach an upstream, decided per server:

* shared: one connection serves every downstream session (stdio servers behind an HTTP
  guard, or several upstreams): one child process per server, not per agent. A supervisor
  restarts it with exponential backoff and jitter when it dies.
* per session: each downstream session opens its own connection, announcing its own client's
  capabilities (HTTP upstreams behind an HTTP guard, and every upstream of a stdio guard). A
  supervised probe keeps the server's identity and readiness known.

Whatever goes wrong with one upstream (it cannot start, refuses, dies, hangs) is caught here,
reported in ``/readyz`` and the logs, and retried; it never takes the guard or another
upstream down.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from mcp_loop_guard import __version__
from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer
from mcp_loop_guard.core.fingerprint import canonical_json
from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.upstream.backoff import Backoff
from mcp_loop_guard.proxy.upstream.child import ChildProcess, UpstreamStartError
from mcp_loop_guard.proxy.upstream.health import HTTP_HANDSHAKE_TIMEOUT, Supervised, reason_of
from mcp_loop_guard.proxy.upstream.session import Downstream, Upstream, UpstreamGoneError
from mcp_loop_guard.proxy.upstream.transports import open_http_upstream, open_stdio_upstream

logger = logging.getLogger(__name__)

PROXY_INFO = types.Implementation(name="mcp-loop-guard", version=__version__)
"""How the guard names itself to shared upstreams and, with several upstreams, to clients."""

SHARED_CAPABILITIES = types.ClientCapabilities(
    sampling=types.SamplingCapability(),
    elicitation=types.ElicitationCapability(
        form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
    ),
)
"""A shared connection serves clients of every kind, so it claims the per-request client
features (answering with an error for a client that lacks one) but not roots: one server
process cannot have each client's roots."""


@asynccontextmanager
async def open_upstream(spec: ServerSpec, limits: Limits, first: ChildProcess | None = None) -> AsyncIterator[Upstream]:
    """Open a connection (the handshake is left to the caller); ``first``: a stdio server's child, started already.

    Raises:
        UpstreamStartError: a stdio command that cannot be started.
        UpstreamGoneError: an HTTP upstream that cannot be reached.
    """
    opened: AbstractAsyncContextManager[Upstream]
    if isinstance(spec, StdioServer):
        opened = open_stdio_upstream(spec, max_bytes=limits.max_message_bytes, first=first)
    else:
        opened = open_http_upstream(spec.name, spec.url, transport=spec.transport, headers=spec.headers)
    async with opened as upstream:
        timeout = spec.call_timeout or limits.call_timeout
        if timeout is not None:
            upstream.handshake_timeout = timeout
        elif isinstance(spec, HttpServer):
            upstream.handshake_timeout = (
                HTTP_HANDSHAKE_TIMEOUT  # nothing to download: a server that is up answers at once
            )
        yield upstream


class SharedRouter:
    """Routes a shared upstream's server-to-client traffic to the right downstream session.

    Notifications go to every session. A request (sampling, elicitation, roots) goes to the
    one session that has requests in flight on this upstream; when several do, the upstream
    gives no way to tell which one asked, so the request is refused rather than shown to the
    wrong client.
    """

    def __init__(self, name: str) -> None:
        """Route for upstream ``name``."""
        self.name = name
        self.sessions: dict[int, Downstream] = {}
        self.in_flight: dict[int, int] = {}

    def attach(self, key: int, downstream: Downstream) -> None:
        """A session starts using the shared connection."""
        self.sessions[key] = downstream

    def detach(self, key: int) -> None:
        """A session ended."""
        self.sessions.pop(key, None)
        self.in_flight.pop(key, None)

    @asynccontextmanager
    async def calling(self, key: int) -> AsyncIterator[None]:
        """Count one request of session ``key`` in flight on this upstream."""
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        try:
            yield
        finally:
            left = self.in_flight.get(key, 1) - 1
            if left > 0:
                self.in_flight[key] = left
            else:
                self.in_flight.pop(key, None)

    async def request(self, request: BaseModel) -> dict[str, Any]:
        """Send a server-to-client request to the one session it can be for."""
        callers = [key for key, count in self.in_flight.items() if count > 0 and key in self.sessions]
        if len(callers) != 1:
            why = "no client has a request in flight" if not callers else "several clients have requests in flight"
            raise MCPError(
                types.INVALID_REQUEST,
                f"cannot route this request from shared upstream {self.name!r}: {why}",
            )
        return await self.sessions[callers[0]].request(request)

    async def notify(self, notification: types.ServerNotification) -> None:
        """Tell every session."""
        for downstream in list(self.sessions.values()):
            await downstream.notify(notification)


class Slot(Supervised):
    """One configured upstream: its status, its identity, and how sessions reach it."""

    expected = (UpstreamStartError, UpstreamGoneError, MCPError, OSError)

    def __init__(
        self,
        spec: ServerSpec,
        *,
        shared: bool,
        limits: Limits | None = None,
        backoff: Backoff | None = None,
        first: ChildProcess | None = None,
    ) -> None:
        """``shared``: one connection for every session (else one per session, plus a probe).

        ``first``: the server's child when it was started before the guard loaded its HTTP
        stack; its first connection takes it instead of starting another.
        """
        super().__init__(spec, backoff)
        self.shared = shared
        self.limits = limits or Limits()
        self.call_timeout = spec.call_timeout or self.limits.call_timeout
        """Seconds a request to this upstream may go without an answer or progress; None: no limit."""
        self.identity: types.InitializeResult | None = None
        self.connection: Upstream | None = None
        """The shared connection (shared slots) or the probe (per-session slots), while ready."""
        self.router = SharedRouter(spec.name)
        self._first = first
        self._tools_digest: str | None = None

    async def _tools_changed(self, upstream: Upstream) -> bool:
        """Whether a (re)connected upstream lists other tools than last time."""
        identity = upstream.initialize_result
        if identity is None or identity.capabilities.tools is None:
            return False
        try:
            listed = await upstream.request("tools/list", None)
        except (MCPError, UpstreamGoneError):
            return False
        digest = hashlib.sha256(canonical_json(listed.get("tools"))).hexdigest()
        previous, self._tools_digest = self._tools_digest, digest
        return previous is not None and previous != digest

    def _lost(self) -> None:
        self.connection = None

    async def _serve_once(self) -> str:
        """One connection, from opening to its end; returns why it ended."""
        first, self._first = self._first, None
        async with open_upstream(self.spec, self.limits, first) as upstream:
            # A shared connection's traffic goes to its sessions; a probe's notifications go to the
            # requests without a session that use it (their subscriptions/listen streams).
            upstream.downstream = self.router
            await upstream.connect(PROXY_INFO, SHARED_CAPABILITIES if self.shared else types.ClientCapabilities())
            self.identity = upstream.initialize_result
            self.connection = upstream
            self._set("ready", "connected", "connected", tools_changed=await self._tools_changed(upstream))
            return await self._watch(upstream)

    async def _watch(self, upstream: Upstream) -> str:
        """Wait until the connection is gone; HTTP upstreams are pinged, since nothing else says so."""
        if not isinstance(self.spec, HttpServer):
            return await upstream.wait_gone()
        async with anyio.create_task_group() as tg:

            async def ping() -> None:
                while True:
                    await anyio.sleep(self.limits.health_interval)
                    try:
                        with anyio.fail_after(self.limits.health_interval):
                            await upstream.request("ping", None)
                    except (TimeoutError, MCPError, UpstreamGoneError, OSError) as exc:
                        upstream.mark_gone(f"upstream {upstream.label} failed a health check: {reason_of(exc)}")
                        return

            tg.start_soon(ping)
            reason = await upstream.wait_gone()
            tg.cancel_scope.cancel()
        return reason
