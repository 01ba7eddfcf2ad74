"""Budgets as written in settings and config files: ``LOOP_GUARD_BUDGETS`` and ``budgets`` sections.

Two spellings: a config file's list of objects (``{"tools": "search_*", "maxCalls": 20,
"perSeconds": 3600}``), and a short form for the environment and the command line,
``search_*=20/3600,200`` (pattern, cap, window in seconds; no pattern: every tool; no window:
the whole session). A JSON list is accepted in the environment too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from mcp_loop_guard.core.budget import Budget

__all__ = ["SHORT_FORM", "BudgetSpec", "budgets_of", "parse_budgets"]

SHORT_FORM = "PATTERN=MAXCALLS[/SECONDS] entries separated by commas (no PATTERN: every tool), or a JSON list"


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """One budget as configured, once read (:mod:`mcp_loop_guard.budget_model` reads and checks what is given)."""

    max_calls: int
    tools: str = "*"
    """A tool name or shell-style pattern: names the client sees at the top level, the server's own per server."""
    per_seconds: float | None = None
    """The window; None: the agent's whole session (until its state expires or is reset)."""


def parse_budgets(value: object) -> object:
    """The short form or a JSON text as a list of budget objects; anything else is left to validation.

    Raises:
        ValueError: a short-form entry that does not parse, or JSON that is not a list.
    """
    if not isinstance(value, str):
        return tuple(value) if isinstance(value, list) else value
    text = value.strip()
    if not text:
        return ()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError as error:
            msg = f"not a JSON list of budgets ({error})"
            raise ValueError(msg) from None
        if not isinstance(parsed, list):
            msg = "a JSON value of budgets must be a list"
            raise ValueError(msg)
        return tuple(parsed)
    return tuple(_short(entry.strip()) for entry in text.split(",") if entry.strip())


def _short(entry: str) -> dict[str, object]:
    pattern, _, cap = entry.rpartition("=")
    count, _, window = cap.partition("/")
    try:
        spec: dict[str, object] = {"tools": pattern.strip() or "*", "maxCalls": int(count)}
        if window:
            spec["perSeconds"] = float(window)
    except ValueError:
        msg = f"{entry!r} is not PATTERN=MAXCALLS[/SECONDS]"
        raise ValueError(msg) from None
    return spec


def budgets_of(specs: Iterable[BudgetSpec], scope: str = "") -> tuple[Budget, ...]:
    """The core's budgets; ``scope``: the server whose own tool names the patterns match ("" for exported names)."""
    return tuple(Budget(spec.tools, spec.max_calls, spec.per_seconds, scope) for spec in specs)
