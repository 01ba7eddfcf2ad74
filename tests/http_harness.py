"""Helpers for running the guard as an HTTP server and driving it with the SDK's HTTP clients.

The guard and its upstream servers run as real processes on free local ports; the
clients are the SDK's streamable HTTP and SSE clients, or plain HTTP requests where a
test checks the HTTP layer itself (status codes, headers).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
import h11
import httpx2
import psutil
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import (
    BIN_DIR,
    VERDICT_KEY,
    Callbacks,
    command_process,
    describe,
    everything_command,
    exit_status,
    fixture_command,
    guard_argv,
    pypi_server_command,
    server_environment,
)

TIME_BIN = BIN_DIR / "mcp-server-time"
LOCALHOST = "127.0.0.1"
KEY_HEADER = "X-Loop-Guard-Key"
"""The documented default header that keys the loop state of requests without an MCP session."""
SESSION_HEADER = "mcp-session-id"
HANDSHAKE_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"

START_LIMIT = 30.0
"""Seconds a server may take to answer its first HTTP request."""
STOP_LIMIT = 10.0
"""Seconds a server may take to exit after SIGTERM before its process group is killed."""
CLIENT_TIMEOUT = httpx2.Timeout(30, read=300)
"""The SDK's default for MCP clients: a long read, since a response stream may stay open."""
POLL_INTERVAL = 0.05
"""Seconds between two looks at an effect that sends no message (a status page, a port)."""

Transport = Literal["http", "sse"]
T = TypeVar("T")
Launch = Callable[[int], tuple[Sequence[str], Mapping[str, str]]]
"""Given a port: the argv and the extra environment of a server listening on it."""


TLS = ssl.create_default_context()
"""One TLS context for every test client: building one per client (httpx's default) costs tens of ms."""


def http_client(**options: Any) -> httpx2.AsyncClient:
    """An HTTP client sharing the tests' one TLS context."""
    return httpx2.AsyncClient(verify=TLS, **options)


class FloodConnection:
    """One keep-alive HTTP/1.1 connection spoken with h11, for tests that send thousands of requests.

    httpx spends about a millisecond of the test's CPU on each request, more than the guard
    answering it; h11 (what uvicorn serves with) a tenth of that. A request the server answers
    by closing the connection is followed by a new one, and a kept connection the server closed
    while idle (its keep-alive timeout) is replaced before any answer is lost, as httpx does.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.stream: anyio.abc.SocketStream | None = None
        self.connection = h11.Connection(h11.CLIENT)
        self.answering = False
        """Whether the server began its answer to the request being made."""

    async def post(self, path: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
        """POSTs body with headers (a ``Host`` of its own is kept); the answer's status and body."""
        sent = {"Host": f"{LOCALHOST}:{self.port}", **headers, "Content-Length": str(len(body))}
        request = h11.Request(method="POST", target=path, headers=list(sent.items()))
        kept = self.stream is not None
        self.answering = False
        try:
            return await self._exchange(request, body)
        except (anyio.BrokenResourceError, h11.RemoteProtocolError):
            if not kept or self.answering:
                raise
        await self.aclose()  # the kept connection was closed before it answered: once more, on a new one
        return await self._exchange(request, body)

    async def _exchange(self, request: h11.Request, body: bytes) -> tuple[int, bytes]:
        if self.stream is None:
            self.stream = await anyio.connect_tcp(LOCALHOST, self.port)
            self.connection = h11.Connection(h11.CLIENT)
        await self.stream.send(self.connection.send(request) + self.connection.send(h11.Data(data=body)))
        await self.stream.send(self.connection.send(h11.EndOfMessage()))
        status, answer = 0, bytearray()
        while True:
            event = self.connection.next_event()
            if event is h11.NEED_DATA:
                self.connection.receive_data(await self._receive())
            elif isinstance(event, h11.Response):
                status, self.answering = event.status_code, True
            elif isinstance(event, h11.Data):
                answer += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        if self.connection.our_state is h11.DONE and self.connection.their_state is h11.DONE:
            self.connection.start_next_cycle()
        else:
            await self.aclose()
        return status, bytes(answer)

    async def _receive(self) -> bytes:
        assert self.stream is not None
        try:
            return await self.stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return b""

    async def aclose(self) -> None:
        """Closes the connection; the next request opens another."""
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None


