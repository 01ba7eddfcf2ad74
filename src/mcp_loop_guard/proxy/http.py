"""Serve sessions over streamable HTTP (``/mcp``) or legacy SSE (``/sse`` + ``/messages/``).

The guard owns its session manager rather than using the SDK's, because every
session needs a server of its own (its loop state, its upstream links) and an
aborted session must end at once: its id then answers 404.

Where there is no MCP session (``--stateless``, or a 2026-07-28 request), loop
state is keyed by a request header (``LOOP_GUARD_SESSION_KEY_HEADER``), or by
the client's address when the header is absent, and expires after
``LOOP_GUARD_SESSION_IDLE_SECONDS`` without use.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import anyio
import anyio.abc
import uvicorn

# The SDK's single-exchange entry for 2026-07-28 requests; its manager is the only public caller.
from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection, serve_dual_era_loop, serve_loop
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.transport_context import TransportContext
from mcp_types import DEFAULT_NEGOTIATED_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_loop_guard.config import HttpServer
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.proxy.catalog import CollisionError, Names
from mcp_loop_guard.proxy.guards import AuthGuard, BodyLimit, security_settings
from mcp_loop_guard.proxy.pool import Slot
from mcp_loop_guard.proxy.server import GuardedProxy
from mcp_loop_guard.proxy.sessions import AbortLatch, SessionFactory
from mcp_loop_guard.settings import Settings

if TYPE_CHECKING:
    from mcp_loop_guard.plan import Plan

logger = logging.getLogger(__name__)


START_TIMEOUT = 30.0
"""How long start-up waits for every upstream's first connection attempt."""


@dataclass
class _Live:
    """One stateful session: its transport, its server, and the scope that ends it."""

    transport: StreamableHTTPServerTransport
    latch: AbortLatch
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)


@dataclass
class _Keyed:
    """Loop state for requests that carry no MCP session."""

    proxy: GuardedProxy
    stack: AsyncExitStack
    latch: AbortLatch
    last_used: float
    refused_until: float = 0.0


