"""What start-up decided: the servers to guard, the settings, and the policy of every route."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_loop_guard.config import GuardConfig, StdioServer
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.policies import PolicyTable, Rules, overridden, server_budgets
from mcp_loop_guard.settings import FileSettings, Settings

__all__ = ["Limits", "Plan", "plan"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What protects the guard from an upstream and a client: sizes, time, open requests."""

    max_message_bytes: int = 64 * 1024 * 1024
    call_timeout: float | None = None
    """Seconds a request may go without an answer or progress; None: no limit."""
    max_pending_requests: int = 64
    """Upstream requests (sampling, elicitation, roots, ping) awaiting one client at once."""
    health_interval: float = 10.0
    """Seconds between pings of an idle HTTP or SSE upstream, and how long one may take."""

    @classmethod
    def of(cls, settings: Settings, call_timeout: float | None = None) -> Limits:
        """The settings' limits; ``call_timeout``: a server's own instead of the guard-wide one."""
        timeout = call_timeout or settings.call_timeout_seconds
        return cls(settings.max_message_bytes, timeout, settings.max_pending_requests, settings.health_interval_seconds)


@dataclass(frozen=True)
class Plan:
    """Everything start-up decided: what to guard, and by which rules."""

    config: GuardConfig
    settings: Settings
    policies: Rules
    """The policies in force (a config reload swaps them in place)."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """Settings given on the command line, kept for a config reload (they win over the file)."""

    @property
    def policy(self) -> Policy:
        """The session's policy (request window, abort count, mode)."""
        return self.policies.session

    @property
    def limits(self) -> Limits:
        """The guard-wide limits (a server's ``callTimeoutSeconds`` overrides the call timeout)."""
        return Limits.of(self.settings)

    @property
    def several(self) -> bool:
        """Several upstreams: tools are exported as ``server__name``."""
        return len(self.config.servers) > 1

    @property
    def single_stdio(self) -> StdioServer | None:
        """The one stdio upstream, when that is all there is (the message relay's case)."""
        servers = self.config.servers
        if len(servers) == 1 and isinstance(servers[0], StdioServer):
            return servers[0]
        return None


def _without_tools(overrides: Mapping[str, Any]) -> Mapping[str, Any]:
    """A server's overrides minus its ``tools`` section, still knowing where each key was written."""
    kept = {key: value for key, value in overrides.items() if key != "tools"}
    if isinstance(overrides, FileSettings):
        return FileSettings(kept, {key: overrides.key(key) for key in kept}, overrides.file)
    return kept


def plan(config: GuardConfig, settings: Settings, overrides: Mapping[str, Any] | None = None) -> Plan:
    """Resolve the policies.

    With several upstreams the detector sees exported names (``server__tool``), so a server's
    own ignore patterns are prefixed with its name.

    Raises:
        SettingsError: a bad per-server or per-tool override, named by its file key.
    """
    with_budgets = settings.to_policy()
    session = dataclasses.replace(with_budgets, budgets=())  # each route gets the budgets that cover it
    prefixed = len(config.servers) > 1
    servers = {
        spec.name: overridden(
            session,
            _without_tools(spec.policy),
            prefix=f"{spec.name}__" if prefixed else "",
            session_ignores=settings.ignore_tools,
        )
        for spec in config.servers
        if spec.policy
    }
    server_tools = {
        spec.name: tuple((pattern, overrides) for pattern, overrides in (spec.policy.get("tools") or {}).items())
        for spec in config.servers
        if spec.policy.get("tools")
    }
    budgets = {spec.name: server_budgets(spec.name, spec.policy) for spec in config.servers if spec.policy}
    table = PolicyTable(
        session,
        servers,
        server_tools,
        config.tools,
        prefixed,
        with_budgets.budgets,
        {name: found for name, found in budgets.items() if found},
    )
    return Plan(config, settings, Rules(table), dict(overrides or {}))