PORT_BLOCK = 1500
"""Ports each test process draws from, in turn: its own block, below Linux's ephemeral range (from 32768)."""
FIRST_PORT = 20000


def _worker_ports() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = FIRST_PORT + (int(worker) % 8 if worker.isdigit() else 0) * PORT_BLOCK
    return itertools.cycle(range(first, first + PORT_BLOCK))


_ports = _worker_ports()


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now.

    Each pytest worker takes the ports of a block of its own in turn, so two workers never
    pick the same port between the check and a server's bind, and none of them is a port the
    system hands out by itself (a bind to port 0, the local end of an outgoing connection).
    """
    for _ in range(PORT_BLOCK):
        port = next(_ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((LOCALHOST, port))
            except OSError:
                continue
            return port
    msg = f"no free port left among this worker's {PORT_BLOCK}"
    raise RuntimeError(msg)


# --- config files ----------------------------------------------------------------------------


def write_config(
    path: Path, servers: Mapping[str, Mapping[str, Any]], loop_guard: Mapping[str, Any] | None = None
) -> Path:
    """Writes an mcpServers config file (with an optional loopGuard section) and returns its path."""
    document: dict[str, Any] = {"mcpServers": dict(servers)}
    if loop_guard is not None:
        document["loopGuard"] = dict(loop_guard)
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path


def time_entry() -> dict[str, Any]:
    """The config entry of mcp-server-time over stdio."""
    command, *args = time_command()
    return {"command": command, "args": args}


def time_command() -> list[str]:
    """The argv of mcp-server-time over stdio, started as a fork of the fork server (see fork_server.py)."""
    return pypi_server_command(TIME_BIN.name, "--local-timezone", "UTC")


def everything_stdio_entry() -> dict[str, Any]:
    """The config entry of server-everything over stdio."""
    command, *args = everything_command("stdio")
    return {"command": command, "args": args}


def everything_http_entry(url: str) -> dict[str, Any]:
    """The config entry of a server-everything reached over streamable HTTP."""
    return {"type": "streamable-http", "url": url}


# --- processes -------------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """A server the test started, listening on a local port, with its output in a file."""

    process: anyio.abc.Process
    port: int
    stderr: Path
    marker: str

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{LOCALHOST}:{self.port}"

    def url(self, path: str) -> str:
        """The URL of one path on this server."""
        return self.base_url + path

    @property
    def mcp_url(self) -> str:
        """The streamable HTTP endpoint."""
        return self.url("/mcp")

    def stderr_text(self) -> str:
        """What the process (and the children sharing its stderr) wrote so far."""
        return self.stderr.read_text(encoding="utf-8", errors="replace") if self.stderr.exists() else ""

    def descendants(self) -> list[psutil.Process]:
        """Every live process below this one (zombies are dead)."""
        try:
            found = command_process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [child for child in found if running(child)]

    def stderr_tail(self, lines: int = 30) -> str:
        """The last lines of the process's output, for assertion messages."""
        return "\n".join(self.stderr_text().splitlines()[-lines:])

    def rss(self) -> int:
        """Resident memory of the server process itself, in bytes."""
        return int(command_process(self.process.pid).memory_info().rss)

    def client_connections(self) -> int:
        """Client connections the server holds open on its port."""
        connections = command_process(self.process.pid).net_connections(kind="tcp")
        return sum(1 for c in connections if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == self.port)

    def signal(self, signum: signal.Signals) -> None:
        """Sends a signal to the server process alone, as a client does: with kill(2), while it has not exited.

        Not with ``Process.send_signal``: that polls the process first (``waitpid``), so it reaps
        a server that has just exited before the event loop's child watcher does; the watcher then
        finds no child and reports status 255 instead of the server's own.
        """
        if self.process.returncode is None:
            with suppress(ProcessLookupError):  # exited meanwhile, not reaped by us
                os.kill(self.process.pid, signum)

    async def kill(self) -> None:
        """Kills the server with SIGKILL and waits for its command to end: its fork, where it is one, is gone by then.

        Killing a fork's stand-in would leave the fork serving a moment longer (its fork server
        kills it when it sees the stand-in gone), long enough to take the next request.
        """
        with suppress(psutil.NoSuchProcess):
            command_process(self.process.pid).kill()
        await self.process.wait()

    async def wait_exit(self, within: float) -> int:
        """Waits up to ``within`` seconds for the server to exit; returns its exit status."""
        with anyio.fail_after(within):
            return await exit_status(self.process)

    async def stays_up(self, seconds: float) -> None:
        """Watches the process for a while (the time something inside it needs to happen); fails if it exits."""
        with anyio.move_on_after(seconds):
            await exit_status(self.process)
        code = self.process.returncode
        assert code is None, f"exited with status {code}:\n{self.stderr_tail()}"

    def child(self, name: str) -> psutil.Process:
        """The one live descendant whose command line mentions name (an executable or a script): its fork, if forked."""
        matches: list[psutil.Process] = []
        for process in self.descendants():
            with suppress(psutil.Error):
                if any(name in part for part in process.cmdline()):
                    matches.append(process)
        assert len(matches) == 1, f"{name!r} among {describe(self.descendants())}"
        return command_process(matches[0].pid)


