"""Every configured upstream server, kept connected for the sessions that use it.

Two ways to reach an upstream, decided per server:

* shared: one connection serves every downstream session. Used for stdio
  servers whenever the guard serves more than one session or more than one
  upstream: one child process per server, not per agent. A supervisor restarts
  it with exponential backoff and jitter when it dies.
* per session: each downstream session opens its own connection, announcing
  its own client's capabilities. Used for HTTP upstreams behind an HTTP guard,
  and for the single stdio upstream of a stdio guard (the transparent case). A
  supervised probe connection keeps the server's identity and readiness known.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import anyio.abc
import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from mcp_loop_guard import __version__
from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer
from mcp_loop_guard.core.fingerprint import canonical_json
from mcp_loop_guard.proxy.process import UpstreamStartError
from mcp_loop_guard.proxy.upstream.session import (
    Downstream,
    Upstream,
    UpstreamGoneError,
    open_http_upstream,
    open_stdio_upstream,
)

logger = logging.getLogger(__name__)

Status = Literal["starting", "ready", "down"]

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


@dataclass(frozen=True, slots=True)
class Backoff:
    """Restart delays: exponential, capped, with "equal jitter" (half fixed, half random).

    The fixed half guarantees a crashed server is never restarted at once, so the
    calls right after a crash see why it crashed; the random half keeps many guards
    from restarting a shared server in step.
    """

    initial: float = 1.0
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap, self.initial * 2**attempt)
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))  # noqa: S311 - jitter, not crypto


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds that protect the guard from an upstream: message size, and time without an answer."""

    max_message_bytes: int = 64 * 1024 * 1024
    call_timeout: float | None = None


@asynccontextmanager
async def open_upstream(spec: ServerSpec, limits: Limits) -> AsyncIterator[Upstream]:
    """Open a connection (the handshake is left to the caller)."""
    opened: AbstractAsyncContextManager[Upstream]
    if isinstance(spec, StdioServer):
        command = [spec.command, *spec.args]
        opened = open_stdio_upstream(spec.name, command, env=spec.env, cwd=spec.cwd, max_bytes=limits.max_message_bytes)
    else:
        opened = open_http_upstream(spec.name, spec.url, transport=spec.transport, headers=spec.headers)
    async with opened as upstream:
        timeout = spec.call_timeout or limits.call_timeout
        if timeout is not None:
            upstream.handshake_timeout = timeout
        yield upstream


HEALTH_INTERVAL = 10.0
"""Seconds between pings of an idle HTTP upstream, to notice it went away."""

_FAILURES = (UpstreamStartError, UpstreamGoneError, MCPError, OSError)


