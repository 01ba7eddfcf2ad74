"""What a run produces: rows per scenario, target checks, and the JSON file.

A row is one (scenario, case, via) measurement with named values; a skipped
measurement is a row too, with the reason instead of values, so the table and
the JSON always say what was not measured and why.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DIRECT = "direct"
GUARD = "mcp-loop-guard"
FASTMCP = "fastmcp"
MCP_PROXY = "mcp-proxy"
RELAY = "byte relay"
HASH_FLOOR = "xxh3-128 alone"
SHA256_ALONE = "sha256 alone"
"""The floor: a process that copies bytes both ways and parses nothing."""

Value = float | int | str


@dataclass
class Row:
    """One measurement, or the reason it was skipped."""

    scenario: str
    case: str
    via: str
    values: dict[str, Value] = field(default_factory=dict)
    note: str = ""
    skipped: str | None = None

    def get(self, key: str) -> float:
        """A numeric value, NaN when absent (skipped rows have none)."""
        value = self.values.get(key)
        return float(value) if isinstance(value, int | float) else math.nan


@dataclass
class Check:
    """One target of the issue, judged on this run's numbers."""

    goal: str
    """The target as written, e.g. ``stdio echo p50 <= 2.0x direct``."""
    measured: str
    """What this run measured, in the goal's unit."""
    met: bool | None
    """None when the number could not be measured in this run."""


@dataclass
class Report:
    """Everything one run measured."""

    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    """Where the guard spends its time, one summary per profiled case."""

    def find(self, scenario: str, case: str, via: str) -> Row | None:
        """The measured (not skipped) row for one case and via, if any."""
        for row in self.rows:
            if (row.scenario, row.case, row.via) == (scenario, case, via) and row.skipped is None:
                return row
        return None

    def write(self, path: Path) -> None:
        """Write the report as JSON (NaN as null), creating the folder."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(_finite(asdict(self)), indent=2) + "\n", encoding="utf-8")


def _finite(value: Any) -> Any:
    """JSON has no NaN: replace it by null all the way down."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
