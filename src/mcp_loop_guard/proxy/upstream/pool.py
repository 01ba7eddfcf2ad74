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
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

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
from mcp_loop_guard.proxy.upstream.session import Downstream, Upstream, UpstreamGoneError
from mcp_loop_guard.proxy.upstream.transports import open_http_upstream, open_stdio_upstream

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

HTTP_HANDSHAKE_TIMEOUT = 15.0
"""Seconds an HTTP upstream may take to answer initialize (stdio ones get longer: ``npx`` may download)."""
HEALTH_INTERVAL = 10.0
"""Seconds between pings of an idle HTTP upstream, to notice it went away."""


def reason_of(error: BaseException) -> str:
    """One line saying why an upstream connection failed, for logs (never the whole traceback)."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(reason_of(inner) for inner in error.exceptions[:3])
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:500]


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


class Slot:
    """One configured upstream: its status, its identity, and how sessions reach it."""

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
        self.spec = spec
        self.name = spec.name
        self.shared = shared
        self.limits = limits or Limits()
        self.call_timeout = spec.call_timeout or self.limits.call_timeout
        """Seconds a request to this upstream may go without an answer or progress; None: no limit."""
        self.status: Status = "starting"
        self.detail = "not connected yet"
        """Why it is down, for logs (may name the command and its last stderr lines)."""
        self.reason = "not connected yet"
        """Why it is down, for ``/readyz`` and other clients: no command line, no stderr, no secret."""
        self.identity: types.InitializeResult | None = None
        self.connection: Upstream | None = None
        """The shared connection (shared slots) or the probe (per-session slots), while ready."""
        self.router = SharedRouter(spec.name)
        self.restarts = 0
        self.supervised = False
        """A supervisor keeps a connection (or probe) up: its status says whether sessions should try it."""
        self._backoff = backoff or Backoff()
        self._first = first
        self._listeners: list[Callable[[Slot, bool], None]] = []
        self._tools_digest: str | None = None

    def on_change(self, listener: Callable[[Slot, bool], None]) -> None:
        """Call ``listener(slot, tools_changed)`` when the slot goes up or down, or comes back with other tools."""
        self._listeners.append(listener)

    def _set(self, status: Status, detail: str, reason: str, *, tools_changed: bool = False) -> None:
        changed = status != self.status
        self.status, self.detail, self.reason = status, detail, reason
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
        except (MCPError, UpstreamGoneError):
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
        self.supervised = True
        task_status.started()
        attempt = 1
        while True:
            try:
                reason = await self._serve_once()
                attempt = 1
            except Exception as exc:
                known = _expected(exc)
                if known is None:
                    logger.warning("upstream %r failed unexpectedly", self.name, exc_info=exc)
                reason = reason_of(known or exc)
            self.connection = None
            self._set("down", reason, _public_reason(reason, self.spec))
            delay = self._backoff.delay(attempt)
            logger.warning("upstream %r is down (%s); reconnecting in %.1fs", self.name, reason, delay)
            attempt += 1
            self.restarts += 1
            await anyio.sleep(delay)

    async def _serve_once(self) -> str:
        """One connection, from opening to its end; returns why it ended."""
        first, self._first = self._first, None
        async with open_upstream(self.spec, self.limits, first) as upstream:
            if self.shared:
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
                    await anyio.sleep(HEALTH_INTERVAL)
                    try:
                        with anyio.fail_after(HEALTH_INTERVAL):
                            await upstream.request("ping", None)
                    except (TimeoutError, MCPError, UpstreamGoneError, OSError) as exc:
                        upstream.mark_gone(f"upstream {upstream.label} failed a health check: {reason_of(exc)}")
                        return

            tg.start_soon(ping)
            reason = await upstream.wait_gone()
            tg.cancel_scope.cancel()
        return reason


_EXPECTED = (UpstreamStartError, UpstreamGoneError, MCPError, OSError)
"""How an upstream connection normally fails: said in one line, no traceback."""


def _expected(exc: BaseException) -> BaseException | None:
    """``exc``, or the first expected failure inside a group of them (task groups wrap what they raise)."""
    if isinstance(exc, _EXPECTED):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _expected(inner)
            if found is not None:
                return found
    return None


_EXIT = re.compile(r"exited with status -?\d+|was killed by (?:SIG[A-Z0-9]+|signal \d+)")
_HTTP_STATUS = re.compile(r"\b([45]\d\d)\b")


def _public_reason(reason: str, spec: ServerSpec) -> str:
    """What ``/readyz`` may say of a failure: its kind and status, never a command line, stderr line or URL."""
    lowered = reason.lower()
    found = _EXIT.search(reason)
    if found is not None:
        return found.group(0)
    for words, said in (
        ("cannot start", "cannot start its command"),
        ("did not answer initialize", "did not answer initialize"),
        ("failed a health check", "failed a health check"),
    ):
        if words in lowered:
            return said
    status = _HTTP_STATUS.search(reason) if isinstance(spec, HttpServer) else None
    if status is not None:
        return f"HTTP {status.group(1)}"
    if "refused initialize" in lowered:
        return "refused initialize"
    return "down" if isinstance(spec, StdioServer) else "unreachable"