class PortTakenError(Exception):
    """The server could not bind its port: another process took it between the check and the bind."""


async def wait_answering(
    url: str,
    process: anyio.abc.Process,
    output: Callable[[], str],
    accept: Callable[[int], bool] | None,
    start_limit: float = START_LIMIT,
) -> None:
    """Polls url until the server answers with an accepted status; fails at once if its process exits.

    With ``accept`` None, a TCP connection to the url's port is enough (for a server that
    never answers HTTP).

    Raises:
        PortTakenError: the process exited because another one took its port first.
    """
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    async with http_client(timeout=2) as client:
        with anyio.fail_after(start_limit):
            while True:
                if process.returncode is not None:
                    text = output()
                    if "address already in use" in text.lower():
                        raise PortTakenError(text)
                    msg = f"exited with status {process.returncode} before serving:\n{text}"
                    raise AssertionError(msg)
                if accept is None:
                    with suppress(OSError):
                        stream = await anyio.connect_tcp(LOCALHOST, port)
                        await stream.aclose()
                        return
                else:
                    with suppress(httpx2.TransportError):
                        response = await client.get(url)
                        if accept(response.status_code) and not starting(response):
                            return
                await anyio.sleep(POLL_INTERVAL)


def starting(response: httpx2.Response) -> bool:
    """Whether a guard's ``/healthz`` says it is alive but still starting its upstreams (MCP requests wait)."""
    with suppress(ValueError):
        found = response.json()
        return isinstance(found, dict) and found.get("status") == "starting"
    return False


async def stop_server(server: ServerProcess) -> None:
    """SIGTERM, then SIGKILL to the whole process group; waits until every descendant is gone.

    Children still running once the server has exited get SIGTERM, then SIGKILL: whether
    the guard itself stops its upstreams is checked by a test of its own.
    """
    with anyio.CancelScope(shield=True):
        family = server.descendants()
        process = server.process
        if process.returncode is None:
            with suppress(ProcessLookupError):
                process.terminate()
            with anyio.move_on_after(STOP_LIMIT):
                await process.wait()
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.move_on_after(5):
                await process.wait()
        for how in (signal.SIGTERM, signal.SIGKILL):
            for survivor in family:
                with suppress(psutil.Error):
                    survivor.send_signal(how)
            family = await wait_gone(family, 3)
        await process.aclose()


