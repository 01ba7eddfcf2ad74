"""HTTP guards and upstream servers served in the test's own event loop, on free local ports.

Beside :mod:`.inproc` (the message relay over memory streams), this is the HTTP side.
No process is started for them (a stdio upstream is still the guard's child process): a
test pays neither Python's start-up nor the guard's imports, and sees the same HTTP serving
as a real guard (its relays, store and stopping), driven by the SDK's real clients.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import pytest
import uvicorn
from starlette.types import ASGIApp

from mcp_loop_guard.cli_options import guard_parser
from mcp_loop_guard.config import GuardConfig, ServerSpec, StdioServer, command_line_config
from mcp_loop_guard.config_file import load_config
from mcp_loop_guard.plan import plan
from mcp_loop_guard.proxy.downstream.http.app import GuardStop, serve
from mcp_loop_guard.proxy.downstream.http.listen import listen
from mcp_loop_guard.settings import load_settings, setting_fields
from tests.harness import FIXTURES_DIR, fixture_command
from tests.http_harness import LOCALHOST, POLL_INTERVAL, START_LIMIT, free_port, http_client, running, starting


class QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the test's process keeps its own."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serving_app(app: ASGIApp) -> AsyncIterator[str]:
    """``app`` on a free local port in this event loop; its origin (``http://127.0.0.1:PORT``)."""
    port = free_port()
    server = QuietServer(uvicorn.Config(app, host=LOCALHOST, port=port, log_config=None, lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(20):
            while not server.started:  # noqa: ASYNC110 - uvicorn says so by a flag only
                await anyio.sleep(0.01)
        yield f"http://{LOCALHOST}:{port}"
        server.should_exit = True


@dataclass(frozen=True)
class InProcessServer:
    """An upstream served in this event loop, by the addresses the process harness gives a server."""

    base_url: str
    """``http://127.0.0.1:PORT``."""

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.base_url.rsplit(":", 1)[1])

    def url(self, path: str) -> str:
        """The URL of one of its paths."""
        return self.base_url + path

    @property
    def mcp_url(self) -> str:
        """Its streamable HTTP endpoint."""
        return self.url("/mcp")


def _fixture(name: str) -> Any:
    """A fixture server's module (``tests/fixtures/NAME.py``), imported as its process would run it."""
    if str(FIXTURES_DIR) not in sys.path:
        sys.path.insert(0, str(FIXTURES_DIR))
    return importlib.import_module(name)


def fixture_stdio(name: str, fixture: str, *args: str) -> StdioServer:
    """Our fixture server ``tests/fixtures/FIXTURE.py`` as the guard's stdio server ``name``, by the command
    ``fixture_command`` gives (an SDK fixture starts as a fork of this test process's fork server)."""
    command = fixture_command(fixture, *args)
    return StdioServer(name, command[0], tuple(command[1:]))


@asynccontextmanager
async def serving_counting(
    log: Path, *, stateless: bool = False, token_file: Path | None = None, sse: bool = False
) -> AsyncIterator[InProcessServer]:
    """The counting fixture (``tests/fixtures/counting_server.py``) in this event loop, recording each
    tools/call in ``log``: over streamable HTTP at ``/mcp`` (``stateless``: opening no sessions;
    ``token_file``: behind its bearer token), or over legacy SSE at ``/sse`` with ``sse``.

    For a server the test neither kills nor restarts: one it does is ``Rig.counting_http``'s process.
    """
    counting = _fixture("counting_server")
    server = counting.build(str(log))
    if sse:
        app = counting.sse_app(server)
    else:
        token = None if token_file is None else str(token_file)
        app = counting.http_app(server, stateless=stateless, token_file=token, log=str(log))
    async with serving_app(app) as origin:
        yield InProcessServer(origin)


@dataclass
class InProcessGuard:
    """One HTTP guard served in this event loop, and what stops it."""

    url: str
    """Its MCP endpoint (``/mcp``, or ``/sse`` for a legacy SSE front)."""
    stop: GuardStop
    ended: anyio.Event = field(default_factory=anyio.Event)
    """Set when its serving returned (it must not, before the test stops it)."""
    before: frozenset[int] = frozenset()
    """The pids of this process's descendants when it started: none of them is the guard's."""

    def descendants(self) -> list[psutil.Process]:
        """Every live process it started (its stdio servers and theirs): this process's new descendants."""
        found = psutil.Process().children(recursive=True)
        return [child for child in found if child.pid not in self.before and running(child)]

    @property
    def mcp_url(self) -> str:
        """Its MCP endpoint, by the name the process harness gives it."""
        return self.url

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.url.rsplit("/", 1)[0]

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.origin.rsplit(":", 1)[1])

    def at(self, path: str) -> str:
        """The URL of one of its paths (``/healthz``, ``/readyz``, ``/metrics``)."""
        return self.origin + path

    async def healthy(self) -> None:
        """Waits until ``/healthz`` answers 200 and no longer says ``starting``, as the process harness waits for a
        guard it starts.

        A request the guard could not answer in time is asked again: its start runs in this event
        loop, and on a loaded machine that can outlast one request's timeout.
        """
        async with http_client(timeout=2) as client:
            with anyio.fail_after(START_LIMIT):
                while True:
                    with suppress(httpx2.TransportError):
                        response = await client.get(self.at("/healthz"))
                        if response.status_code == 200 and not starting(response):
                            return
                    await anyio.sleep(POLL_INTERVAL)

    async def stays_up(self, seconds: float) -> None:
        """Watches it for a while (the time something inside it needs to happen); fails if its serving ended."""
        with anyio.move_on_after(seconds):
            await self.ended.wait()
        assert not self.ended.is_set(), "the guard stopped serving on its own"


@asynccontextmanager
async def serving_guard(servers: Sequence[ServerSpec], **settings: Any) -> AsyncIterator[InProcessGuard]:
    """A guard in front of ``servers`` with these settings (memory state unless given), on a free port."""
    async with serving_config(GuardConfig(None, tuple(servers), {}), **settings) as guard:
        yield guard


@asynccontextmanager
async def serving_config(config: GuardConfig, **settings: Any) -> AsyncIterator[InProcessGuard]:
    """A guard of ``config`` (a file's ``loopGuard`` section under these settings, memory state unless given).

    ``config`` comes from the CLI's own readers (``load_config``, ``url_config``,
    ``stdio_command_config``), so a file's servers and settings are read as the guard reads them.
    """
    port = free_port()
    settings.setdefault("state", "memory")
    loaded = load_settings(config.settings, host=LOCALHOST, port=port, **{"transport": "http", **settings})
    path = "/sse" if loaded.transport == "sse" else "/mcp"
    before = frozenset(child.pid for child in psutil.Process().children(recursive=True))
    guard = InProcessGuard(f"http://{LOCALHOST}:{port}{path}", GuardStop(), before=before)
    sockets = listen(LOCALHOST, port)

    async def serving() -> None:
        try:
            await serve(plan(config, loaded, settings), guard.stop, None, sockets)
        finally:
            guard.ended.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serving)
            yield guard
            guard.stop.drain()
            tg.cancel_scope.cancel()
    finally:
        # Cancelled, uvicorn leaves its listening sockets watched by the event loop: a socket closed
        # under that watch would leave its number registered, and the next guard of this loop whose
        # socket gets that number would never hear a connection.
        for server in getattr(guard.stop.server, "servers", ()):
            server.close()
        for listening in sockets:
            listening.close()


