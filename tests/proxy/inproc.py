"""The guard's message relay in-process: a real SDK server behind it, the SDK client in front, no processes.

The upstream is an SDK server (lowlevel ``Server`` or ``MCPServer``) running in this event
loop. It stands where the relay expects a child process: lines written to its "stdin" are
parsed by the SDK's own JSON-RPC adapter and handed to ``server.run``; what the server sends
is serialized the way the SDK's stdio transport does. The client side is the same: the SDK
client's messages become lines for :meth:`Pipe.from_client`, and the lines the relay writes
become the client's messages. Everything between those two edges is the production relay
(``Pipe``, ``StdioUpstream``, ``Judge``, the detector, an in-memory state store).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._memory import InMemoryTransport
from mcp.client._transport import TransportStreams
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.message import SessionMessage

from mcp_loop_guard.config import GuardConfig, ServerSpec, StdioServer
from mcp_loop_guard.plan import Plan, plan
from mcp_loop_guard.proxy.downstream.agents import agent_loop, judge_for, opened_events
from mcp_loop_guard.proxy.relay.judge import Judge
from mcp_loop_guard.proxy.relay.pipe import Pipe
from mcp_loop_guard.proxy.upstream.channel import Receiver
from mcp_loop_guard.proxy.upstream.channels import opener
from mcp_loop_guard.proxy.upstream.child import ChildProcess
from mcp_loop_guard.proxy.upstream.stdio import StdioUpstream
from mcp_loop_guard.proxy.wire.lines import LineReader
from mcp_loop_guard.settings import Settings
from mcp_loop_guard.store.agent import StoreHealth
from mcp_loop_guard.store.memory import MemoryStore

SERVER_NAME = "inproc"
AnyServer = Server[Any] | MCPServer


def _lowlevel(server: AnyServer) -> Server[Any]:
    return server._lowlevel_server if isinstance(server, MCPServer) else server


def _line(message: SessionMessage) -> bytes:
    """A message as the SDK's stdio transport writes it."""
    return message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"