def running(process: psutil.Process) -> bool:
    """Whether the process still runs: a zombie has ended, whoever is to reap it."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_gone(processes: Sequence[psutil.Process], within: float) -> list[psutil.Process]:
    """Waits up to ``within`` seconds for the processes to end; returns those still running."""
    with anyio.move_on_after(within):
        while any(running(process) for process in processes):  # noqa: ASYNC110 - no event for another's child
            await anyio.sleep(POLL_INTERVAL)
    return [process for process in processes if running(process)]


@asynccontextmanager
async def run_server(
    launch: Launch,
    *,
    marker: str,
    stderr: Path,
    ready_path: str = "/healthz",
    accept: Callable[[int], bool] | None = lambda status: status == 200,
    attempts: int = 3,
    start_limit: float = START_LIMIT,
    port: int | None = None,
) -> AsyncIterator[ServerProcess]:
    """Starts a server on a free port (or on ``port``) and waits until it answers; stops it and its children on exit.

    With ``accept`` None the server is ready once its port takes a TCP connection.

    The port is picked just before the start, so another process may take it first: the
    server is then started again on another port, up to ``attempts`` times.
    """
    fixed = port
    for attempt in range(1, attempts + 1):
        port = fixed if fixed is not None else free_port()
        argv, env = launch(port)
        with stderr.open("a", encoding="utf-8") as errlog:
            process = await anyio.open_process(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=errlog,
                stderr=errlog,
                env=server_environment(marker, env),
                start_new_session=True,
            )
        server = ServerProcess(process=process, port=port, stderr=stderr, marker=marker)
        try:
            await wait_answering(server.url(ready_path), server.process, server.stderr_text, accept, start_limit)
        except PortTakenError:
            await stop_server(server)
            if attempt == attempts:
                raise
            continue
        except BaseException:
            await stop_server(server)
            raise
        try:
            yield server
        finally:
            await stop_server(server)
        return


def guard_http_argv(port: int, args: Sequence[str], transport: Transport = "http", *, fork: bool = True) -> list[str]:
    """``python -m mcp_loop_guard --transport T --host 127.0.0.1 --port P *args`` (a fork: see ``guard_argv``)."""
    return [*guard_argv(fork=fork), "--transport", transport, "--host", LOCALHOST, "--port", str(port), *args]


def serve_guard(
    args: Sequence[str],
    *,
    marker: str,
    stderr: Path,
    env: Mapping[str, str] | None = None,
    transport: Transport = "http",
    nofile: int | None = None,
    start_limit: float = START_LIMIT,
    fork: bool = True,
) -> AbstractAsyncContextManager[ServerProcess]:
    """Runs the guard over HTTP in front of the given upstreams (``--config F``, ``-- CMD ...``).

    ``nofile`` lowers its limit of open files (``RLIMIT_NOFILE``) to that many; ``start_limit``
    is how long it may take to answer ``/healthz``; ``fork=False`` starts it as a process of its
    own (see ``guard_argv``).
    """

    def launch(port: int) -> tuple[Sequence[str], Mapping[str, str]]:
        argv = guard_http_argv(port, args, transport, fork=fork)
        if nofile is not None:
            argv = [*fixture_command("with_nofile", str(nofile), "--"), *argv]
        return argv, dict(env or {})

    return run_server(launch, marker=marker, stderr=stderr, start_limit=start_limit)


def serve_raw_http(mode: str, *, marker: str, stderr: Path) -> AbstractAsyncContextManager[ServerProcess]:
    """Runs the raw HTTP fixture (``status:N`` or ``silent``); ready once it takes connections."""
    return run_server(
        lambda port: (fixture_command("raw_http_server", str(port), mode), {}),
        marker=marker,
        stderr=stderr,
        ready_path="/mcp",
        accept=None,
    )


def serve_everything_http(*, marker: str, stderr: Path) -> AbstractAsyncContextManager[ServerProcess]:
    """Runs server-everything in its streamable HTTP mode (port from ``PORT``, endpoint ``/mcp``)."""
    return run_server(
        lambda port: (everything_command("streamableHttp"), {"PORT": str(port)}),
        marker=marker,
        stderr=stderr,
        ready_path="/mcp",
        accept=lambda status: True,
    )


# --- plain HTTP ------------------------------------------------------------------------------


def initialize_body(
    client_name: str = "mcp-loop-guard-e2e",
    capabilities: Mapping[str, Any] | None = None,
    version: str = HANDSHAKE_VERSION,
) -> dict[str, Any]:
    """A JSON-RPC initialize request of the handshake era (2025-11-25 unless told)."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": dict(capabilities or {}),
            "clientInfo": {"name": client_name, "version": "0"},
        },
    }


