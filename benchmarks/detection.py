"""How well the guard tells loops from work: three labelled corpora, replayed at the speeds real models run.

    python -m benchmarks.detection              # the summary, per source and per kind of loop
    python -m benchmarks.detection --traces     # and one line per trace and speed
    python -m benchmarks.detection --markdown   # the summary as the README's table

The corpora:

- **real** (``tests/corpus/real/<source>/``): public runs of agents nobody here wrote, labelled by reading;
- **hard** (``tests/corpus/hard/``): cases written to break the detector (argument variants, long cycles,
  interleaved repeats, waiting and backoff that look like loops);
- **lab** (``tests/corpus/``): the project's first corpus, recorded by scripted agents.

Each trace is judged with the shipped defaults (plus, for a few, the operator settings its label names)
at its recorded times (traces that record none: 1 s apart), then as a model thinking 1, 15 and 65 s per
call would have made it (each line's recorded ``wait`` kept on top). A loop **due a refusal** is refused
in time when a refusal comes by its ``due`` line; a **short loop** is warned in time when a warning (or a
refusal) comes by its ``warn`` line; a **productive** run is refused by any refusal, and warned with wrong
advice by any warning on a line its label does not call ``fair``. **Wasted** counts the calls that still
reached the server from a loop's ``due`` line to its first refusal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from mcp_loop_guard.config import GuardConfig
from mcp_loop_guard.plan import plan
from mcp_loop_guard.policies import Rules
from mcp_loop_guard.replay import Judged, judge_trace
from mcp_loop_guard.settings import FileSettings, load_settings
from mcp_loop_guard.traces import Line, read_trace, respace

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
REAL = CORPUS / "real"
HARD = CORPUS / "hard"
SPACINGS: tuple[float | None, ...] = (None, 1.0, 15.0, 65.0)
"""None: the recorded times; otherwise seconds of thinking per call."""

REFERENCE: Mapping[str, Any] = {
    "cycle_max_period": 1,
    "recurring_warn_threshold": 0,
    "recurring_block_threshold": 0,
    "same_error_warn_threshold": 0,
    "same_error_block_threshold": 0,
    "same_result_warn_threshold": 0,
    "same_result_block_threshold": 0,
    "burst_detection": False,
    "trust_annotations": False,
}
"""The reference design: identical calls only."""

REFUSED = frozenset({"block", "abort", "closed"})
WARNED = frozenset({"warn", "block", "abort"})


# --- cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One labelled trace."""

    corpus: str
    """``real``, ``hard`` or ``lab``."""
    source: str
    """The real corpus's source folder; the corpus's name otherwise."""
    path: Path
    loop: bool
    kind: str
    """The label's kind (real, hard) or family (lab)."""
    warn: int | None = None
    """A short loop: the line by which a warning is due."""
    due: int | None = None
    """A loop due a refusal: the line by which it is due."""
    fair: frozenset[int] = frozenset()
    """Productive runs: lines where a warning is fair advice."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    """``LOOP_GUARD_*`` settings (lower case, no prefix) the label asks for."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """A ``loopGuard`` config section the label asks for."""

    @property
    def name(self) -> str:
        """``source/file`` for the real corpus, the file's name otherwise."""
        return f"{self.source}/{self.path.name}" if self.corpus == "real" else self.path.name


def real_cases() -> list[Case]:
    """Every labelled run of the real corpus."""
    return [case for folder in _folders(REAL) for case in _labelled("real", folder.name, folder)]


def hard_cases() -> list[Case]:
    """Every labelled case of the hard corpus; polling whose waits only the clock shows is reported apart
    (``clock``): nothing a live guard sees tells it from a slow model's loop."""
    if not (HARD / "labels.json").is_file():
        return []
    cases = list(_labelled("hard", "hard", HARD))
    return [
        dataclasses.replace(case, corpus="clock", source="clock") if case.kind == "clock_wait" else case
        for case in cases
    ]


