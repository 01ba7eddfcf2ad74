"""The loop rules, declared once: name, type, default, bounds, where each may be set, what it means.

Everything else is produced from these declarations and those of the process settings
(:mod:`mcp_loop_guard.registry`): :class:`~mcp_loop_guard.core.policy.Policy`'s defaults and
range checks, the ``LOOP_GUARD_*`` variables, flags and config keys of ``Settings``, what a
server's or a tool's ``loopGuard`` section may override, the flags ``replay`` takes, the
``--help`` text and ``docs/settings.md``. They live in the core because the core's Policy
needs them, so they are plain frozen values: no framework, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final, Literal

from mcp_loop_guard.core.arguments import ArgumentRules
from mcp_loop_guard.core.scrub import PRESETS, ScrubRules
from mcp_loop_guard.core.setting import EVERYWHERE, GLOBAL, SERVER, TOOL, Setting

__all__ = ["MAX_CYCLE_PERIOD", "MAX_WINDOW", "RULE", "RULES"]

MAX_CYCLE_PERIOD: Final = 8
"""The longest cycle the state can remember; each period costs one remembered call."""
MAX_WINDOW: Final = 64
"""The longest window of recent calls a policy may ask for (``recurring_window``)."""


def _presets(value: tuple[str, ...]) -> tuple[str, ...]:
    ScrubRules(presets=value)
    return value


def _paths(value: tuple[str, ...]) -> tuple[str, ...]:
    ScrubRules(keys=value)
    return value


def _argument_paths(value: tuple[str, ...]) -> tuple[str, ...]:
    ArgumentRules(ignore=value)
    return value


def _rule(name: str, kind: Any, default: Any, description: str, **more: Any) -> Setting:
    """A loop rule: listed under "loop rules", settable everywhere unless said otherwise."""
    more.setdefault("scopes", EVERYWHERE)
    return Setting(name, kind, default, description, "rules", rule=True, **more)


_OFF = " (0: never)"
_PATTERNS = "a comma-separated list of tool names or shell-style patterns"
_NAMES_OR_PATHS = "a comma-separated list of argument names or JSON paths ($.a.b, $..key)"

RULES: Final[tuple[Setting, ...]] = (
    _rule("enabled", bool, True, "Turn loop detection on or off.", more="Off, every call passes untouched."),
    _rule(
        "warn_threshold",
        int,
        3,
        "Identical calls in a row (same tool, arguments and result) that earn a warning.",
        ge=1,
        more="Also the warning count of cycles and bursts.",
    ),
    _rule(
        "block_threshold",
        int,
        5,
        "The identical call that would reach this count is refused; must exceed warn.",
        ge=1,
        more="Also the refusal count of cycles and bursts. Set globally, a warn threshold not below it makes the "
        "guard log one error and pass everything; set per server or per tool, it stops the guard at start, "
        "naming the keys (the same holds for every family's pair of thresholds).",
    ),
    _rule(
        "abort_threshold",
        int,
        3,
        "Refusals within one request window after which the session is closed.",
        ge=1,
        scopes=GLOBAL,
    ),
    _rule(
        "ignore_tools",
        tuple[str, ...],
        (),
        "Comma-separated tool names or shell-style patterns (github__*) the guard never counts.",
        scopes=SERVER,
        values=_PATTERNS,
        more="Case-sensitive, e.g. `todo,github__*`. Globally the patterns match the names the client sees "
        "(`github__*` with several servers); per server they match the server's own names and are added to "
        "the global list.",
    ),
    _rule(
        "ignore_errors",
        bool,
        False,
        "Leave results with isError: true out of the count (error retries are free).",
    ),
    _rule(
        "use_terminate", bool, False, "Close the session at the first refusal instead of after several.", scopes=GLOBAL
    ),
    _rule(
        "reset_after_seconds",
        float,
        120.0,
        "Idle seconds (nothing in flight or arriving) that end a request window.",
        gt=0,
        scopes=GLOBAL,
    ),
    _rule(
        "cycle_max_period",
        int,
        MAX_CYCLE_PERIOD,
        "Longest repeating sequence of calls judged as a cycle; 1 turns cycles off.",
        ge=1,
        le=MAX_CYCLE_PERIOD,
    ),
    _rule(
        "recurring_warn_threshold",
        int | None,
        None,
        "The same call with the same result this many times among the last calls, others between, earns a "
        "warning" + _OFF + ".",
        ge=0,
        unset="the warn threshold",
    ),
    _rule(
        "recurring_block_threshold",
        int | None,
        None,
        "The same call with the same result that would reach this count among the last calls is refused" + _OFF + ".",
        ge=0,
        unset="the block threshold",
    ),
    _rule(
        "recurring_window",
        int,
        20,
        "How many of the agent's last calls the recurring family looks at.",
        ge=2,
        le=MAX_WINDOW,
        scopes=GLOBAL,
    ),
    _rule(
        "same_error_warn_threshold",
        int,
        3,
        "Same error from one tool in a row, whatever its arguments, that earns a warning" + _OFF + ".",
        ge=0,
    ),
    _rule(
        "same_error_block_threshold",
        int,
        8,
        "Same error from one tool in a row after which its calls are refused" + _OFF + ".",
        ge=0,
    ),
    _rule(
        "same_result_warn_threshold",
        int,
        4,
        "Same result from one tool for different arguments in a row that earns a warning" + _OFF + ".",
        ge=0,
    ),
    _rule(
        "same_result_block_threshold",
        int,
        0,
        "Same result for different arguments after which calls are refused" + _OFF + ".",
        ge=0,
    ),
    _rule("burst_detection", bool, True, "Count identical calls asked for at once (one model response) like a streak."),
    _rule(
        "side_effect_warn_threshold",
        int,
        2,
        "Identical calls to a destructive, non-idempotent tool that earn a warning" + _OFF + ".",
        ge=0,
    ),
    _rule(
        "side_effect_block_threshold",
        int,
        3,
        "Identical calls to a destructive, non-idempotent tool refused from this one" + _OFF + ".",
        ge=0,
    ),
    _rule(
        "trust_annotations",
        bool,
        True,
        "Judge tools marked destructiveHint (and not idempotentHint) as side effects.",
        more="Read-only and action hints are read too.",
    ),
    _rule(
        "pollable",
        bool,
        False,
        "The tool is polled on purpose (a job's status): its identical answers are never a loop by themselves.",
        scopes=TOOL,
    ),
    _rule(
        "ignore_args",
        tuple[str, ...],
        (),
        "Arguments (names or JSON paths) whose values never make a call another call.",
        scopes=TOOL,
        values=_NAMES_OR_PATHS,
        check=_argument_paths,
        more="E.g. `seed` or `$.options.trace`.",
    ),
    _rule(
        "ordered_args",
        tuple[str, ...],
        (),
        "Arguments whose lists keep their order (a command's argv); other lists of plain values compare as sets.",
        scopes=TOOL,
        values="a comma-separated list of argument names (*: every list)",
    ),
    _rule(
        "case_insensitive_args",
        tuple[str, ...],
        (),
        "Arguments compared without letter case.",
        scopes=TOOL,
        values="a comma-separated list of argument names (*: every short text)",
    ),
    _rule(
        "scrub",
        tuple[str, ...],
        (),
        "Volatile parts left out of result fingerprints (timestamps,uuids,hexids,tokens,durations).",
        values="a comma-separated list of: " + ", ".join(PRESETS),
        check=_presets,
        more="Per server and per tool, added to the global presets.",
    ),
    _rule(
        "scrub_keys",
        tuple[str, ...],
        (),
        "Keys (fetched_at) or JSON paths ($.meta.requestId) left out of result fingerprints.",
        values="a comma-separated list of key names or JSON paths ($.a.b, $.list[*].id, $..key)",
        check=_paths,
        more="Per server and per tool, added to the global keys.",
    ),
    _rule(
        "mode",
        Literal["enforce", "warn", "shadow"],
        "enforce",
        "enforce: warn, refuse, abort; warn: only warnings; shadow: nothing the model sees, only logs.",
        scopes=GLOBAL,
    ),
)
"""The loop rules, in the order they are listed."""

RULE: Final[Mapping[str, Setting]] = MappingProxyType({setting.name: setting for setting in RULES})
"""The loop rules by name."""
