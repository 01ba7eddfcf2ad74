"""Run the guard: over stdio, the message relay; over HTTP, the front the topology table picks."""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence

from mcp_loop_guard import tracing
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.upstream.child import ChildProcess

logger = logging.getLogger(__name__)

__all__ = ["serve"]


def _announce(plan: Plan) -> None:
    policy = plan.policy
    if plan.settings.log_contents:
        logger.warning("LOOP_GUARD_LOG_CONTENTS is on: tool arguments and results are logged (unsafe)")
    if policy.misconfiguration is not None:
        logger.error("%s; the proxy keeps working unguarded", policy.misconfiguration)
    elif not policy.enabled:
        logger.info("loop detection is disabled (LOOP_GUARD_ENABLED=false)")
    elif policy.mode.value != "enforce":
        logger.info("mode %s: the guard %s", policy.mode.value, _MODES[policy.mode.value])


_MODES = {
    "warn": "warns but never refuses or closes a session",
    "shadow": "changes nothing the model sees; verdicts go to logs, metrics and the event log",
}


async def serve(plan: Plan, first: ChildProcess | None = None, listeners: Sequence[socket.socket] = ()) -> int:
    """Serve until the client leaves or a signal arrives; return the exit code.

    ``first``: the upstream child, when it was started before the event loop; ``listeners``:
    over HTTP, the sockets already bound to the guard's address.
    """
    _announce(plan)
    with tracing.installed():
        if plan.settings.transport == "stdio":
            from mcp_loop_guard.proxy.downstream.stdio import serve_pipe  # noqa: PLC0415 - the stdio relay loads alone

            return await serve_pipe(plan, first)
        from mcp_loop_guard.proxy.downstream.http.app import run_http  # noqa: PLC0415 - starlette, uvicorn load here

        return await run_http(plan, first, listeners)
