"""Run the guard: build the upstream slots, then serve sessions over stdio or HTTP."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.abc
from mcp.server.runner import serve_dual_era_loop

from mcp_loop_guard.config import GuardConfig
from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.proxy.pool import Limits, Slot
from mcp_loop_guard.proxy.process import UpstreamStartError, terminate_children_now
from mcp_loop_guard.proxy.sessions import AbortLatch, SessionFactory
from mcp_loop_guard.proxy.stdio import StdioChannel, open_stdio_channel
from mcp_loop_guard.proxy.upstream import UpstreamGoneError
from mcp_loop_guard.settings import Settings

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_LOOP_ABORTED = 3
"""The session was closed because the agent kept repeating refused calls."""


@dataclass
class _Outcome:
    signal: int | None = None


async def _watch_signals(outcome: _Outcome, scope: anyio.CancelScope) -> None:
    """Stop serving at the first signal; a signal during the shutdown cuts the upstreams' grace short.

    It watches until the very end, so a client that sends SIGTERM while the guard is
    still stopping its upstreams does not kill the guard before they are stopped.
    """
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            if outcome.signal is None and not scope.cancel_called:
                logger.info("received %s; stopping the upstreams and exiting", signal.Signals(signum).name)
                outcome.signal = signum
            terminate_children_now()
            scope.cancel()


@dataclass(frozen=True)
class Plan:
    """Everything start-up decided: what to guard, and by which rules."""

    config: GuardConfig
    settings: Settings
    policy: Policy
    server_policies: Mapping[str, Policy]

    @property
    def limits(self) -> Limits:
        return Limits(self.settings.max_message_bytes, self.settings.call_timeout_seconds)

    def factory(self, slots: list[Slot], **kwargs: Any) -> SessionFactory:
        """Sessions of this plan, over ``slots``."""
        return SessionFactory(
            slots, self.policy, self.server_policies, log_contents=self.settings.log_contents, **kwargs
        )


def plan(config: GuardConfig, settings: Settings) -> Plan:
    """Resolve the policies; raises SettingsError for a bad per-server override.

    With several upstreams the detector sees exported names (``server__tool``), so a
    server's own ignore patterns are prefixed with its name.
    """
    policy = settings.to_policy()
    prefixed = len(config.servers) > 1
    overrides = {
        spec.name: settings.policy_for(spec.policy, prefix=f"{spec.name}__" if prefixed else "")
        for spec in config.servers
        if spec.policy
    }
    return Plan(config, settings, policy, overrides)


def _announce(plan: Plan) -> None:
    policy = plan.policy
    if plan.settings.log_contents:
        logger.warning("LOOP_GUARD_LOG_CONTENTS is on: tool arguments and results are logged (unsafe)")
    if policy.misconfiguration is not None:
        logger.error("%s; the proxy keeps working unguarded", policy.misconfiguration)
    elif not policy.enabled:
        logger.info("loop detection is disabled (LOOP_GUARD_ENABLED=false)")


def _start_failure(exc: BaseException) -> BaseException | None:
    """The upstream failure inside whatever task groups wrapped it, if that is what this is."""
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
"""After the client closes stdin, how long answers still in progress may take to go out."""


async def _until_finished(channel: StdioChannel) -> None:
    """Until the channel is done, or the client has been gone for a grace period."""
    async with anyio.create_task_group() as tg:

        async def after_eof() -> None:
            await channel.eof.wait()
            await anyio.sleep(EOF_GRACE_SECONDS)
            tg.cancel_scope.cancel()

        tg.start_soon(after_eof)
        await channel.closed.wait()
        tg.cancel_scope.cancel()


async def _serve_one(factory: SessionFactory, plan: Plan, latch: AbortLatch) -> None:
    """The one session of a stdio guard, until the client leaves or the session is aborted."""
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


async def serve_stdio(plan: Plan) -> int:
    """Guard the configured upstreams for the client on our stdin/stdout; return the exit code.

    With a single client every upstream connection is the session's own, so each
    upstream sees the real client's identity and capabilities.
    """
    _announce(plan)
    slots = [Slot(spec, shared=False, limits=plan.limits) for spec in plan.config.servers]
    factory = plan.factory(slots)
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


async def serve_http(plan: Plan) -> int:
    """Serve many sessions over streamable HTTP or SSE until SIGTERM or SIGINT."""
    from mcp_loop_guard.proxy.http import run_http  # noqa: PLC0415 - starlette and uvicorn load only here

    _announce(plan)
    return await run_http(plan)
