"""Serve many agents over streamable HTTP (``/mcp``) or legacy SSE (``/sse`` + ``/messages/``).

Start-up supervises every upstream (a broken one is reported, never fatal) and serves at
once: ``/healthz``, ``/readyz`` and ``/metrics`` answer while the upstreams start, and MCP
requests wait until each upstream's first start has succeeded or failed (at most 30 s). It
serves until SIGTERM or SIGINT. At the first signal the guard stops accepting, answers every call
still in flight with an error result on its own stream, and then stops its upstreams (unlike a
stdio guard, whose first signal reaches them at once: here they must outlive the answers); a
second signal sends their process groups SIGTERM, a third SIGKILL. Neither prints a traceback.
"""

from __future__ import annotations

import logging
import signal
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import anyio.abc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_loop_guard.core import replies
from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.agents import opened_events, opened_store, sighup_reload
from mcp_loop_guard.proxy.downstream.http.admin import ADMIN_PREFIX, Admin, LiveAgent
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.fronts import Start, topology
from mcp_loop_guard.proxy.downstream.http.listen import listen
from mcp_loop_guard.proxy.downstream.http.middleware import (
    RETRY_AFTER_BUSY,
    AuthGuard,
    BodyGuard,
    HostGuard,
    reply,
    retry_after,
    security_settings,
)
from mcp_loop_guard.proxy.downstream.http.protocol import protocol_class, raise_open_file_limit
from mcp_loop_guard.proxy.relay.stopping import Stopping
from mcp_loop_guard.proxy.upstream import signals
from mcp_loop_guard.proxy.upstream.backoff import START_TIMEOUT
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.health import Supervised
from mcp_loop_guard.store import MemoryStore, Store, StoreHealth

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

DESCRIPTOR_RESERVE = 64
"""Open files kept out of the connection cap: upstream pipes and sockets, the state file, logs."""
GRACEFUL_SECONDS = 5.0
"""After the first signal, how long requests in flight get to finish (they are answered with an error)."""


class _Uvicorn(uvicorn.Server):
    """uvicorn, with signals left to the guard: it only stops serving when told to."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Front(Protocol):
    """What serves ``/mcp``: the SDK-based sessions, or the relay in front of one HTTP server."""

    agents: Agents

    async def handle_mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One request to ``/mcp``."""
        ...

    def held(self) -> Iterator[LiveAgent]:
        """Every agent held in memory, for the admin API."""
        ...

    def running(self) -> AbstractAsyncContextManager[None]:
        """The relay serving (its sessions' expiry, its shared upstream), until the context ends."""
        ...


def build_app(  # noqa: PLR0917 - what the routes serve, all needed
    sessions: Front,
    slots: Sequence[Supervised],
    plan: Plan,
    metrics: Metrics,
    health: StoreHealth,
    store: Store,
    stop: GuardStop,
) -> ASGIApp:
    """Routes (MCP endpoints, health, readiness, metrics, admin) behind Host/Origin, tokens and body checks.

    MCP requests wait for ``stop.started``: a client's first request then meets its upstreams started.
    """
    settings = plan.settings

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok" if stop.started.is_set() else "starting"})

    async def readyz(request: Request) -> Response:
        upstreams = {
            slot.name: {"status": slot.status, "reason": slot.reason, "restarts": slot.restarts} for slot in slots
        }
        ready = all(slot.status == "ready" for slot in slots)
        store = {"kind": health.name, "status": "degraded" if health.degraded else "ok"}
        return JSONResponse({"ready": ready, "upstreams": upstreams, "store": store}, status_code=200 if ready else 503)

    async def metrics_endpoint(request: Request) -> Response:
        for slot in slots:
            metrics.upstream_up.labels(slot.name).set(1 if slot.status == "ready" else 0)
        metrics.store_up.set(0 if health.degraded else 1)
        metrics.agents.set(len(sessions.agents))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    routes: list[Route | Mount] = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics_endpoint),
    ]
    if settings.transport == "sse":
        from mcp_loop_guard.proxy.downstream.http.session_relay import SessionRelay  # noqa: PLC0415 - loaded already

        assert isinstance(sessions, SessionRelay), "legacy SSE connections are sessions of a message relay"
        routes.append(Route("/sse", _Raw(sessions.handle_sse, stop)))
        routes.append(Mount("/messages/", app=_Raw(sessions.handle_messages, stop)))
        json_paths = ["/messages"]
    else:
        routes.append(Route("/mcp", _Raw(sessions.handle_mcp, stop), methods=["GET", "POST", "DELETE"]))
        json_paths = ["/mcp"]
    app: ASGIApp = Starlette(routes=routes)
    app = BodyGuard(app, settings.max_request_bytes, settings.body_timeout_seconds, json_paths)
    app = AuthGuard(app, settings.tokens(), open_paths=("/healthz",))
    if settings.admin_token is not None:
        admin = Admin(settings.admin_token.get_secret_value(), store, sessions.held)
        app = _ByPrefix(ADMIN_PREFIX, Starlette(routes=admin.routes()), app)
    return HostGuard(app, security_settings(settings), open_paths=("/healthz",))


class _ByPrefix:
    """Paths under ``prefix`` to one app (with its own authentication), the rest to another."""

    def __init__(self, prefix: str, inner: ASGIApp, rest: ASGIApp) -> None:
        self.prefix = prefix
        self.inner = inner
        self.rest = rest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefix):
            await self.inner(scope, receive, send)
        else:
            await self.rest(scope, receive, send)


