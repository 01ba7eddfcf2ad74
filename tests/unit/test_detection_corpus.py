"""The labelled corpora replayed with the defaults: the detection targets hold."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from benchmarks.detection import (
    REFERENCE,
    SPACINGS,
    evaluate,
    evaluate_all,
    hard_cases,
    headline_markdown,
    lab_cases,
    labels,
    real_cases,
    tally,
)
from benchmarks.detection import LabOutcome as Outcome
from benchmarks.detection import Outcome as Judged

FAMILIES = ("identical", "cycle", "same_error", "same_result", "burst", "side_effect", "volatile")


@pytest.fixture(scope="module")
def defaults() -> list[Outcome]:
    """Every trace judged under the shipped defaults (plus each trace's own operator settings)."""
    return evaluate(labels(), {}, reference=False)


def test_every_loop_family_is_caught_in_at_least_95_percent_of_its_traces(defaults: list[Outcome]) -> None:
    """A loop is caught when it is refused by its due line (same_result: warned by it)."""
    by_family: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in defaults:
        if outcome.label == "loop":
            by_family[outcome.family or ""].append(outcome)
    assert set(by_family) == set(FAMILIES)
    for family, outcomes in by_family.items():
        missed = [o.name for o in outcomes if not o.caught]
        assert len(missed) <= 0.05 * len(outcomes), f"{family}: missed {missed}"


def test_no_productive_trace_is_refused_or_aborted(defaults: list[Outcome]) -> None:
    """Productive work is never refused, but for polling whose only sign of waiting is the clock (no
    evidence: a model thinking a minute per call looks the same), which a pollable tool lets through."""
    refused = [o.name for o in defaults if o.label == "productive" and o.refused]
    assert refused == ["migration-long-plateau.jsonl"]
    judged = evaluate(labels(), {}, reference=False, pollable=("job_status",))
    assert [o.refused for o in judged if o.name == "migration-long-plateau.jsonl"] == [False]


FLAGGED_AS_WRITTEN = {
    "read-empty-init-files.jsonl",
    "deploy-rollout-plateau.jsonl",
    "deploy-announced-twice.jsonl",
    "import-error-three-runs.jsonl",
}
"""Productive traces the rules as written warn (tests/corpus/README.md): polls that wait only by the clock and
see the same answer three times, six empty files read in a row, and a test run failing the same way a third
time after two edits (warned, as the same answer after new edits is; never refused)."""


def test_only_the_productive_traces_the_rules_are_known_to_flag_are_warned(defaults: list[Outcome]) -> None:
    """Warnings on productive work stay rare: only where the corpus documents them."""
    productive = [o for o in defaults if o.label == "productive"]
    warned = {o.name for o in productive if o.warned and not o.refused}
    assert len(productive) >= 30
    assert warned <= FLAGGED_AS_WRITTEN, warned - FLAGGED_AS_WRITTEN


def test_the_reference_design_misses_what_the_families_catch(defaults: list[Outcome]) -> None:
    """With the identical rule alone, cycles, bursts, same errors and side effects all pass."""
    reference = {o.name: o for o in evaluate(labels(), REFERENCE, reference=True)}
    for family in ("cycle", "burst", "same_error", "side_effect"):
        names = [o.name for o in defaults if o.family == family]
        assert not any(reference[name].caught for name in names), family
        assert all(o.caught for o in defaults if o.family == family), family


@pytest.fixture(scope="module")
def at_every_speed() -> list[Judged]:
    """The real and hard corpora at their recorded times and at 1, 15 and 65 s of thinking per call."""
    return evaluate_all([*real_cases(), *hard_cases()])


def test_real_runs_at_every_speed_keep_the_published_figures(at_every_speed: list[Judged]) -> None:
    """On runs of agents nobody here wrote, at any pace: no productive run refused, wrong advice on at most
    3%, 11 of 12 (92%) of the loops due a refusal refused in time, 85% of the short loops warned in time."""
    figures = tally(o for o in at_every_speed if o.case.corpus == "real")
    assert {spacing for _, spacing in figures} == set(SPACINGS)
    for (_, spacing), counted in figures.items():
        assert counted.productive_refused == 0, spacing
        assert counted.wrong_advice <= 0.03 * counted.productive, spacing
        assert counted.refused_in_time * 12 >= 11 * counted.due, spacing
        assert counted.warned_in_time >= 0.85 * counted.short, spacing


def test_hard_loops_are_refused_and_waiting_is_never_refused_at_any_speed(at_every_speed: list[Judged]) -> None:
    """Argument variants, cycles up to 8 and interleaved repeats refused in time in 90% of the cases; polling
    with a wait and retries backing off never refused."""
    for spacing in SPACINGS:
        hard = [o for o in at_every_speed if o.case.corpus == "hard" and o.spacing == spacing]
        shapes = [o for o in hard if o.case.kind in {"variant", "cycle", "interleaved"}]
        assert len(shapes) >= 20
        assert sum(o.refused_in_time for o in shapes) >= 0.9 * len(shapes), spacing
        waiting = [o.case.name for o in hard if o.case.kind in {"wait_poll", "backoff"} and o.refused]
        assert waiting == [], spacing
        assert all(o.refused_in_time for o in hard if o.case.kind in {"batch_errors", "side_effect"}), spacing


def test_the_readme_publishes_the_benchmarks_table_of_this_code(at_every_speed: list[Judged]) -> None:
    """The README's detection table is what ``python -m benchmarks.detection --markdown`` prints for the code as
    it is: a change of any figure, at any speed, fails here until the table is printed again."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    table = headline_markdown([*at_every_speed, *evaluate_all(lab_cases())])
    assert table in readme, f"the README's detection table is not the benchmark's output; it now prints:\n{table}"