def lab_cases() -> list[Case]:
    """The first corpus, whose labels name a family and a due line (for same_result, a warning's)."""
    cases = []
    for name, entry in sorted(labels().items()):
        loop = entry["label"] == "loop"
        family = entry.get("family") or "productive"
        due = entry.get("due")
        warned_only = family == "same_result"
        clock = family == "clock_wait"
        cases.append(
            Case(
                "clock" if clock else "lab",
                "clock" if clock else "lab",
                CORPUS / name,
                loop,
                family,
                warn=due if warned_only else None,
                due=None if warned_only else due,
                settings=entry.get("settings") or {},
            )
        )
    return cases


def labels() -> dict[str, dict[str, Any]]:
    """The first corpus's labels."""
    loaded: dict[str, dict[str, Any]] = json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))
    return loaded


def _folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(path for path in root.iterdir() if path.is_dir() and (path / "labels.json").is_file())


def _labelled(corpus: str, source: str, folder: Path) -> Iterable[Case]:
    entries: dict[str, dict[str, Any]] = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    for name, entry in sorted(entries.items()):
        yield Case(
            corpus,
            source,
            folder / name,
            entry["label"] == "loop",
            entry["kind"],
            warn=entry.get("warn"),
            due=entry.get("due"),
            fair=frozenset(entry.get("fair") or ()),
            settings=entry.get("settings") or {},
            config=entry.get("config") or {},
        )


# --- judging ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """One trace at one speed."""

    case: Case
    spacing: float | None
    verdicts: Mapping[int, str]
    """Line number -> verdict."""

    @property
    def first_refusal(self) -> int | None:
        """The first refused line."""
        return min((n for n, v in self.verdicts.items() if v in REFUSED), default=None)

    @property
    def refused(self) -> bool:
        """Any call refused."""
        return self.first_refusal is not None

    @property
    def refused_in_time(self) -> bool:
        """A loop due a refusal was refused by its due line."""
        first = self.first_refusal
        return self.case.due is not None and first is not None and first <= self.case.due

    @property
    def warned_in_time(self) -> bool:
        """A short loop was warned (or refused) by its warn line."""
        mark = self.case.warn
        return mark is not None and any(n <= mark and v in WARNED for n, v in self.verdicts.items())

    @property
    def wrong_advice(self) -> list[int]:
        """Productive runs: lines warned or refused that the label does not call fair."""
        return sorted(n for n, v in self.verdicts.items() if v in WARNED and n not in self.case.fair)

    @property
    def wasted(self) -> int:
        """Calls from the due line on that reached the server before the first refusal."""
        due = self.case.due
        if due is None:
            return 0
        first = self.first_refusal
        return sum(
            1 for n, v in self.verdicts.items() if n >= due and (first is None or n < first) and v not in REFUSED
        )


@cache
def _rules(settings: str, config: str) -> Rules:
    """The policies of the defaults plus a label's settings and config section (JSON texts, to cache on)."""
    section: dict[str, Any] = json.loads(config)
    tools = tuple((section.pop("tools") or {}).items()) if "tools" in section else ()
    file_settings = FileSettings({_snake(key): value for key, value in section.items()})
    loaded = load_settings(file_settings, **json.loads(settings))
    return plan(GuardConfig(None, (), file_settings, tools), loaded).policies


def _snake(name: str) -> str:
    return "".join(f"_{ch.lower()}" if ch.isupper() else ch for ch in name)


@cache
def _trace(path: Path) -> tuple[Line, ...]:
    """A trace's lines, read once: every speed and setting judges the same lines (a sixth of the run otherwise)."""
    with path.open(encoding="utf-8") as stream:
        return tuple(read_trace(stream, str(path)))


def judge(case: Case, spacing: float | None, overrides: Mapping[str, Any] | None = None) -> Outcome:
    """One case at one speed, with the defaults, its label's settings and ``overrides``."""
    settings = {**case.settings, **(overrides or {})}
    rules = _rules(json.dumps(settings, sort_keys=True), json.dumps(case.config, sort_keys=True))
    lines = _trace(case.path)
    judged: list[Judged] = judge_trace(lines if spacing is None else respace(lines, spacing), rules)
    return Outcome(case, spacing, {item.line.number: item.verdict for item in judged})


# --- figures ----------------------------------------------------------------------------------