class _Raw:
    """A Route endpoint that is a raw ASGI callable, not a request handler, served once the relay runs."""

    def __init__(self, handler: Callable[[Scope, Receive, Send], Any], stop: GuardStop) -> None:
        self.handler = handler
        self.stop = stop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.stop.started.is_set():
            waiting = anyio.CancelScope()
            self.stop.stopping.add(waiting)
            with waiting:
                await self.stop.started.wait()
            self.stop.stopping.discard(waiting)
            if not self.stop.started.is_set():
                await reply(send, 503, replies.STOPPING_AT_START, retry_after(RETRY_AFTER_BUSY))
                return
        await self.handler(scope, receive, send)


class GuardStop:
    """One guard's stopping: which signals came, and what to stop (its server, its relays' calls in flight)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.server: _Uvicorn | None = None
        self.main = anyio.CancelScope()
        self.reload: Callable[[str], None] | None = None
        self.stopping = Stopping()
        """This guard's, handed to its relays (another guard in the process has its own)."""
        self.started = anyio.Event()
        """Every upstream's first start has succeeded or failed and the relay runs: MCP requests are served."""

    def drain(self) -> None:
        """Stop serving: calls in flight are answered with an error, then the server ends."""
        self.stopping.set()
        if self.server is not None:
            self.server.should_exit = True


async def _watch_signals(stop: GuardStop) -> None:
    """The first signal stops serving (calls in flight get an error); a second one cuts the grace short.

    It watches until the very end, so a signal during the upstreams' shutdown is handled too.
    SIGHUP reloads the config file (when there is one).
    """
    async for signum in signals.received():
        if signum == signal.SIGHUP:
            if stop.reload is not None:
                stop.reload("SIGHUP")
            else:
                logger.info("received SIGHUP; there is no config file to reload")
            continue
        stop.received.append(signum)
        if len(stop.received) == 1 and stop.server is not None:
            logger.info("received %s; answering calls in flight and stopping", signal.Signals(signum).name)
            stop.drain()
            continue
        logger.info("received %s; stopping now", signal.Signals(signum).name)
        if stop.server is not None:
            stop.server.force_exit = True
        stop.main.cancel()


async def run_http(plan: Plan, first: ChildProcess | None = None, listeners: Sequence[socket.socket] = ()) -> int:
    """Start every upstream, then serve until a signal says stop; 128 + the signal, or 0.

    ``first``: the one stdio server's child, when it was started before the event loop;
    ``listeners``: sockets bound to the guard's address (bound here, before any upstream, if none).

    Raises:
        ListenError: no ``listeners`` were given and the address cannot be listened on.
    """
    signals.upstreams_after_drain()
    sockets = list(listeners) or listen(plan.settings.host, plan.settings.port)
    stop = GuardStop()
    async with anyio.create_task_group() as outer:
        outer.start_soon(_watch_signals, stop)
        with stop.main:
            await serve(plan, stop, first, sockets)
        outer.cancel_scope.cancel()
    return 128 + stop.received[0] if stop.received else 0


async def serve(plan: Plan, stop: GuardStop, first: ChildProcess | None, sockets: Sequence[socket.socket]) -> None:
    """Serve one guard on ``sockets`` until ``stop`` ends it; every part of it (relays, upstreams, stopping) its own."""
    settings = plan.settings
    metrics = Metrics()
    descriptors = raise_open_file_limit()
    async with opened_store(plan) as (store, health), opened_events(plan) as events:
        forget: Callable[[str], object] | None = store.forget if isinstance(store, MemoryStore) else None
        observer = metrics.observer()
        agents = Agents(
            plan, store, health, events, observer, limit=settings.max_keys, stopping=stop.stopping, on_evict=forget
        )
        async with anyio.create_task_group() as tg:
            served = await topology(plan).build(plan, Start(agents, metrics, tg, first))
            sessions, slots = served.sessions, served.slots
            stop.reload = sighup_reload(plan, served.reconfigure, tg)
            connections = min(settings.max_connections, max(8, descriptors - DESCRIPTOR_RESERVE))
            config = uvicorn.Config(
                build_app(sessions, slots, plan, metrics, health, store, stop),
                host=settings.host,
                port=settings.port,
                log_config=None,
                access_log=False,
                lifespan="off",
                http=protocol_class(
                    header_timeout=settings.header_timeout_seconds,
                    body_timeout=settings.body_timeout_seconds,
                    max_connections=connections,
                ),
                timeout_graceful_shutdown=int(GRACEFUL_SECONDS),
            )
            stop.server = _Uvicorn(config)
            logger.info("serving over %s on http://%s:%d", settings.transport, settings.host, settings.port)
            async with anyio.create_task_group() as front:
                front.start_soon(_relay_once_started, sessions, slots, stop.started)
                await stop.server.serve(list(sockets))
                front.cancel_scope.cancel()
            tg.cancel_scope.cancel()


async def _relay_once_started(sessions: Front, slots: Sequence[Supervised], started: anyio.Event) -> None:
    """Once every upstream's first start has succeeded or failed (each within ``START_TIMEOUT``), run the relay
    and let MCP requests in, until cancelled: a client's first request meets its upstreams as they will be."""
    for slot in list(slots):
        await slot.wait_settled(START_TIMEOUT)
        if slot.status != "ready":
            logger.warning("upstream %r is not ready at start-up: %s", slot.name, slot.detail)
    async with sessions.running():
        logger.info("serving MCP")
        started.set()
        await anyio.sleep_forever()
