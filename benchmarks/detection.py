"""How well the guard tells loops from work: the labelled corpus replayed under two rule sets.

    python -m benchmarks.detection            # the table, per family
    python -m benchmarks.detection --traces   # and one line per trace

(a) "identical only" is the reference design (one rule: same call, same result, 3/5/3);
(b) "defaults" is the guard as shipped (every family, each trace's own operator settings, i.e.
scrubbing for the volatile family). A loop is caught when a refusal comes by its ``due`` line
(for the same-result family, never refused by default, a warning); "wasted" counts the calls
from the ``due`` line on that still reached the server.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_loop_guard.config import GuardConfig
from mcp_loop_guard.plan import plan
from mcp_loop_guard.replay import Judged, judge_trace, read_trace
from mcp_loop_guard.settings import FileSettings, load_settings

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus"

REFERENCE: Mapping[str, Any] = {
    "cycle_max_period": 1,
    "same_error_warn_threshold": 0,
    "same_error_block_threshold": 0,
    "same_result_warn_threshold": 0,
    "same_result_block_threshold": 0,
    "burst_detection": False,
    "trust_annotations": False,
}
"""The reference design: identical calls only."""

REFUSED = frozenset({"block", "abort", "closed"})


@dataclass(frozen=True)
class Outcome:
    """One trace under one rule set."""

    name: str
    label: str
    family: str | None
    due: int | None
    caught: bool
    warned: bool
    refused: bool
    wasted: int
    first_refusal: int | None


def _judge(path: Path, overrides: Mapping[str, Any]) -> list[Judged]:
    settings = load_settings(FileSettings({}), **dict(overrides))
    decided = plan(GuardConfig(None, (), FileSettings({})), settings)
    with path.open(encoding="utf-8") as stream:
        return judge_trace(list(read_trace(stream, str(path))), decided.policies)


def evaluate(
    label_entries: Mapping[str, Mapping[str, Any]], rules: Mapping[str, Any], *, reference: bool
) -> list[Outcome]:
    """Every trace of the corpus judged under ``rules`` (plus each trace's own settings unless ``reference``)."""
    outcomes: list[Outcome] = []
    for name, entry in sorted(label_entries.items()):
        overrides = dict(rules)
        if not reference:
            overrides.update(entry.get("settings") or {})
        judged = _judge(CORPUS / name, overrides)
        verdicts = {item.line.number: item.verdict for item in judged}
        refusals = [number for number, verdict in verdicts.items() if verdict in REFUSED]
        warnings = [number for number, verdict in verdicts.items() if verdict == "warn"]
        first_refusal = min(refusals) if refusals else None
        family, due = entry.get("family"), entry.get("due")
        caught = False
        wasted = 0
        if entry["label"] == "loop":
            assert isinstance(due, int)
            caught = first_refusal is not None and first_refusal <= due
            if family == "same_result":
                caught = caught or any(number <= due for number in warnings)
            wasted = sum(1 for number, verdict in verdicts.items() if number >= due and verdict not in REFUSED)
        outcomes.append(
            Outcome(name, entry["label"], family, due, caught, bool(warnings), bool(refusals), wasted, first_refusal)
        )
    return outcomes


def labels() -> dict[str, dict[str, Any]]:
    """The corpus's labels."""
    loaded: dict[str, dict[str, Any]] = json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))
    return loaded


@dataclass(frozen=True)
class Row:
    """One family's figures."""

    family: str
    traces: int
    caught: int
    wasted: int
    warned: int
    refused: int


def summarize(outcomes: Sequence[Outcome]) -> list[Row]:
    """Per loop family: caught and wasted; for productive traces: warned and refused."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[outcome.family or "productive"].append(outcome)
    rows = []
    for family in sorted(groups, key=lambda name: (name == "productive", name)):
        group = groups[family]
        rows.append(
            Row(
                family,
                len(group),
                sum(o.caught for o in group),
                sum(o.wasted for o in group),
                sum(o.warned for o in group),
                sum(o.refused for o in group),
            )
        )
    return rows


def _table(title: str, rows: Sequence[Row]) -> str:
    lines = [title, f"  {'family':<12} {'traces':>6} {'caught':>10} {'wasted':>7} {'warned':>7} {'refused':>8}"]
    for row in rows:
        if row.family == "productive":
            caught, wasted = "-", "-"
        else:
            caught, wasted = f"{row.caught} ({row.caught / row.traces:.0%})", str(row.wasted)
        lines.append(f"  {row.family:<12} {row.traces:>6} {caught:>10} {wasted:>7} {row.warned:>7} {row.refused:>8}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print both tables (and, with --traces, each trace's outcome under the defaults)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.detection")
    parser.add_argument("--traces", action="store_true", help="one line per trace too")
    args = parser.parse_args(argv)
    entries = labels()
    reference = evaluate(entries, REFERENCE, reference=True)
    defaults = evaluate(entries, {}, reference=False)
    print(_table("(a) identical only (the reference design)", summarize(reference)))
    print()
    print(_table("(b) defaults", summarize(defaults)))
    if args.traces:
        print()
        for outcome in defaults:
            verdict = "caught" if outcome.caught else ("-" if outcome.label == "productive" else "MISSED")
            extra = f"warned={outcome.warned} refused={outcome.refused}"
            print(f"  {outcome.name:<42} {outcome.family or 'productive':<12} {verdict:<7} {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
