"""Serve one client on our stdin and stdout, relaying to its upstream: one server, or a router of several.

The session ends one way, by an event: the client closes stdin, a refusal that aborts the
session has been written, the client stops reading, or a signal arrives. Then the upstream is
asked to stop (stdin closed), given a moment, and its process group is terminated; the exit
status says why (0, 3 for an abort, 128 + the signal).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.abc

from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.plan import Limits, Plan
from mcp_loop_guard.proxy.downstream.agents import judge_for, opened_events, opened_store, sighup_reload, stdio_agent
from mcp_loop_guard.proxy.relay.pipe import Pipe
from mcp_loop_guard.proxy.upstream import signals
from mcp_loop_guard.proxy.upstream.channels import opener
from mcp_loop_guard.proxy.upstream.child import EOF_GRACE, ChildProcess
from mcp_loop_guard.proxy.wire.fd import Fd, Writer, claimed_stdio
from mcp_loop_guard.proxy.wire.feed import feed_lines
from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_LOOP_ABORTED = 3
"""The session was closed because the agent kept repeating refused calls."""
ABORT_LINGER = 2.0
"""After an aborting refusal and our stdout closed, how long the client may take to close its side."""


@dataclass
class Ending:
    """Why the session ends; set once."""

    done: anyio.Event = field(default_factory=anyio.Event)
    why: str = ""
    signal: int | None = None

    def end(self, why: str, signum: int | None = None) -> None:
        """End the session (the first reason wins)."""
        if not self.done.is_set():
            self.why, self.signal = why, signum
            self.done.set()


def abort_line(verdict: Verdict) -> str:
    """The one stderr line that says why the session ended."""
    family = (verdict.family.value if verdict.family else "identical").replace("_", " ")
    return (
        f"mcp-loop-guard: session aborted: tool {verdict.tool!r} was refused {verdict.blocks} times "
        f"({family} loop) (exit code {EXIT_LOOP_ABORTED})"
    )


async def _read_client(stdin: Fd, pipe: Pipe, limit: int, ending: Ending, gone: anyio.Event) -> None:
    async def take(line: bytes | Oversized) -> None:
        if not ending.done.is_set():  # once the session is over, wait for the client to close its side
            await pipe.from_client(line)

    try:
        await feed_lines(stdin, LineReader(limit), take)
    except OSError as error:
        logger.debug("reading stdin failed: %s", error)
    gone.set()
    ending.end("eof")


async def watch_signals(ending: Ending, reload: Callable[[str], None] | None = None) -> None:
    """SIGTERM, SIGINT (and SIGHUP without a config file) end the session; with one, SIGHUP reloads it.

    The upstreams' groups have had SIGTERM from the signal handler already (SIGKILL at a later
    signal: see :mod:`~mcp_loop_guard.proxy.upstream.signals`); a SIGHUP that ends the session
    sends it here.
    """
    async for signum in signals.received():
        if signum == signal.SIGHUP:
            if reload is not None:
                reload("SIGHUP")
                continue
            signals.stop_upstreams()
        if not ending.done.is_set():
            logger.info("received %s; stopping the upstreams and exiting", signal.Signals(signum).name)
            ending.end("signal", signum)


async def serve_pipe(plan: Plan, first: ChildProcess | None = None) -> int:
    """Guard the configured upstreams (a command, an HTTP URL, or several) for the client on stdin/stdout.

    Returns the exit code.
    """
    servers = plan.config.servers
    spec = servers[0]
    settings = plan.settings
    limits = Limits.of(settings, spec.call_timeout if len(servers) == 1 else None)
    ending = Ending()
    async with (
        opened_store(plan) as (store, health),
        opened_events(plan) as events,
        stdio_agent(plan, spec, store, health) as agent,
        claimed_stdio() as (stdin, stdout),
    ):
        writer = Writer(stdout)
        judge = judge_for(plan, agent, label=agent.key, events=events)

        async def send(line: bytes) -> None:
            try:
                await writer.write(line)
            except OSError:
                ending.end("stdout closed")

        reach = opener(servers, limits, first=first)
        pipe = Pipe(reach, send, judge, server=spec.name, limits=limits, on_abort=lambda: ending.end("abort"))
        upstream = pipe.upstream
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch_signals, ending, sighup_reload(plan, pipe.reconfigure, tg))
            await tg.start(upstream.run)
            client_gone = anyio.Event()
            tg.start_soon(_read_client, stdin, pipe, settings.max_message_bytes, ending, client_gone)
            tg.start_soon(pipe.flights.watch)
            await ending.done.wait()
            if ending.why == "abort":
                # The refusal is out: end the session by closing our stdout, so the client reads the
                # refusal and then the end; it closes its side in turn (or the linger runs out).
                stdout.close()
                upstream.end_input()
                with anyio.move_on_after(ABORT_LINGER):
                    await client_gone.wait()
            elif ending.why == "eof":
                # Answers still in progress may go out while the upstream finishes by itself.
                upstream.end_input()
                with anyio.move_on_after(EOF_GRACE):
                    await upstream.wait_ended()
            elif ending.why == "signal":
                await pipe.shut_down("the guard is shutting down (signal)")
            tg.cancel_scope.cancel()
    if ending.why == "abort" and judge.aborted is not None:
        print(abort_line(judge.aborted), file=sys.stderr, flush=True)
        return EXIT_LOOP_ABORTED
    if ending.signal is not None:
        return 128 + ending.signal
    return EXIT_OK
