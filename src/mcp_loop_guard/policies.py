"""Which policy judges a call: the session's, its server's overrides, its tool's overrides.

The route decides: a call is judged by the policy of the server it is routed to and of that
server's own tool name, never by re-splitting an exported name. Overrides come from the
config file: a server's ``loopGuard`` section, its ``tools`` (patterns over the server's own
tool names), and the top-level ``loopGuard.tools`` (patterns over the names the client sees).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Literal

from mcp_loop_guard.budgets import budgets_of
from mcp_loop_guard.core import Mode, Policy, ScrubRules
from mcp_loop_guard.core.budget import Budget
from mcp_loop_guard.core.setting import snake
from mcp_loop_guard.registry import REMOVED
from mcp_loop_guard.settings import FileSettings, Settings, SettingsError

__all__ = ["PolicyTable", "Rules", "overridden", "policy_for", "server_budgets"]

_CACHE_LIMIT = 10_000


def overridden(
    base: Policy,
    overrides: Mapping[str, Any],
    *,
    prefix: str = "",
    session_ignores: tuple[str, ...] = (),
    level: Literal["server", "tool"] = "server",
) -> Policy:
    """``base`` with ``overrides`` (camelCase or snake_case keys) of a server or a tool (``level``) applied.

    Values replace the base's; ``ignoreTools`` adds to the session's own list, each pattern
    put behind ``prefix`` (``"time__"`` when a server's tools are exported prefixed); scrub
    presets and keys add to the base's. ``tools`` is not applied here (see :class:`PolicyTable`).

    Raises:
        SettingsError: an unknown key, a bad value, or a warn threshold not below its block threshold.
    """
    # The override models load at the first override: a guard without one never makes them.
    from pydantic import ValidationError  # noqa: PLC0415

    from mcp_loop_guard.overrides import PER_SERVER, THRESHOLDS, PolicySpec, ToolSpec  # noqa: PLC0415

    where = overrides.where if isinstance(overrides, FileSettings) else str
    kind = PolicySpec if level == "server" else ToolSpec
    scope = f"per-{level}"
    removed = [f"{where(key)}: was removed: {REMOVED[snake(key)]}" for key in overrides if snake(key) in REMOVED]
    if removed:
        raise SettingsError(f"invalid {scope} setting: " + "; ".join(removed))
    try:
        spec = kind.model_validate({key: value for key, value in overrides.items() if key != "tools"})
    except ValidationError as error:
        problems = [
            f"{where(str(issue['loc'][0]) if issue['loc'] else '')}: "
            + (f"not a {scope} setting ({PER_SERVER})" if issue["type"] == "extra_forbidden" else issue["msg"])
            for issue in error.errors()
        ]
        raise SettingsError(f"invalid {scope} setting: " + "; ".join(problems)) from None
    given = spec.model_dump(exclude_unset=True, exclude_none=True, exclude={"budgets"})
    if "ignore_tools" in given:
        given["ignore_tools"] = session_ignores + tuple(prefix + name for name in given["ignore_tools"])
    arguments = {
        name: given.pop(f"{name}_args") for name in ("ignore", "ordered", "case_insensitive") if f"{name}_args" in given
    }
    if arguments:
        given["arguments"] = dataclasses.replace(base.arguments, **arguments)
    presets, keys = given.pop("scrub", ()), given.pop("scrub_keys", ())
    if presets or keys:
        given["scrub"] = ScrubRules(
            presets=tuple(dict.fromkeys(base.scrub.presets + tuple(presets))),
            keys=tuple(dict.fromkeys(base.scrub.keys + tuple(keys))),
        )
    policy = dataclasses.replace(base, **given)
    for warn, block in THRESHOLDS:
        named = [name for name in (warn, block) if name in given]
        if named and policy.misconfiguration is not None:
            keys_text = " and ".join(where(name) for name in named)
            msg = (
                f"invalid setting {keys_text}: {policy.misconfiguration.removesuffix('; loop detection is disabled')}; "
                "set both for this scope"
            )
            raise SettingsError(msg)
    return policy


@dataclass
class PolicyTable:
    """The policy of every (server, tool) route, computed once per route."""

    session: Policy
    servers: Mapping[str, Policy] = field(default_factory=dict)
    server_tools: Mapping[str, tuple[tuple[str, Mapping[str, Any]], ...]] = field(default_factory=dict)
    """Per server: (pattern over the server's own tool names, overrides), in file order."""
    exported_tools: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    """(pattern over the names the client sees, overrides), in file order."""
    prefixed: bool = False
    budgets: tuple[Budget, ...] = ()
    """The session's budgets, over the names the client sees."""
    server_budgets: Mapping[str, tuple[Budget, ...]] = field(default_factory=dict)
    """Per server: its budgets, over the server's own tool names."""
    _cache: dict[tuple[str, str], Policy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Apply every tool override once now, so a bad one is reported at start, with its file key."""
        for server, entries in self.server_tools.items():
            for _, overrides in entries:
                overridden(self.servers.get(server, self.session), overrides, level="tool")
        for _, overrides in self.exported_tools:
            overridden(self.session, overrides, level="tool")

    def __call__(self, server: str, tool: str) -> Policy:
        """The policy judging calls routed to ``server``'s own tool ``tool``."""
        key = (server, tool)
        found = self._cache.get(key)
        if found is None:
            found = self._resolve(server, tool)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _resolve(self, server: str, tool: str) -> Policy:
        policy = self.servers.get(server, self.session)
        exported = f"{server}__{tool}" if self.prefixed else tool
        for pattern, overrides in self.exported_tools:
            if fnmatchcase(exported, pattern):
                policy = overridden(policy, overrides, level="tool")
                break
        for pattern, overrides in self.server_tools.get(server, ()):
            if fnmatchcase(tool, pattern):
                policy = overridden(policy, overrides, level="tool")
                break
        covering = tuple(budget for budget in self.budgets if fnmatchcase(exported, budget.pattern)) + tuple(
            budget for budget in self.server_budgets.get(server, ()) if fnmatchcase(tool, budget.pattern)
        )
        if covering != policy.budgets:
            policy = dataclasses.replace(policy, budgets=covering)
        return policy

    @property
    def mode(self) -> Mode:
        """The session's mode."""
        return self.session.mode


def server_budgets(name: str, overrides: Mapping[str, Any]) -> tuple[Budget, ...]:
    """A server's ``budgets`` section (checked when the config was loaded) as the core's budgets."""
    given = overrides.get("budgets")
    if not given:
        return ()
    from mcp_loop_guard.overrides import PolicySpec  # noqa: PLC0415 - see overridden()

    models = vars(PolicySpec.model_validate({"budgets": given}))["budgets"] or ()
    return budgets_of((model.spec() for model in models), name)


class Rules:
    """The policies in force. A config reload swaps the table; the next call is judged by the new one."""

    def __init__(self, table: PolicyTable) -> None:
        """Start with ``table``."""
        self.table = table

    def __call__(self, server: str, tool: str) -> Policy:
        """The policy judging calls routed to ``server``'s own tool ``tool``."""
        return self.table(server, tool)

    @property
    def session(self) -> Policy:
        """The session's policy (request window, abort count, mode)."""
        return self.table.session

    @property
    def prefixed(self) -> bool:
        """Tools are exported as ``server__name``."""
        return self.table.prefixed

    @property
    def mode(self) -> Mode:
        """The session's mode."""
        return self.table.mode


def policy_for(settings: Settings, overrides: Mapping[str, Any], *, prefix: str = "") -> Policy:
    """The session policy of ``settings`` with one server's overrides applied (see :func:`overridden`).

    Raises:
        SettingsError: an unknown key, a bad value, or a warn threshold not below block.
    """
    return overridden(settings.to_policy(), overrides, prefix=prefix, session_ignores=settings.ignore_tools)