def _message(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as error:
        return error


class _Out:
    """Bytes a side writes, as the relay's ``Fd.read`` yields them (``b""`` at the end)."""

    def __init__(self) -> None:
        self.send, self.receive = anyio.create_memory_object_stream[bytes](64)

    async def read(self) -> bytes:
        try:
            return await self.receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return b""


class _In:
    """The server's "stdin": lines in, SDK messages out."""

    def __init__(self, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        self.send = send
        self.lines = LineReader(64 * 1024 * 1024)
        self.called: Counter[str] = Counter()
        """Per tool, the tools/call that reached the server (what a wiretap would count)."""

    async def write(self, data: bytes | memoryview) -> None:
        try:
            for line in self.lines.feed(bytes(data)):
                assert isinstance(line, bytes)
                message = _message(line)
                if isinstance(message, SessionMessage):
                    self._count(message)
                await self.send.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise BrokenPipeError(32, "the in-process server stopped reading") from None

    def _count(self, message: SessionMessage) -> None:
        body = message.message
        if isinstance(body, types.JSONRPCRequest) and body.method == "tools/call" and isinstance(body.params, dict):
            self.called[str(body.params.get("name"))] += 1


@dataclass(eq=False)
class InProcessChild:
    """Stands in for :class:`ChildProcess`: an SDK server in this event loop, spoken to in lines."""

    server: AnyServer
    to_child: _In
    from_child: _Out
    label: str = "in-process server"
    stderr_tail: deque[str] = field(default_factory=deque)
    stopping: bool = False
    returncode: int | None = None
    exited: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    async def watch(self) -> None:
        await self.exited.wait()

    async def relay_stderr(self) -> None:
        """An in-process server has no stderr of its own."""

    async def input_stuck(self, after: float, counts: Callable[[float], bool]) -> None:
        """A memory stream takes every line at once: never stuck."""
        await anyio.sleep_forever()

    async def write(self, line: bytes) -> None:
        """One line to the server, as :meth:`ChildProcess.write` (the memory stream keeps lines whole)."""
        await self.to_child.write(line)

    def describe_exit(self, *, stderr: bool = False) -> str:
        return "closed its stdout" if self.returncode is None else f"exited with status {self.returncode}"

    def close_stdin(self) -> None:
        self.stopping = True
        self.to_child.send.close()

    async def stop(self, *, eof_grace: float = 0.5, term_grace: float = 0.5) -> None:
        self.close_stdin()
        with anyio.move_on_after(eof_grace):
            await self.exited.wait()
        self.scope.cancel()

    def crash(self, status: int = 1) -> None:
        """The server dies at once, as a process killed mid-call."""
        self.returncode = status
        self.scope.cancel()


@asynccontextmanager
async def running(server: AnyServer) -> AsyncIterator[InProcessChild]:
    """The server serving lines until it is stopped or crashes."""
    to_server, server_read = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    server_write, from_server = anyio.create_memory_object_stream[SessionMessage](64)
    child = InProcessChild(server, _In(to_server), _Out())
    lowlevel = _lowlevel(server)

    async def serve() -> None:
        with child.scope:
            async with server_read, server_write:
                await lowlevel.run(server_read, server_write, lowlevel.create_initialization_options())
        if child.returncode is None:
            child.returncode = 0
        await server_write.aclose()

    async def emit() -> None:
        async with from_server, child.from_child.send:
            async for message in from_server:
                await child.from_child.send.send(_line(message))
        child.exited.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve)
        tg.start_soon(emit)
        yield child
        await child.stop()
        tg.cancel_scope.cancel()


@dataclass
class GuardedSession:
    """What a test can look at behind the client: the relay, its judge, whether it ended the session."""

    pipe: Pipe
    child: InProcessChild
    children: dict[str, InProcessChild]
    aborted: anyio.Event = field(default_factory=anyio.Event)

    @property
    def judge(self) -> Judge:
        return self.pipe.judge


def guard_plan(*names: str, **settings: Any) -> Plan:
    """The plan of a guard in front of in-process servers (by these names), with these settings (field names)."""
    servers = tuple(
        StdioServer(name=name, command="in-process", display="in-process server") for name in names or (SERVER_NAME,)
    )
    config = GuardConfig(path=None, servers=servers, settings={})
    return plan(config, Settings(**settings))


@asynccontextmanager
async def guarded(server: AnyServer, **settings: Any) -> AsyncIterator[tuple[TransportStreams, GuardedSession]]:
    """Client streams reaching ``server`` through the production relay; the session behind them.

    Settings come from ``settings`` (field names) and the environment (``LOOP_GUARD_*``), as
    the guard's own; an event log is written when they name one.
    """
    async with guarded_several({SERVER_NAME: server}, **settings) as relayed:
        yield relayed


@asynccontextmanager
async def guarded_several(
    servers: Mapping[str, AnyServer], **settings: Any
) -> AsyncIterator[tuple[TransportStreams, GuardedSession]]:
    """Client streams reaching ``servers`` (by name) through the production relay: one, or a router of several."""
    the_plan = guard_plan(*servers, **settings)
    health = StoreHealth("memory")
    agent = agent_loop(the_plan, MemoryStore(), health, "inproc-agent")
    async with opened_events(the_plan) as events, AsyncExitStack() as stack:
        judge = judge_for(the_plan, agent, label="inproc-agent", events=events)
        children = {name: await stack.enter_async_context(running(server)) for name, server in servers.items()}
        async with _relayed(children, the_plan, judge) as relayed:
            yield relayed


@asynccontextmanager
async def _relayed(
    children: Mapping[str, InProcessChild], the_plan: Plan, judge: Judge
) -> AsyncIterator[tuple[TransportStreams, GuardedSession]]:
    specs = the_plan.config.servers
    to_client, client_read = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    client_write, from_client = anyio.create_memory_object_stream[SessionMessage](64)
    child = next(iter(children.values()))

    def member(spec: ServerSpec, receiver: Receiver) -> StdioUpstream:
        assert isinstance(spec, StdioServer)
        first = cast(ChildProcess, children[spec.name])
        return StdioUpstream(spec, receiver, max_bytes=the_plan.limits.max_message_bytes, first=first)

    async with anyio.create_task_group() as tg:
        session: GuardedSession | None = None

        async def send(line: bytes) -> None:
            for part in line.splitlines():
                try:
                    await to_client.send(_message(part))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

        def on_abort() -> None:
            assert session is not None
            session.aborted.set()
            to_client.close()  # the refusal is out: the client's stream ends, as the stdio guard closes stdout

        reach = opener(specs, the_plan.limits, first=cast(ChildProcess, child), member=member)
        pipe = Pipe(reach, send, judge, server=specs[0].name, limits=the_plan.limits, on_abort=on_abort)
        session = GuardedSession(pipe, child, dict(children))

        async def pump() -> None:
            async with from_client:
                async for message in from_client:
                    await pipe.from_client(_line(message).rstrip(b"\n"))

        await tg.start(pipe.upstream.run)
        tg.start_soon(pump)
        tg.start_soon(pipe.flights.watch)
        try:
            yield (client_read, client_write), session
        finally:
            tg.cancel_scope.cancel()


class GuardedTransport:
    """An SDK client transport to ``server`` through the guard (``mcp.Client(GuardedTransport(server))``)."""

    def __init__(self, server: AnyServer, **settings: Any) -> None:
        self.server = server
        self.settings: Mapping[str, Any] = settings
        self.session: GuardedSession | None = None
        self._cm: Any = None

    async def __aenter__(self) -> TransportStreams:
        self._cm = guarded(self.server, **self.settings)
        streams, self.session = await self._cm.__aenter__()
        return streams

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(*exc)


def direct(server: AnyServer) -> InMemoryTransport:
    """The SDK's own in-memory transport straight to ``server``: the parity baseline."""
    return InMemoryTransport(server)