class GuardSessions:
    """Streamable HTTP sessions, keyed loop states, and SSE connections, each with its own proxy."""

    def __init__(self, factory: SessionFactory, settings: Settings, metrics: Metrics) -> None:
        self.factory = factory
        self.settings = settings
        self.metrics = metrics
        self.security: TransportSecuritySettings = security_settings(settings)
        self.sse = SseServerTransport(
            "/messages/", security_settings=self.security, max_request_body_size=settings.max_request_bytes
        )
        self.live: dict[str, _Live] = {}
        self.keyed: dict[str, _Keyed] = {}
        self._keyed_lock = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._expire_keyed)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                for keyed in list(self.keyed.values()):
                    with anyio.CancelScope(shield=True):
                        await keyed.stack.aclose()
                self.keyed.clear()

    # Streamable HTTP

    async def handle_mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER.lower())
        if (version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS) or self.settings.stateless:
            await self._handle_keyed(
                scope, receive, send, headers, modern=version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS
            )
            return
        session_id = headers.get(MCP_SESSION_ID_HEADER.lower())
        if session_id is None:
            await self._open_session(scope, receive, send)
            return
        live = self.live.get(session_id)
        if live is None:
            await _json_error(404, "Session not found")(scope, receive, send)
            return
        await live.transport.handle_request(scope, receive, send)
        if live.latch.verdict is not None or live.transport.is_terminated:
            await self._end(session_id, live)

    async def _open_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._tg is not None
        session_id = uuid4().hex
        transport = StreamableHTTPServerTransport(
            mcp_session_id=session_id,
            security_settings=self.security,
            idle_timeout=self.settings.session_idle_seconds,
        )
        # An abort makes the id unknown at once, so no request slips in behind the refusal;
        # the transport itself ends once that refusal has gone out.
        live = _Live(transport, AbortLatch(then=lambda: self.live.pop(session_id, None)))
        self.live[session_id] = live

        async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with live.scope:
                async with transport.connect() as (read, write), self.factory.open(live.latch) as proxy:
                    self.metrics.sessions.inc()
                    task_status.started()
                    try:
                        idle = transport.idle_scope or anyio.CancelScope()
                        with idle:
                            await serve_loop(proxy.server, read, write, lifespan_state={}, session_id=session_id)
                        if idle.cancelled_caught:
                            logger.info(
                                "session %s expired after %.0fs idle",
                                session_id[:8],
                                self.settings.session_idle_seconds,
                            )
                    finally:
                        self.metrics.sessions.dec()
            await self._end(session_id, live)

        await self._tg.start(run)
        status = await _status_of(transport.handle_request, scope, receive, send)
        if status is None or status >= 400 or live.latch.verdict is not None:
            await self._end(session_id, live)

    async def _end(self, session_id: str, live: _Live) -> None:
        """Forget a session (its id answers 404 from now on) and close what it holds, once."""
        self.live.pop(session_id, None)
        if live.scope.cancel_called:
            return
        if live.latch.verdict is not None:
            logger.warning("session %s aborted: tool %r kept looping", session_id[:8], live.latch.verdict.tool)
        if not live.transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await live.transport.terminate()
        live.scope.cancel()

    # Requests without an MCP session

    def _key(self, scope: Scope, headers: Mapping[str, str]) -> str:
        value = headers.get(self.settings.session_key_header.lower())
        if value:
            return f"header:{value}"
        client = scope.get("client")
        return f"client:{client[0] if client else 'unknown'}"

    async def _keyed_proxy(self, key: str) -> _Keyed:
        async with self._keyed_lock:
            keyed = self.keyed.get(key)
            if keyed is None:
                stack = AsyncExitStack()
                latch = AbortLatch()
                proxy = await stack.enter_async_context(self.factory.open(latch))
                keyed = _Keyed(proxy, stack, latch, anyio.current_time())
                self.keyed[key] = keyed
            keyed.last_used = anyio.current_time()
            return keyed

    async def _handle_keyed(
        self, scope: Scope, receive: Receive, send: Send, headers: Mapping[str, str], *, modern: bool
    ) -> None:
        key = self._key(scope, headers)
        keyed = await self._keyed_proxy(key)
        now = anyio.current_time()
        if keyed.refused_until > now:
            wait = int(keyed.refused_until - now) + 1
            await _json_error(
                429,
                f"loop guard: this agent's session was aborted for looping; retry after {wait}s "
                "with a different approach",
                headers={"Retry-After": str(wait)},
            )(scope, receive, send)
            return
        if modern:
            await handle_modern_request(keyed.proxy.server, self.security, False, {}, scope, receive, send)
        else:
            await self._serve_stateless(keyed, headers.get(MCP_PROTOCOL_VERSION_HEADER), scope, receive, send)
        if keyed.latch.verdict is not None:
            keyed.latch.verdict = None
            keyed.refused_until = anyio.current_time() + self.factory.policy.reset_after_seconds
            logger.warning(
                "key %s aborted for looping; refused for %.0fs",
                key.split(":", 1)[0],
                self.factory.policy.reset_after_seconds,
            )

    async def _serve_stateless(
        self, keyed: _Keyed, version: str | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        assert self._tg is not None
        transport = StreamableHTTPServerTransport(mcp_session_id=None, security_settings=self.security)

        async def run(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with transport.connect() as (read, write):
                task_status.started()
                # One request per connection, so the connection is born initialized (as in the
                # SDK's own stateless mode); with no session, nothing can reach the client
                # but the answer, hence no server-to-client requests.
                dispatcher: JSONRPCDispatcher[TransportContext] = JSONRPCDispatcher(
                    read,
                    write,
                    inline_methods=frozenset({"initialize"}),
                    transport_builder=lambda _md: TransportContext(kind="streamable-http", can_send_request=False),
                )
                connection = Connection.from_envelope(version or DEFAULT_NEGOTIATED_VERSION, None, None)
                await serve_connection(keyed.proxy.server, dispatcher, connection=connection, lifespan_state={})

        await self._tg.start(run)
        try:
            await transport.handle_request(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await transport.terminate()

    async def _expire_keyed(self) -> None:
        idle = self.settings.session_idle_seconds
        while True:
            await anyio.sleep(min(idle, 30.0))
            cutoff = anyio.current_time() - idle
            for key, keyed in list(self.keyed.items()):
                if keyed.last_used < cutoff and keyed.refused_until < anyio.current_time():
                    self.keyed.pop(key, None)
                    await keyed.stack.aclose()

    # Legacy SSE

    async def handle_sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        latch = AbortLatch()
        with anyio.CancelScope() as cancel:
            async with self.sse.connect_sse(scope, receive, send) as (read, write), self.factory.open(latch) as proxy:
                self.metrics.sessions.inc()
                try:
                    async with anyio.create_task_group() as tg:

                        async def watch_abort() -> None:
                            while latch.verdict is None:  # noqa: ASYNC110 - the verdict is set from a handler
                                await anyio.sleep(0.05)
                            await anyio.sleep(0.2)  # let the refusal reach the client first
                            logger.warning("SSE session aborted: tool %r kept looping", latch.verdict.tool)
                            cancel.cancel()

                        tg.start_soon(watch_abort)
                        await serve_dual_era_loop(proxy.server, read, write, lifespan_state={})
                        tg.cancel_scope.cancel()
                finally:
                    self.metrics.sessions.dec()

    async def handle_messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.sse.handle_post_message(scope, receive, send)


async def _status_of(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> int | None:
    status: int | None = None

    async def watch(message: Any) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watch)
    return status


def _json_error(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return Response(json.dumps(body), status_code=status, media_type="application/json", headers=dict(headers or {}))


def _slots(plan: Plan) -> list[Slot]:
    """HTTP upstreams get a connection per session; stdio upstreams one shared child each."""
    return [Slot(spec, shared=not isinstance(spec, HttpServer), limits=plan.limits) for spec in plan.config.servers]


async def _check_names(slots: list[Slot]) -> None:
    """Several upstreams: refuse to start when two would export the same tool name."""
    if len(slots) < 2:
        return
    names = Names()
    for slot in slots:
        if slot.connection is None or slot.identity is None or slot.identity.capabilities.tools is None:
            continue
        result = await slot.connection.request("tools/list", None)
        for tool in result.get("tools") or []:
            names.add(slot.name, str(tool.get("name", "")), prefixed=True)


class _Uvicorn(uvicorn.Server):
    """uvicorn re-raises a caught SIGTERM or SIGINT once it stops serving, which would kill
    the guard before it stops its upstreams' process groups; here the signal only stops serving."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True


def build_app(sessions: GuardSessions, slots: list[Slot], settings: Settings, metrics: Metrics) -> Starlette:
    """Routes: the MCP endpoint(s), health, readiness and metrics, behind auth and a body limit."""

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        upstreams = {
            slot.name: {"status": slot.status, "detail": slot.detail, "restarts": slot.restarts} for slot in slots
        }
        ready = all(slot.status == "ready" for slot in slots)
        return JSONResponse({"ready": ready, "upstreams": upstreams}, status_code=200 if ready else 503)

    async def metrics_endpoint(request: Request) -> Response:
        for slot in slots:
            metrics.upstream_up.labels(slot.name).set(1 if slot.status == "ready" else 0)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    routes: list[Route | Mount] = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics_endpoint),
    ]
    if settings.transport == "sse":
        routes.append(Route("/sse", _asgi(sessions.handle_sse)))
        routes.append(Mount("/messages/", app=sessions.handle_messages))
    else:
        routes.append(Route("/mcp", _asgi(sessions.handle_mcp), methods=["GET", "POST", "DELETE"]))
    app = Starlette(routes=routes)
    limited = BodyLimit(app, settings.max_request_bytes)
    token = settings.auth_token.get_secret_value() if settings.auth_token is not None else None
    return Starlette(routes=[Mount("/", app=AuthGuard(limited, token, open_paths=("/healthz",)))])


class _asgi:  # noqa: N801 - a Route endpoint that is a raw ASGI callable, not a request handler
    def __init__(self, handler: Any) -> None:
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.handler(scope, receive, send)


async def run_http(plan: Plan) -> int:
    """Start every upstream, then serve until uvicorn is told to stop."""
    settings = plan.settings
    metrics = Metrics()
    slots = _slots(plan)
    factory = plan.factory(slots, observe=metrics.observe_call)
    sessions = GuardSessions(factory, settings, metrics)
    async with anyio.create_task_group() as tg:
        listener = factory.on_slot_change(tg)
        for slot in slots:
            slot.on_change(listener)
            await tg.start(slot.supervise)
        for slot in slots:
            await slot.wait_settled(START_TIMEOUT)
            if slot.status != "ready":
                logger.warning("upstream %r is not ready at start-up: %s", slot.name, slot.detail)
        try:
            await _check_names(slots)
        except CollisionError as exc:
            logger.error("cannot start: %s", exc)
            tg.cancel_scope.cancel()
            return 1
        app = build_app(sessions, slots, settings, metrics)
        server = _Uvicorn(
            uvicorn.Config(
                app, host=settings.host, port=settings.port, log_config=None, access_log=False, lifespan="off"
            )
        )
        async with sessions.running():
            logger.info("serving MCP over %s on http://%s:%d", settings.transport, settings.host, settings.port)
            await server.serve()
        tg.cancel_scope.cancel()
    return 0
