"""The operator's API of an HTTP guard: see every agent, unblock one. Off unless LOOP_GUARD_ADMIN_TOKEN is set.

``GET /admin/agents`` lists the agents this guard serves (stateful and SSE sessions, keyed
sessionless agents) and those the state store keeps, with names and counts only: last tool,
streak, refusals in the window, calls in flight, budgets used, last verdict. Never arguments or
results. ``GET /admin/agents/{key}`` shows one; ``DELETE /admin/agents/{key}`` resets its loop
state and budgets, in this guard's memory and in the store, so a refused or aborted agent is
served again at its next call.

The admin token is its own: a client's token does not open these paths, and the admin token
does not open ``/mcp``. Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import AgentLoop, KeyInfo, Store, StoreError

__all__ = ["ADMIN_PREFIX", "Admin", "LiveAgent"]

logger = logging.getLogger(__name__)

ADMIN_PREFIX = "/admin/"
STORE_TIMEOUT = 5.0
"""Seconds one store operation may take for an operator."""


@dataclass(frozen=True, slots=True)
class LiveAgent:
    """An agent this guard holds in memory now."""

    kind: str
    """``session`` (streamable HTTP), ``sse`` or ``keyed`` (sessionless, by key header or address)."""
    loop: AgentLoop
    in_flight: int = 0


class Admin:
    """The admin routes, over the agents a guard holds (``live``) and its store."""

    def __init__(self, token: str, store: Store, live: Callable[[], Iterator[LiveAgent]]) -> None:
        """``live()`` yields the agents held in memory at the time of the request."""
        self.token = token.encode()
        self.store = store
        self.live = live

    def routes(self) -> list[Route]:
        """The routes to mount; every one checks the admin token first."""
        return [
            Route("/admin/agents", self._guarded(self.list_agents), methods=["GET"]),
            Route("/admin/agents/{key:path}", self._guarded(self.one_agent), methods=["GET", "DELETE"]),
        ]

    def _guarded(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def checked(request: Request) -> Response:
            scheme, _, presented = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), self.token):
                return JSONResponse(
                    {"error": "the admin token is required (Authorization: Bearer ...)"},
                    status_code=401,
                    headers={"www-authenticate": "Bearer"},
                )
            return await endpoint(request)

        return checked

    async def list_agents(self, request: Request) -> Response:
        """Every agent, live ones first; the store's view where this guard holds none."""
        agents, problem = await self._agents()
        body: dict[str, object] = {"agents": list(agents.values()), "store": self.store.name}
        if problem:
            body["storeError"] = problem
        return JSONResponse(body)

    async def one_agent(self, request: Request) -> Response:
        """One agent's summary (GET), or its reset (DELETE)."""
        key = request.path_params["key"]
        if request.method == "DELETE":
            return await self._reset(key)
        agents, _ = await self._agents()
        found = agents.get(key)
        if found is None:
            return JSONResponse({"error": f"no agent with key {key!r}"}, status_code=404)
        return JSONResponse(found)

    async def _agents(self) -> tuple[dict[str, dict[str, object]], str]:
        agents: dict[str, dict[str, object]] = {}
        now = time.time()
        for held in self.live():
            loop = held.loop
            info = KeyInfo(loop.key, loop.state, now + loop.ttl).summary()
            info.update({"live": True, "kind": held.kind, "inFlight": held.in_flight or info.get("inFlight", 0)})
            agents[loop.key] = info
        problem = ""
        try:
            with anyio.fail_after(STORE_TIMEOUT):
                stored = await self.store.keys()
        except (StoreError, TimeoutError) as error:
            problem = str(error) or "the store did not answer in time"
            stored = []
        for item in stored:
            if item.key in agents:
                if self.store.shared:  # the store is the truth for a shared key; keep what only memory knows
                    agents[item.key] = {**agents[item.key], **item.summary(), "live": True}
                continue
            agents[item.key] = {**item.summary(), "live": False}
        return agents, problem

    async def _reset(self, key: str) -> Response:
        held = [agent for agent in self.live() if agent.loop.key == key]
        for agent in held:
            agent.loop.state = State()
        try:
            with anyio.fail_after(STORE_TIMEOUT):
                stored = await self.store.reset(key)
        except (StoreError, TimeoutError) as error:
            logger.warning("admin reset of one agent: the store failed (%s)", error or "timed out")
            return JSONResponse(
                {"key": key, "reset": bool(held), "error": f"the state store failed: {error or 'timed out'}"},
                status_code=502 if not held else 207,
            )
        if not held and not stored:
            return JSONResponse({"error": f"no agent with key {key!r}"}, status_code=404)
        logger.info("admin reset the loop state and budgets of one agent")
        return JSONResponse({"key": key, "reset": True, "live": bool(held), "stored": stored})
