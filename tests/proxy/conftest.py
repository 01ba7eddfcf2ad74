"""The in-process layer's fixtures: each parity test runs directly and through the guard."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

import pytest
from mcp import Client

from tests.proxy.inproc import AnyServer, GuardedTransport, direct

Mode = Literal["direct", "guarded"]
Opener = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture(params=["direct", "guarded"])
def mode(request: pytest.FixtureRequest) -> Mode:
    """Where the client connects: straight to the server, or through the guard."""
    mode: Mode = request.param
    return mode


@pytest.fixture
def open_client(mode: Mode) -> Opener:
    """Opens an SDK client on a server, directly or through the guard as the test's ``mode`` says."""

    @asynccontextmanager
    async def opened(
        server: AnyServer, *, settings: dict[str, Any] | None = None, **client: Any
    ) -> AsyncIterator[Client]:
        transport: Any = direct(server) if mode == "direct" else GuardedTransport(server, **(settings or {}))
        async with Client(transport, **client) as session:
            yield session

    return opened