@asynccontextmanager
async def serving_cli(args: Sequence[str], **settings: Any) -> AsyncIterator[InProcessGuard]:
    """The guard a command line gives (``--config F``, ``--upstream URL [--header H]``, ``-- COMMAND``, and
    setting flags), read by the CLI's own parser and readers, served in process (memory state unless given)."""
    parsed = guard_parser(setting_fields()).parse_args(list(args))
    command = list(parsed.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if parsed.config is not None:
        config = load_config(Path(parsed.config))
    else:
        config = command_line_config(parsed.upstream, parsed.header, command, parsed.cwd)
    flags = {f.name: getattr(parsed, f.name) for f in setting_fields() if getattr(parsed, f.name) is not None}
    async with serving_config(config, **{**flags, **settings}) as guard:
        yield guard


@asynccontextmanager
async def serving_ready(args: Sequence[str], env: Mapping[str, str] | None = None) -> AsyncIterator[InProcessGuard]:
    """What ``Rig.guard(args, env=env)`` starts as a process, served in process: the command line's guard under
    ``env`` (its settings and its children's environment), its state where the guard keeps it, ready once
    ``/healthz`` answers 200."""
    with pytest.MonkeyPatch.context() as patched:
        for name, value in (env or {}).items():
            patched.setenv(name, value)
        async with serving_cli(args, state=None) as guard:
            await guard.healthy()
            yield guard
