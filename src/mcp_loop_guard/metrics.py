"""Prometheus metrics. Labels carry upstream and tool names only, never arguments or results."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mcp_loop_guard.core.model import Action


class Metrics:
    """One registry per guard process, so tests can run several guards side by side."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "loop_guard_tool_calls",
            "tools/call requests by verdict",
            ["upstream", "tool", "verdict"],
            registry=self.registry,
        )
        self.warns = Counter(
            "loop_guard_warns", "Results returned with a loop warning", ["upstream", "tool"], registry=self.registry
        )
        self.blocks = Counter(
            "loop_guard_blocks",
            "Calls refused without reaching the upstream",
            ["upstream", "tool"],
            registry=self.registry,
        )
        self.aborts = Counter(
            "loop_guard_aborts", "Sessions closed for looping", ["upstream", "tool"], registry=self.registry
        )
        self.latency = Histogram(
            "loop_guard_tool_call_seconds",
            "Time from a tools/call arriving to its answer leaving the guard",
            ["upstream"],
            registry=self.registry,
        )
        self.sessions = Gauge("loop_guard_active_sessions", "Open downstream sessions", registry=self.registry)
        self.upstream_up = Gauge(
            "loop_guard_upstream_up", "1 when the upstream is connected", ["upstream"], registry=self.registry
        )

    def observe_call(self, upstream: str, tool: str, action: Action, seconds: float) -> None:
        """Count one tools/call and its verdict."""
        self.calls.labels(upstream, tool, action.name.lower()).inc()
        self.latency.labels(upstream).observe(seconds)
        if action is Action.WARN:
            self.warns.labels(upstream, tool).inc()
        elif action is Action.BLOCK:
            self.blocks.labels(upstream, tool).inc()
        elif action is Action.ABORT:
            self.blocks.labels(upstream, tool).inc()
            self.aborts.labels(upstream, tool).inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
