"""Prometheus metrics. Labels carry server and tool names only, never arguments or results.

A tool name becomes a label value only once its server has listed it: names a client makes
up are counted under ``other``, so no client can grow the metrics or write its strings there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mcp_loop_guard.core.model import Action, Verdict

UNKNOWN_TOOL = "other"
MAX_KNOWN = 10_000
"""Tool names remembered per server as label values."""


class Metrics:
    """One registry per guard process, so tests can run several guards side by side."""

    def __init__(self) -> None:
        """Declare every metric."""
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "loop_guard_tool_calls",
            "tools/call requests by verdict",
            ["upstream", "tool", "verdict"],
            registry=self.registry,
        )
        self.warns = Counter(
            "loop_guard_warns",
            "Results returned with a loop warning",
            ["upstream", "tool", "family"],
            registry=self.registry,
        )
        self.blocks = Counter(
            "loop_guard_blocks",
            "Calls refused without reaching the upstream",
            ["upstream", "tool", "family"],
            registry=self.registry,
        )
        self.aborts = Counter(
            "loop_guard_aborts", "Sessions closed for looping", ["upstream", "tool", "family"], registry=self.registry
        )
        self.shadow = Counter(
            "loop_guard_shadow_verdicts",
            "What enforce mode would have done, in shadow or warn mode",
            ["upstream", "tool", "verdict", "family"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "loop_guard_tool_call_seconds",
            "Time from a tools/call arriving to its answer leaving the guard",
            ["upstream"],
            registry=self.registry,
        )
        self.sessions = Gauge("loop_guard_active_sessions", "Open downstream sessions", registry=self.registry)
        self.agents = Gauge("loop_guard_held_agents", "Sessionless agents held in memory", registry=self.registry)
        self.upstream_up = Gauge(
            "loop_guard_upstream_up", "1 when the upstream is connected", ["upstream"], registry=self.registry
        )
        self.store_up = Gauge("loop_guard_state_store_up", "1 while the state store answers", registry=self.registry)
        self.dropped_tools = Counter(
            "loop_guard_dropped_tools",
            "Tools left out of a merged list because their names collided",
            ["upstream"],
            registry=self.registry,
        )
        self._known: dict[str, set[str]] = {}

    def learn(self, server: str, tools: Iterable[str]) -> None:
        """Names a server listed: they may be label values."""
        known = self._known.setdefault(server, set())
        for name in tools:
            if len(known) >= MAX_KNOWN:
                break
            known.add(name)

    def _label(self, server: str, tool: str) -> str:
        known = self._known.get(server)
        if known is None:
            return UNKNOWN_TOOL
        if tool in known:
            return tool
        own = tool.removeprefix(f"{server}__")
        return tool if own in known else UNKNOWN_TOOL

    def observe_call(self, server: str, tool: str, verdict: Verdict, seconds: float) -> None:
        """Count one tools/call and its verdict."""
        label = self._label(server, tool)
        action = verdict.action
        family = verdict.family.value if verdict.family is not None else "identical"
        self.calls.labels(server, label, action.name.lower()).inc()
        self.latency.labels(server).observe(seconds)
        if verdict.shadow:
            self.shadow.labels(server, label, verdict.shadow.name.lower(), family).inc()
        if action is Action.WARN:
            self.warns.labels(server, label, family).inc()
        elif action >= Action.BLOCK:
            self.blocks.labels(server, label, family).inc()
            if action is Action.ABORT:
                self.aborts.labels(server, label, family).inc()

    def observer(self) -> Callable[[str, str, Verdict, float], None]:
        """The judge's callback."""
        return self.observe_call

    def dropped(self, server: str, tool: str) -> None:
        """A colliding tool was left out of a list."""
        self.dropped_tools.labels(server).inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)