def tool_call_body(name: str, arguments: Mapping[str, Any], request_id: int = 1) -> dict[str, Any]:
    """A JSON-RPC tools/call request."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": dict(arguments)},
    }


MCP_POST_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
"""What a streamable HTTP client sends with every POST."""


async def http_get(url: str, headers: Mapping[str, str] | None = None) -> httpx2.Response:
    """One GET, read in full."""
    async with http_client(timeout=10) as client:
        return await client.get(url, headers=dict(headers or {}))


async def http_post(url: str, body: object, headers: Mapping[str, str] | None = None) -> httpx2.Response:
    """One POST of a JSON-RPC message to a streamable HTTP endpoint, read in full."""
    async with http_client(timeout=10) as client:
        return await client.post(url, content=json.dumps(body), headers=MCP_POST_HEADERS | dict(headers or {}))


async def ping_in_session(url: str, session_id: str) -> httpx2.Response:
    """A ping in a session: 404 once the session has ended."""
    headers = {**MCP_POST_HEADERS, SESSION_HEADER: session_id}
    return await http_post(url, {"jsonrpc": "2.0", "id": 99, "method": "ping"}, headers)


async def post_cut_after(
    url: str, body: Mapping[str, Any], headers: Mapping[str, str], enough: Callable[[str], bool]
) -> str:
    """POST a request and read its event stream until ``enough(text)`` holds at an event's end; then drop it."""
    received = ""
    async with http_client(timeout=10) as client:
        headers = MCP_POST_HEADERS | dict(headers)
        async with client.stream("POST", url, content=json.dumps(body), headers=headers) as response:
            assert response.headers["content-type"].startswith("text/event-stream"), response.headers
            async for chunk in response.aiter_text():
                received += chunk
                if received.endswith("\n\n") and enough(received):
                    break
    return received


def jsonrpc_payloads(response: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages in a response, whether sent as JSON or as server-sent events."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line.removeprefix("data:").strip())
            for line in response.text.splitlines()
            if line.startswith("data:") and line.removeprefix("data:").strip()
        ]
    payload = response.json()
    return payload if isinstance(payload, list) else [payload]


def payload_for(response: httpx2.Response, request_id: object) -> dict[str, Any]:
    """The JSON-RPC response to the request with this id in an HTTP response; fails when there is none."""
    found = [message for message in jsonrpc_payloads(response) if message.get("id") == request_id]
    assert len(found) == 1, (response.status_code, response.text[:2000])
    return found[0]


def payload_verdict(message: Mapping[str, Any]) -> str | None:
    """The guard's verdict action on a raw tools/call response, None where it added none."""
    meta = (message.get("result") or {}).get("_meta") or {}
    found = meta.get(VERDICT_KEY)
    return found["action"] if isinstance(found, Mapping) else None


async def raw_call(
    url: str, name: str, arguments: Mapping[str, Any], headers: Mapping[str, str] | None = None, request_id: int = 1
) -> httpx2.Response:
    """One tools/call as a bare POST without an MCP session (stateless mode, or keyed by a header)."""
    return await http_post(
        url, tool_call_body(name, arguments, request_id), {"Mcp-Protocol-Version": HANDSHAKE_VERSION, **(headers or {})}
    )


async def raw_session(
    url: str, headers: Mapping[str, str] | None = None, capabilities: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """A stateful session opened with bare POSTs (initialize, then initialized); the headers its requests need."""
    opened = await http_post(url, initialize_body(capabilities=capabilities), headers)
    assert opened.status_code == 200, opened.text
    session = {SESSION_HEADER: opened.headers[SESSION_HEADER], "Mcp-Protocol-Version": HANDSHAKE_VERSION}
    session |= dict(headers or {})
    initialized = await http_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    assert initialized.status_code == 202, initialized.text
    return session


def imported(guard: ServerProcess) -> set[str]:
    """The modules the guard imported so far (it runs with ``PYTHONPROFILEIMPORTTIME``)."""
    lines = guard.stderr_text().splitlines()
    return {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}


def sdk_modules(guard: ServerProcess) -> set[str]:
    """The SDK's modules the guard imported so far (it runs with ``PYTHONPROFILEIMPORTTIME``)."""
    return {name for name in imported(guard) if name.split(".")[0] in ("mcp", "mcp_types")}


async def poll(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], interval: float = POLL_INTERVAL) -> T:
    """Runs probe until done accepts what it returns, and returns that; wrap in fail_after.

    For state another process exposes only when asked (a status page), with no event to wait on.
    """
    while not done(found := await probe()):  # noqa: ASYNC110 - asking is the only way to know
        await anyio.sleep(interval)
    return found