@dataclass
class Tally:
    """The figures of one group of traces at one speed."""

    due: int = 0
    refused_in_time: int = 0
    short: int = 0
    warned_in_time: int = 0
    productive: int = 0
    productive_refused: int = 0
    wrong_advice: int = 0
    wasted: int = 0

    def add(self, outcome: Outcome) -> None:
        """Count one outcome."""
        case = outcome.case
        if case.loop and case.due is not None:
            self.due += 1
            self.refused_in_time += outcome.refused_in_time
            self.wasted += outcome.wasted
        elif case.loop:
            self.short += 1
            self.warned_in_time += outcome.warned_in_time
        else:
            self.productive += 1
            self.productive_refused += outcome.refused
            self.wrong_advice += bool(outcome.wrong_advice)


def evaluate_all(
    cases: Sequence[Case], spacings: Sequence[float | None] = SPACINGS, overrides: Mapping[str, Any] | None = None
) -> list[Outcome]:
    """Every case at every speed."""
    return [judge(case, spacing, overrides) for spacing in spacings for case in cases]


def tally(outcomes: Iterable[Outcome], group: str = "corpus") -> dict[tuple[str, float | None], Tally]:
    """Figures by (group, spacing); ``group`` is a Case attribute (``corpus``, ``source``, ``kind``)."""
    tallies: dict[tuple[str, float | None], Tally] = defaultdict(Tally)
    for outcome in outcomes:
        tallies[(str(getattr(outcome.case, group)), outcome.spacing)].add(outcome)
    return tallies


def _speed(spacing: float | None) -> str:
    return "recorded" if spacing is None else f"{spacing:g} s"


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole}" if whole else "-"


HEADLINE = (
    ("real", "due", "refused_in_time", "real loops due a refusal, refused in time"),
    ("real", "short", "warned_in_time", "short real loops, warned in time"),
    ("real", "productive", "productive_refused", "productive real runs refused"),
    ("real", "productive", "wrong_advice", "productive real runs warned with wrong advice"),
    ("real", "due", "wasted", "calls wasted past the due line (real loops)"),
    ("hard", "due", "refused_in_time", "hard loops refused in time"),
    ("hard", "short", "warned_in_time", "hard short loops (paraphrased searches) warned in time"),
    (
        "hard",
        "productive",
        "productive_refused",
        "productive look-alikes refused (waiting shown by a call or a backoff)",
    ),
    ("hard", "productive", "wrong_advice", "productive look-alikes warned"),
    ("clock", "productive", "productive_refused", "polling that waits by the clock alone, refused (see pollable)"),
    ("lab", "due", "refused_in_time", "lab loops due a refusal, refused in time"),
    ("lab", "productive", "productive_refused", "lab productive runs refused"),
    ("lab", "productive", "wrong_advice", "lab productive runs warned"),
)


def headline_rows(outcomes: Sequence[Outcome]) -> list[list[str]]:
    """The summary table: one row per figure, one column per speed."""
    by_corpus = tally(outcomes)
    spacings = sorted({o.spacing for o in outcomes}, key=lambda s: -1.0 if s is None else s)
    rows = []
    for corpus, whole, part, title in HEADLINE:
        cells = []
        for spacing in spacings:
            figures = by_corpus.get((corpus, spacing))
            if figures is None or getattr(figures, whole) == 0:
                cells.append("-")
            elif part == "wasted":
                cells.append(str(figures.wasted))
            else:
                cells.append(_share(getattr(figures, part), getattr(figures, whole)))
        if any(cell != "-" for cell in cells):
            rows.append([title, *cells])
    return rows


def group_rows(outcomes: Sequence[Outcome], group: str) -> list[list[str]]:
    """Per source or kind: due refused / short warned / productive refused / wrong advice, at each speed."""
    tallies = tally(outcomes, group)
    spacings = sorted({o.spacing for o in outcomes}, key=lambda s: -1.0 if s is None else s)
    rows = []
    for name in sorted({key[0] for key in tallies}):
        cells = []
        for spacing in spacings:
            t = tallies[(name, spacing)]
            cells.append(
                " / ".join(
                    [
                        _share(t.refused_in_time, t.due),
                        _share(t.warned_in_time, t.short),
                        _share(t.productive_refused, t.productive),
                        _share(t.wrong_advice, t.productive),
                    ]
                )
            )
        rows.append([name, *cells])
    return rows