class SharedRouter:
    """Routes a shared upstream's server-to-client traffic to the right downstream session.

    Notifications go to every session. A request (sampling, elicitation, roots) goes to
    the one session that has requests in flight on this upstream; when several do, the
    upstream gives no way to tell which one asked, so the request is refused rather
    than shown to the wrong client.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.sessions: dict[int, Downstream] = {}
        self.in_flight: dict[int, int] = {}

    def attach(self, key: int, downstream: Downstream) -> None:
        self.sessions[key] = downstream

    def detach(self, key: int) -> None:
        self.sessions.pop(key, None)
        self.in_flight.pop(key, None)

    @asynccontextmanager
    async def calling(self, key: int) -> AsyncIterator[None]:
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
        callers = [key for key, count in self.in_flight.items() if count > 0 and key in self.sessions]
        if len(callers) != 1:
            why = "no client has a request in flight" if not callers else "several clients have requests in flight"
            raise MCPError(
                types.INVALID_REQUEST,
                f"cannot route this request from shared upstream {self.name!r}: {why}",
            )
        return await self.sessions[callers[0]].request(request)

    async def notify(self, notification: types.ServerNotification) -> None:
        for downstream in list(self.sessions.values()):
            await downstream.notify(notification)


class Slot:
    """One configured upstream: its status, its identity, and how sessions reach it."""

    def __init__(
        self, spec: ServerSpec, *, shared: bool, limits: Limits | None = None, backoff: Backoff | None = None
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.shared = shared
        self.limits = limits or Limits()
        self.call_timeout = spec.call_timeout or self.limits.call_timeout
        """Seconds a request to this upstream may go without an answer or progress; None: no limit."""
        self.status: Status = "starting"
        self.detail = "not connected yet"
        self.identity: types.InitializeResult | None = None
        self.connection: Upstream | None = None
        """The shared connection (shared slots) or the probe (per-session slots), while ready."""
        self.router = SharedRouter(spec.name)
        self.restarts = 0
        self._backoff = backoff or Backoff()
        self._listeners: list[Callable[[Slot, bool], None]] = []
        self._tools_digest: str | None = None
        self._ready = anyio.Event()

    def on_change(self, listener: Callable[[Slot, bool], None]) -> None:
        """Call ``listener(slot, tools_changed)`` when the slot goes up or down, or comes back with other tools."""
        self._listeners.append(listener)

    def _set(self, status: Status, detail: str, *, tools_changed: bool = False) -> None:
        changed = status != self.status
        self.status, self.detail = status, detail
        if status == "ready":
            self._ready.set()
        if changed or tools_changed:
            for listener in list(self._listeners):
                listener(self, tools_changed)

    async def _tools_changed(self, upstream: Upstream) -> bool:
        """Whether a (re)connected upstream lists other tools than last time."""
        identity = upstream.initialize_result
        if identity is None or identity.capabilities.tools is None:
            return False
        try:
            listed = await upstream.request("tools/list", None)
        except _FAILURES:
            return False
        digest = hashlib.sha256(canonical_json(listed.get("tools"))).hexdigest()
        previous, self._tools_digest = self._tools_digest, digest
        return previous is not None and previous != digest

    async def wait_settled(self, limit: float) -> None:
        """Wait until the first connection attempt has succeeded or failed."""
        with anyio.move_on_after(limit):
            while self.status == "starting":  # noqa: ASYNC110 - status changes have no single event
                await anyio.sleep(0.02)

    async def supervise(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the shared connection (or the probe) up, restarting it with backoff forever."""
        task_status.started()
        attempt = 1
        while True:
            try:
                async with open_upstream(self.spec, self.limits) as upstream:
                    if self.shared:
                        upstream.downstream = self.router
                    await upstream.connect(
                        PROXY_INFO, SHARED_CAPABILITIES if self.shared else types.ClientCapabilities()
                    )
                    self.identity = upstream.initialize_result
                    self.connection = upstream
                    attempt = 1
                    self._set("ready", "connected", tools_changed=await self._tools_changed(upstream))
                    reason = await self._watch(upstream)
            except _FAILURES as exc:
                reason = str(exc) or type(exc).__name__
            self.connection = None
            self._set("down", reason)
            delay = self._backoff.delay(attempt)
            logger.warning("upstream %r is down (%s); reconnecting in %.1fs", self.name, reason, delay)
            attempt += 1
            self.restarts += 1
            await anyio.sleep(delay)

    async def _watch(self, upstream: Upstream) -> str:
        """Wait until the connection is gone; HTTP upstreams are pinged, since nothing else says so."""
        if isinstance(self.spec, HttpServer):
            async with anyio.create_task_group() as tg:

                async def ping() -> None:
                    while True:
                        await anyio.sleep(HEALTH_INTERVAL)
                        try:
                            with anyio.fail_after(HEALTH_INTERVAL):
                                await upstream.request("ping", None)
                        except (TimeoutError, *_FAILURES) as exc:
                            upstream.mark_gone(f"upstream {upstream.label} failed a health check: {exc}")
                            return

                tg.start_soon(ping)
                reason = await upstream.wait_gone()
                tg.cancel_scope.cancel()
            return reason
        return await upstream.wait_gone()

    @asynccontextmanager
    async def session_connection(
        self, client_info: types.Implementation, capabilities: types.ClientCapabilities, downstream: Downstream
    ) -> AsyncIterator[Upstream]:
        """A connection of one session's own, announcing that session's client."""
        async with open_upstream(self.spec, self.limits) as upstream:
            upstream.downstream = downstream
            await upstream.connect(client_info, capabilities)
            yield upstream
