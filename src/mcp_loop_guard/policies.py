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
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from mcp_loop_guard.budgets import BudgetSpec, budgets_of, parse_budgets
from mcp_loop_guard.core import Mode, Policy, ScrubRules
from mcp_loop_guard.core.arguments import ArgumentRules
from mcp_loop_guard.core.budget import Budget
from mcp_loop_guard.core.scrub import PRESETS
from mcp_loop_guard.settings import REMOVED_TIMING, FileSettings, Settings, SettingsError, split_list

__all__ = ["PER_SERVER", "PolicySpec", "PolicyTable", "Rules", "ToolSpec", "overridden", "server_budgets"]

_CACHE_LIMIT = 10_000


class ToolSpec(BaseModel):
    """The settings one tool (or pattern of tools) may override, as given (camelCase or snake_case keys)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        defer_build=True,  # built at the first override given: a guard without one never pays for it
    )

    THRESHOLDS: ClassVar[tuple[tuple[str, str], ...]] = (
        ("warn_threshold", "block_threshold"),
        ("recurring_warn_threshold", "recurring_block_threshold"),
        ("same_error_warn_threshold", "same_error_block_threshold"),
        ("same_result_warn_threshold", "same_result_block_threshold"),
        ("side_effect_warn_threshold", "side_effect_block_threshold"),
    )

    enabled: bool | None = None
    warn_threshold: int | None = Field(default=None, ge=1)
    block_threshold: int | None = Field(default=None, ge=1)
    ignore_errors: bool | None = None
    cycle_max_period: int | None = Field(default=None, ge=1, le=8)
    same_error_warn_threshold: int | None = Field(default=None, ge=0)
    same_error_block_threshold: int | None = Field(default=None, ge=0)
    same_result_warn_threshold: int | None = Field(default=None, ge=0)
    same_result_block_threshold: int | None = Field(default=None, ge=0)
    burst_detection: bool | None = None
    side_effect_warn_threshold: int | None = Field(default=None, ge=0)
    side_effect_block_threshold: int | None = Field(default=None, ge=0)
    trust_annotations: bool | None = None
    recurring_warn_threshold: int | None = Field(default=None, ge=0)
    recurring_block_threshold: int | None = Field(default=None, ge=0)
    pollable: bool | None = None
    ignore_args: tuple[str, ...] | None = None
    ordered_args: tuple[str, ...] | None = None
    case_insensitive_args: tuple[str, ...] | None = None
    scrub: tuple[str, ...] | None = None
    scrub_keys: tuple[str, ...] | None = None

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, value: object) -> object:
        """Settings that no longer exist say what took their place."""
        if isinstance(value, Mapping):
            for name in ("pollSeconds", "poll_seconds", "quietSeconds", "quiet_seconds"):
                if name in value:
                    msg = f"{name} was removed: {REMOVED_TIMING}"
                    raise ValueError(msg)
        return value

    @field_validator("scrub", "scrub_keys", "ignore_args", "ordered_args", "case_insensitive_args", mode="before")
    @classmethod
    def _lists(cls, value: object) -> object:
        """A list or a comma-separated string."""
        return split_list(value)

    @field_validator("scrub")
    @classmethod
    def _presets(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """Only named presets."""
        for name in value or ():
            if name not in PRESETS:
                msg = f"unknown scrub preset {name!r} (known: {', '.join(PRESETS)})"
                raise ValueError(msg)
        return value

    @field_validator("scrub_keys")
    @classmethod
    def _paths(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """JSON paths must parse."""
        ScrubRules(keys=value or ())
        return value

    @field_validator("ignore_args")
    @classmethod
    def _argument_paths(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """Names, or JSON paths that parse."""
        ArgumentRules(ignore=value or ())
        return value


class PolicySpec(ToolSpec):
    """What one server may override: everything a tool may, its own ignore list, its tools' overrides, its budgets."""

    ignore_tools: tuple[str, ...] | None = None
    tools: dict[str, ToolSpec] | None = None
    budgets: tuple[BudgetSpec, ...] | None = None
    """Budgets over this server's own tool names, on top of the session's."""

    @field_validator("budgets", mode="before")
    @classmethod
    def _parse_budgets(cls, value: object) -> object:
        """The same forms as LOOP_GUARD_BUDGETS."""
        return parse_budgets(value)

    @field_validator("ignore_tools", mode="before")
    @classmethod
    def _split_ignores(cls, value: object) -> object:
        """The same list forms as LOOP_GUARD_IGNORE_TOOLS: a list or a comma-separated string."""
        return split_list(value)


PER_SERVER = "per-server settings: " + ", ".join(to_camel(name) for name in PolicySpec.model_fields)


def overridden(
    base: Policy,
    overrides: Mapping[str, Any],
    *,
    prefix: str = "",
    session_ignores: tuple[str, ...] = (),
    kind: type[ToolSpec] = PolicySpec,
) -> Policy:
    """``base`` with ``overrides`` (camelCase or snake_case keys) applied.

    Values replace the base's; ``ignoreTools`` adds to the session's own list, each pattern
    put behind ``prefix`` (``"time__"`` when a server's tools are exported prefixed); scrub
    presets and keys add to the base's. ``tools`` is not applied here (see :class:`PolicyTable`).

    Raises:
        SettingsError: an unknown key, a bad value, or a warn threshold not below its block threshold.
    """
    where = overrides.where if isinstance(overrides, FileSettings) else str
    try:
        spec = kind.model_validate(dict(overrides))
    except ValidationError as error:
        scope = "per-server" if kind is PolicySpec else "per-tool"
        problems = [
            f"{where(str(issue['loc'][0]))}: "
            + (f"not a {scope} setting ({PER_SERVER})" if issue["type"] == "extra_forbidden" else issue["msg"])
            for issue in error.errors()
        ]
        raise SettingsError(f"invalid {scope} setting: " + "; ".join(problems)) from None
    given = spec.model_dump(exclude_unset=True, exclude_none=True, exclude={"tools", "budgets"})
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
    for warn, block in ToolSpec.THRESHOLDS:
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
                overridden(self.servers.get(server, self.session), overrides, kind=ToolSpec)
        for _, overrides in self.exported_tools:
            overridden(self.session, overrides, kind=ToolSpec)

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
                policy = overridden(policy, overrides, kind=ToolSpec)
                break
        for pattern, overrides in self.server_tools.get(server, ()):
            if fnmatchcase(tool, pattern):
                policy = overridden(policy, overrides, kind=ToolSpec)
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
    return budgets_of(PolicySpec.model_validate({"budgets": given}).budgets or (), name)


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
