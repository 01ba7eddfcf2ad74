"""Serve one client on stdin/stdout through the SDK's session layer: several upstreams, or an HTTP upstream."""

from __future__ import annotations

import logging
import signal
import sys
from dataclasses import dataclass
from functools import partial

import anyio
from mcp.server.runner import serve_dual_era_loop

from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.pool import Limits, Slot
from mcp_loop_guard.proxy.process import UpstreamStartError, terminate_children_now
from mcp_loop_guard.proxy.sessions import AbortLatch, SessionFactory
from mcp_loop_guard.proxy.stdio import StdioChannel, open_stdio_channel
from mcp_loop_guard.proxy.upstream.session import UpstreamGoneError

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_LOOP_ABORTED = 3


@dataclass
class _Outcome:
    signal: int | None = None


async def _watch_signals(outcome: _Outcome, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            if outcome.signal is None and not scope.cancel_called:
                logger.info("received %s; stopping the upstreams and exiting", signal.Signals(signum).name)
                outcome.signal = signum
            terminate_children_now()
            scope.cancel()


def _start_failure(exc: BaseException) -> BaseException | None:
    if isinstance(exc, (UpstreamStartError, UpstreamGoneError)):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _start_failure(inner)
            if found is not None:
                return found
    return None


def abort_message(verdict: Verdict, code: int) -> str:
    """The one stderr line that says why the session ended."""
    return (
        f"mcp-loop-guard: session aborted: tool {verdict.tool!r} was refused {verdict.blocks} times "
        f"for identical calls with unchanged results (exit code {code})"
    )


EOF_GRACE_SECONDS = 2.0


async def _until_finished(channel: StdioChannel) -> None:
    async with anyio.create_task_group() as tg:

        async def after_eof() -> None:
            await channel.eof.wait()
            await anyio.sleep(EOF_GRACE_SECONDS)
            tg.cancel_scope.cancel()

        tg.start_soon(after_eof)
        await channel.closed.wait()
        tg.cancel_scope.cancel()


def _factory(plan: Plan, slots: list[Slot]) -> SessionFactory:
    return SessionFactory(slots, plan.policy, dict(plan.policies.servers), log_contents=plan.settings.log_contents)


async def _serve_one(factory: SessionFactory, plan: Plan, latch: AbortLatch) -> None:
    async with (
        factory.open(latch, prestart=True) as proxy,
        open_stdio_channel(plan.settings.max_message_bytes) as channel,
        anyio.create_task_group() as tg,
    ):

        def on_abort(request_id: object, verdict: Verdict) -> None:
            latch(request_id, verdict)  # type: ignore[arg-type]
            if request_id is not None:
                channel.close_after_reply(request_id)  # type: ignore[arg-type]

        proxy.on_abort = on_abort
        tg.start_soon(
            partial(serve_dual_era_loop, lifespan_state={}), proxy.server, channel.read_stream, channel.write_stream
        )
        await _until_finished(channel)
        tg.cancel_scope.cancel()


async def serve_sdk_stdio(plan: Plan) -> int:
    """Guard the configured upstreams for the client on our stdin/stdout; return the exit code."""
    limits = Limits(plan.settings.max_message_bytes, plan.settings.call_timeout_seconds)
    slots = [Slot(spec, shared=False, limits=limits) for spec in plan.config.servers]
    factory = _factory(plan, slots)
    outcome = _Outcome()
    latch = AbortLatch()
    serving = anyio.CancelScope()
    try:
        async with anyio.create_task_group() as watch:
            watch.start_soon(_watch_signals, outcome, serving)
            with serving:
                await _serve_one(factory, plan, latch)
            watch.cancel_scope.cancel()
    except (UpstreamStartError, UpstreamGoneError, BaseExceptionGroup) as exc:
        failure = _start_failure(exc)
        if failure is None:
            raise
        logger.error("%s", failure)
        return EXIT_ERROR
    if latch.verdict is not None:
        print(abort_message(latch.verdict, EXIT_LOOP_ABORTED), file=sys.stderr, flush=True)
        return EXIT_LOOP_ABORTED
    if outcome.signal is not None:
        return 128 + outcome.signal
    return EXIT_OK