def _plain(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = [title, "  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def headline_markdown(outcomes: Sequence[Outcome]) -> str:
    """The summary as the README publishes it: one Markdown table, a column per speed."""
    return _markdown(["", *(_speed(s) for s in SPACINGS)], headline_rows(outcomes))


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _revision() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the summary (and, with --traces, each trace's verdict lines at each speed)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.detection")
    parser.add_argument("--traces", action="store_true", help="one line per trace and speed too")
    parser.add_argument("--markdown", action="store_true", help="the summary as Markdown tables")
    args = parser.parse_args(argv)
    cases = [*real_cases(), *hard_cases(), *lab_cases()]
    outcomes = evaluate_all(cases)
    spacings = [_speed(s) for s in SPACINGS]
    header = ["", *spacings]
    stamp = f"{datetime.now(UTC):%Y-%m-%d}, commit {_revision()}"
    counts = defaultdict(int)
    for case in cases:
        counts[case.corpus] += 1
    summary = ", ".join(f"{corpus} {count}" for corpus, count in sorted(counts.items()))
    groups = ["due refused / short warned / productive refused / productive warned wrongly", *spacings]
    if args.markdown:
        print(f"Traces: {summary}; defaults; {stamp}.\n")
        print(headline_markdown(outcomes))
        print()
        print(_markdown(["source", *spacings], group_rows([o for o in outcomes if o.case.corpus != "lab"], "source")))
        return 0
    print(f"Traces: {summary}; defaults; {stamp}\n")
    print(_plain("Summary", header, headline_rows(outcomes)))
    print()
    print(_plain("By source (" + groups[0] + ")", ["source", *spacings], group_rows(outcomes, "source")))
    print()
    real_and_hard = [o for o in outcomes if o.case.corpus != "lab"]
    print(_plain("By kind, real and hard (" + groups[0] + ")", ["kind", *spacings], group_rows(real_and_hard, "kind")))
    if args.traces:
        print()
        for outcome in outcomes:
            case = outcome.case
            mark = f"due {case.due}" if case.due else f"warn {case.warn}" if case.warn else "productive"
            found = [f"{n}:{v}" for n, v in sorted(outcome.verdicts.items()) if v != "allow"]
            print(f"  {_speed(outcome.spacing):>8}  {case.name:<58} {case.kind:<12} {mark:<11} {' '.join(found[:12])}")
    return 0


# --- the first corpus's older figures, kept for its own tests -----------------------------------


@dataclass(frozen=True)
class LabOutcome:
    """One lab trace under one rule set, at its recorded times."""

    name: str
    label: str
    family: str | None
    due: int | None
    caught: bool
    warned: bool
    refused: bool
    wasted: int
    first_refusal: int | None


def evaluate(
    label_entries: Mapping[str, Mapping[str, Any]],
    rules: Mapping[str, Any],
    *,
    reference: bool,
    pollable: tuple[str, ...] = (),
) -> list[LabOutcome]:
    """Every lab trace judged under ``rules`` (plus each trace's own settings unless ``reference``), with the
    ``pollable`` tools configured so."""
    found = []
    config = {"tools": {tool: {"pollable": True} for tool in pollable}} if pollable else {}
    for case in lab_cases():
        entry = label_entries[case.path.name]
        plain = Case("lab", "lab", case.path, case.loop, case.kind, config=config)
        outcome = judge(dataclasses.replace(case, config=config) if not reference else plain, None, dict(rules))
        verdicts = outcome.verdicts
        refusals = [n for n, v in verdicts.items() if v in REFUSED]
        warnings = [n for n, v in verdicts.items() if v == "warn"]
        first = min(refusals) if refusals else None
        due = entry.get("due")
        caught = False
        wasted = 0
        if entry["label"] == "loop":
            assert isinstance(due, int)
            caught = first is not None and first <= due
            if entry.get("family") == "same_result":
                caught = caught or any(n <= due for n in warnings)
            wasted = sum(1 for n, v in verdicts.items() if n >= due and v not in REFUSED)
        found.append(
            LabOutcome(
                case.path.name,
                entry["label"],
                entry.get("family"),
                due,
                caught,
                bool(warnings),
                bool(refusals),
                wasted,
                first,
            )
        )
    return found


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends it quietly, as it ends any filter
    raise SystemExit(main())
