"""HTTP serving (being moved here from proxy/http.py)."""

from __future__ import annotations

from typing import Any

from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy import http as legacy
from mcp_loop_guard.proxy.pool import Limits, Slot
from mcp_loop_guard.proxy.sessions import SessionFactory


class _Adapter:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.config = plan.config
        self.settings = plan.settings
        self.policy = plan.policy

    @property
    def limits(self) -> Limits:
        return Limits(self.settings.max_message_bytes, self.settings.call_timeout_seconds)

    def factory(self, slots: list[Slot], **kwargs: Any) -> SessionFactory:
        return SessionFactory(
            slots, self.policy, dict(self.plan.policies.servers), log_contents=self.settings.log_contents, **kwargs
        )


async def run_http(plan: Plan) -> int:
    """Serve many sessions over streamable HTTP or SSE."""
    return await legacy.run_http(_Adapter(plan))  # type: ignore[arg-type]
