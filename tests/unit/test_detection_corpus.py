"""The labelled corpus replayed with the defaults: the detection targets hold."""

from __future__ import annotations

from collections import defaultdict

import pytest
from benchmarks.detection import REFERENCE, evaluate, labels
from benchmarks.detection import LabOutcome as Outcome

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
    """Productive work is never refused."""
    refused = [o.name for o in defaults if o.label == "productive" and o.refused]
    assert refused == []


def test_at_most_five_percent_of_productive_traces_are_warned(defaults: list[Outcome]) -> None:
    """Warnings on productive work stay rare."""
    productive = [o for o in defaults if o.label == "productive"]
    warned = [o.name for o in productive if o.warned]
    assert len(productive) >= 30
    assert len(warned) <= 0.05 * len(productive), warned


def test_the_reference_design_misses_what_the_families_catch(defaults: list[Outcome]) -> None:
    """With the identical rule alone, cycles, bursts, same errors and side effects all pass."""
    reference = {o.name: o for o in evaluate(labels(), REFERENCE, reference=True)}
    for family in ("cycle", "burst", "same_error", "side_effect"):
        names = [o.name for o in defaults if o.family == family]
        assert not any(reference[name].caught for name in names), family
        assert all(o.caught for o in defaults if o.family == family), family
