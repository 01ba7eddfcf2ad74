"""Serve one client on stdin/stdout through the SDK's session layer: several upstreams, or an HTTP upstream.

The lines are framed and checked here (the JSON-RPC errors the spec prescribes for broken
lines, a reused id refused), then handed to the SDK's server as its messages. The session
ends one way, by an event: the client closes stdin, an aborting refusal has gone out (then
stdout closes and the client's own close ends it), or a signal.
"""

from __future__ import annotations

import logging
import sys
from functools import partial

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.runner import serve_dual_era_loop
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.agents import judge_for, opened_events, opened_store, stdio_agent
from mcp_loop_guard.proxy.downstream.sessions import SessionFactory, fixed_judge
from mcp_loop_guard.proxy.downstream.stdio import (
    ABORT_LINGER,
    EXIT_LOOP_ABORTED,
    EXIT_OK,
    Ending,
    abort_line,
    watch_signals,
)
from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.upstream.child import UpstreamStartError
from mcp_loop_guard.proxy.upstream.pool import Slot
from mcp_loop_guard.proxy.upstream.session import UpstreamGoneError
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.fd import Fd, Writer, claimed_stdio
from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized
from mcp_loop_guard.reload import on_sighup, reloader_for

logger = logging.getLogger(__name__)

EXIT_ERROR = 1


class _Channel:
    """Lines to SDK messages and back, on the guard's own descriptors."""

    def __init__(self, stdin: Fd, stdout: Fd, max_bytes: int, ending: Ending) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.writer = Writer(stdout)
        self.max_bytes = max_bytes
        self.ending = ending
        self.in_flight: set[types.RequestId] = set()
        self.abort_after: types.RequestId | None = None
        self.client_gone = anyio.Event()

    async def reply(self, message: wire.Message) -> None:
        try:
            await self.writer.write(message.line())
        except OSError:
            self.ending.end("stdout closed")

    async def take(self, line: bytes | Oversized, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        if isinstance(line, Oversized):
            why = f"message of {line.size} bytes is over the limit of {self.max_bytes} (LOOP_GUARD_MAX_MESSAGE_BYTES)"
            logger.warning("rejected a message from the client: %s", why)
            await self.reply(wire.error(line.request_id, wire.INVALID_REQUEST, f"Invalid Request: {why}"))
            return
        parsed = wire.parse(line)
        if parsed is None:
            return
        if isinstance(parsed, wire.BadLine):
            logger.warning("rejected a line from the client: %s", parsed.problem)
            if parsed.reply is not None:
                await self.reply(parsed.reply)
            return
        if parsed.is_request and parsed.id in self.in_flight:
            why = "a request with this id is still in flight"
            await self.reply(wire.error(parsed.id, wire.INVALID_REQUEST, f"Invalid Request: {why}"))
            return
        try:
            message = types.jsonrpc_message_adapter.validate_python(parsed.body, by_name=False)
        except ValidationError:
            await self.reply(wire.error(parsed.id, wire.INVALID_REQUEST, "Invalid Request: not an MCP message"))
            return
        if parsed.is_request and parsed.id is not None:
            self.in_flight.add(parsed.id)
        elif parsed.method == "notifications/cancelled":
            self.in_flight.discard((parsed.body.get("params") or {}).get("requestId"))
        await send.send(SessionMessage(message))

    async def read(self, send: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
        lines = LineReader(self.max_bytes)
        async with send:
            try:
                while chunk := await self.stdin.read():
                    if self.ending.done.is_set():
                        continue
                    for line in lines.feed(chunk):
                        await self.take(line, send)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                logger.debug("stopped reading stdin")
        self.client_gone.set()
        self.ending.end("eof")

    async def write_out(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        async with receive:
            async for message in receive:
                inner = message.message
                body = inner.model_dump(mode="json", by_alias=True, exclude_unset=True)
                await self.reply(wire.Message(body))
                if isinstance(inner, types.JSONRPCResponse | types.JSONRPCError):
                    self.in_flight.discard(inner.id)
                    if inner.id == self.abort_after:
                        self.ending.end("abort")


def _start_failure(exc: BaseException) -> BaseException | None:
    if isinstance(exc, UpstreamStartError | UpstreamGoneError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _start_failure(inner)
            if found is not None:
                return found
    return None


async def serve_sdk_stdio(plan: Plan) -> int:
    """Guard the configured upstreams for the client on our stdin/stdout; return the exit code."""
    slots = [Slot(spec, shared=False, limits=plan.limits) for spec in plan.config.servers]
    factory = SessionFactory(plan, slots, make_slot=lambda spec: Slot(spec, shared=False, limits=plan.limits))
    ending = Ending()
    aborted: list[Verdict] = []
    try:
        await _serve(plan, factory, ending, aborted)
    except (UpstreamStartError, UpstreamGoneError, BaseExceptionGroup) as exc:
        failure = _start_failure(exc)
        if failure is None:
            raise
        logger.error("%s", failure)
        return EXIT_ERROR
    if ending.why == "abort" and aborted:
        print(abort_line(aborted[0]), file=sys.stderr, flush=True)
        return EXIT_LOOP_ABORTED
    if ending.signal is not None:
        return 128 + ending.signal
    return EXIT_OK


async def _serve(plan: Plan, factory: SessionFactory, ending: Ending, aborted: list[Verdict]) -> None:
    async with (
        opened_store(plan) as (store, health),
        opened_events(plan) as events,
        stdio_agent(plan, plan.config.servers[0], store, health) as agent,
        claimed_stdio() as (stdin, stdout),
    ):
        channel = _Channel(stdin, stdout, plan.settings.max_message_bytes, ending)
        judge = judge_for(plan, agent, label=agent.key, events=events)

        def on_abort(ctx: Context, verdict: Verdict) -> None:
            aborted.append(verdict)
            channel.abort_after = ctx.request_id

        async with factory.open(fixed_judge(judge), on_abort, prestart=True) as proxy, anyio.create_task_group() as tg:
            factory.on_slot_change(tg)
            tg.start_soon(watch_signals, ending, on_sighup(reloader_for(plan, factory.reconfigure, tg), tg))
            read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
            write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
            tg.start_soon(channel.read, read_send)
            tg.start_soon(channel.write_out, write_receive)
            tg.start_soon(partial(serve_dual_era_loop, lifespan_state={}), proxy.server, read_receive, write_send)
            await ending.done.wait()
            if ending.why == "abort":
                stdout.close()
                with anyio.move_on_after(ABORT_LINGER):
                    await channel.client_gone.wait()
            tg.cancel_scope.cancel()