# --- metrics ---------------------------------------------------------------------------------


def metric_value(text: str, sample: str, **labels: str) -> float:
    """The sum of the samples called ``sample`` whose labels include ``labels``; 0 when none."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == sample and all(found.labels.get(key) == value for key, value in labels.items()):
                total += found.value
    return total


# --- MCP sessions ----------------------------------------------------------------------------


def mcp_http_client(headers: Mapping[str, str] | None = None) -> httpx2.AsyncClient:
    """An HTTP client for the SDK's streamable HTTP transport, sending headers with every request."""
    return http_client(headers=dict(headers or {}), timeout=CLIENT_TIMEOUT)


@asynccontextmanager
async def http_streams(url: str, headers: Mapping[str, str] | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streamable HTTP transport to url on a client of the tests' (``Client(url)`` builds a TLS context)."""
    async with mcp_http_client(headers) as client, streamable_http_client(url, http_client=client) as streams:
        yield streams


def sse_http_client(
    headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
) -> httpx2.AsyncClient:
    """The SDK's legacy SSE client's client factory, on the tests' one TLS context."""
    return http_client(headers=dict(headers or {}), timeout=timeout or CLIENT_TIMEOUT, auth=auth)


@dataclass
class HttpSession:
    """An initialized client session over HTTP and the session ids the server handed out."""

    session: ClientSession
    initialize: types.InitializeResult
    session_ids: list[str] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        """The ``Mcp-Session-Id`` the server gave this session."""
        assert len(self.session_ids) == 1, self.session_ids
        return self.session_ids[0]


@asynccontextmanager
async def open_http_session(
    url: str, *, headers: Mapping[str, str] | None = None, callbacks: Callbacks | None = None
) -> AsyncIterator[HttpSession]:
    """An initialized session with the SDK's streamable HTTP client; headers go on every request."""
    ids: list[str] = []

    async def record_session_id(response: httpx2.Response) -> None:
        found = response.headers.get(SESSION_HEADER)
        if found and found not in ids:
            ids.append(found)

    async with AsyncExitStack() as stack:
        client = await stack.enter_async_context(mcp_http_client(headers))
        client.event_hooks["response"].append(record_session_id)
        read_stream, write_stream = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        session = await stack.enter_async_context((callbacks or Callbacks()).session(read_stream, write_stream))
        with anyio.fail_after(20):
            result = await session.initialize()
        yield HttpSession(session=session, initialize=result, session_ids=ids)


@asynccontextmanager
async def open_sse_session(
    url: str, *, headers: Mapping[str, str] | None = None, callbacks: Callbacks | None = None
) -> AsyncIterator[HttpSession]:
    """An initialized session with the SDK's legacy SSE client."""
    async with AsyncExitStack() as stack:
        read_stream, write_stream = await stack.enter_async_context(
            sse_client(url, headers=dict(headers or {}), httpx_client_factory=sse_http_client)
        )
        session = await stack.enter_async_context((callbacks or Callbacks()).session(read_stream, write_stream))
        with anyio.fail_after(20):
            result = await session.initialize()
        yield HttpSession(session=session, initialize=result)


def tool_names(result: types.ListToolsResult) -> set[str]:
    """The names of the listed tools."""
    return {tool.name for tool in result.tools}


# --- one test's servers ----------------------------------------------------------------------


class Rig:
    """Starts one test's servers with their output in its directory, shown when the test fails."""

    def __init__(self, directory: Path, marker: str) -> None:
        self.directory = directory
        self.marker = marker
        self.logs: list[Path] = []

    def log(self, label: str) -> Path:
        """A new file for one process's output."""
        path = self.directory / f"{len(self.logs)}-{label}.log"
        self.logs.append(path)
        return path

    def config(self, servers: Mapping[str, Mapping[str, Any]], loop_guard: Mapping[str, Any] | None = None) -> Path:
        """Writes a config file into the test's directory."""
        return write_config(self.directory / f"mcp-{len(self.logs)}.json", servers, loop_guard)

    def guard(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        transport: Transport = "http",
        nofile: int | None = None,
        start_limit: float = START_LIMIT,
        fork: bool = True,
    ) -> AbstractAsyncContextManager[ServerProcess]:
        """The guard serving HTTP (or SSE) in front of the upstreams args name (``fork``: see ``guard_argv``)."""
        return serve_guard(
            args,
            marker=self.marker,
            stderr=self.log("guard"),
            env=env,
            transport=transport,
            nofile=nofile,
            start_limit=start_limit,
            fork=fork,
        )

    def raw_http(self, mode: str) -> AbstractAsyncContextManager[ServerProcess]:
        """The raw HTTP fixture: ``status:N`` answers N to everything, ``silent`` never answers."""
        return serve_raw_http(mode, marker=self.marker, stderr=self.log(f"raw-http-{mode.replace(':', '-')}"))

    def recording_http(self, log: Path) -> AbstractAsyncContextManager[ServerProcess]:
        """The raw HTTP fixture as a minimal MCP server writing every request it parses to ``log``."""
        return serve_raw_http(f"record:{log}", marker=self.marker, stderr=self.log("raw-http-record"))

    def everything_http(self) -> AbstractAsyncContextManager[ServerProcess]:
        """server-everything in its own streamable HTTP mode."""
        return serve_everything_http(marker=self.marker, stderr=self.log("everything-http"))

    def counting_http(
        self, log: Path, *args: str, port: int | None = None, fork: bool = True
    ) -> AbstractAsyncContextManager[ServerProcess]:
        """The counting fixture over streamable HTTP, recording each tools/call it receives in ``log``.

        ``args``: e.g. ``--stateless``, a server that opens no sessions (ready once its port takes
        connections: its ``GET /mcp`` would open an event stream that never ends). ``port``: a
        fixed port (a server started where the guard expects one). ``fork``: see ``fixture_command``.
        """
        stateless = "--stateless" in args
        return run_server(
            lambda port_: (
                fixture_command("counting_server", "--http", str(port_), *args, fork=fork),
                {"COUNTING_SERVER_LOG": str(log)},
            ),
            marker=self.marker,
            stderr=self.log("counting-http"),
            ready_path="/mcp",
            accept=None if stateless else lambda status: True,
            port=port,
            attempts=1 if port else 3,
        )

    def counting_sse(self, log: Path, port: int | None = None) -> AbstractAsyncContextManager[ServerProcess]:
        """The counting fixture over legacy SSE (``/sse``), on ``port`` if given (a restart on the same port).

        Ready once its port takes connections: a ``GET /sse`` would open a session.
        """
        return run_server(
            lambda port_: (fixture_command("counting_server", "--sse", str(port_)), {"COUNTING_SERVER_LOG": str(log)}),
            marker=self.marker,
            stderr=self.log("counting-sse"),
            accept=None,
            port=port,
            attempts=1 if port else 3,
        )

    def listen_http(self, *args: str) -> AbstractAsyncContextManager[ServerProcess]:
        """The listen fixture (an SDK 2.x server of both eras) over streamable HTTP; ``args``: e.g. ``--resumable``."""
        return run_server(
            lambda port: (fixture_command("listen_server", "--http", str(port), *args), {}),
            marker=self.marker,
            stderr=self.log("listen-http"),
            ready_path="/mcp",
            accept=lambda status: True,
        )

    def report(self) -> None:
        """Copies every process's output into the test's captured output."""
        for path in self.logs:
            if path.exists() and (text := path.read_text(encoding="utf-8", errors="replace")):
                print(f"--- {path.name} ---\n{text}", file=sys.stderr)
