"""Run the guard: one stdio client, one stdio upstream, until either side ends it."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import anyio
from mcp.server.runner import serve_dual_era_loop

from mcp_loop_guard.core.detector import LoopDetector
from mcp_loop_guard.core.model import Verdict
from mcp_loop_guard.proxy.process import UpstreamStartError
from mcp_loop_guard.proxy.server import GuardedProxy
from mcp_loop_guard.proxy.stdio import open_stdio_channel
from mcp_loop_guard.proxy.upstream import open_stdio_upstream
from mcp_loop_guard.settings import Settings

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_LOOP_ABORTED = 3
"""The session was closed because the agent kept repeating refused calls."""


@dataclass
class _Outcome:
    aborted: Verdict | None = None
    signal: int | None = None


async def _watch_signals(outcome: _Outcome, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            logger.info("received %s; stopping the upstream and exiting", signal.Signals(signum).name)
            outcome.signal = signum
            scope.cancel()
            return


async def serve_stdio(command: Sequence[str], settings: Settings, *, cwd: str | None = None) -> int:
    """Guard ``command`` for the client on our stdin/stdout; return the process exit code."""
    policy = settings.to_policy()
    if policy.misconfiguration is not None:
        logger.error("%s; the proxy keeps working unguarded", policy.misconfiguration)
    elif not policy.enabled:
        logger.info("loop detection is disabled (LOOP_GUARD_ENABLED=false)")
    outcome = _Outcome()
    try:
        async with (
            open_stdio_upstream("upstream", command, cwd=cwd) as upstream,
            open_stdio_channel() as channel,
            anyio.create_task_group() as tg,
        ):

            def on_abort(request_id: object, verdict: Verdict) -> None:
                outcome.aborted = verdict
                if request_id is not None:
                    channel.close_after_reply(request_id)  # type: ignore[arg-type]

            proxy = GuardedProxy(upstream, LoopDetector(policy), policy, on_abort)
            tg.start_soon(_watch_signals, outcome, tg.cancel_scope)
            tg.start_soon(
                partial(serve_dual_era_loop, lifespan_state={}), proxy.server, channel.read_stream, channel.write_stream
            )
            await channel.closed.wait()
            tg.cancel_scope.cancel()
    except UpstreamStartError as exc:
        logger.error("%s", exc)
        return EXIT_ERROR
    if outcome.aborted is not None:
        verdict = outcome.aborted
        print(
            f"mcp-loop-guard: session aborted: tool {verdict.tool!r} was refused {verdict.blocks} times "
            f"for identical calls with unchanged results (exit code {EXIT_LOOP_ABORTED})",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_LOOP_ABORTED
    if outcome.signal is not None:
        return 128 + outcome.signal
    return EXIT_OK
