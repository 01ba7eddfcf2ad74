"""Copies of a call that overlap answers, side effects with no warning step, and call budgets in the core."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_loop_guard.core import Action, Family, LoopDetector, Mode, Policy, State
from mcp_loop_guard.core.budget import Budget, charge, over_budget, wording

ALLOW, WARN, BLOCK, ABORT = Action.ALLOW, Action.WARN, Action.BLOCK, Action.ABORT
ARGS = {"q": "same"}
SAME: dict[str, Any] = {"content": [{"type": "text", "text": "the same answer"}]}


# --- copies in flight across an answer ------------------------------------------------------


def test_copies_begun_after_the_first_answer_still_count_as_copies() -> None:
    """Three copies in flight, one answered, three more: the 4th is warned, the 5th and 6th refused."""
    detector = LoopDetector(Policy())
    first = [detector.begin("search", ARGS, 0.0) for _ in range(3)]
    assert [verdict.action for _, verdict in first] == [ALLOW, ALLOW, ALLOW]
    ticket = first[0][0]
    assert ticket is not None
    detector.finish(ticket, SAME, 0.1)
    later = [detector.begin("search", ARGS, 0.2) for _ in range(3)]
    assert [verdict.action for _, verdict in later] == [ALLOW, BLOCK, BLOCK]
    assert [verdict.streak for _, verdict in later[1:]] == [5, 6]
    assert later[0][0] is not None
    assert later[0][0].owed is not None
    assert later[0][0].owed[:3] == (Family.BURST, 4, WARN)


@settings(max_examples=200, deadline=None)
@given(copies=st.integers(min_value=5, max_value=40), answered_after=st.lists(st.integers(0, 40), max_size=40))
def test_a_burst_reaches_the_upstream_at_most_four_times_however_answers_interleave(
    copies: int, answered_after: list[int]
) -> None:
    """Whatever the order of begins and answers, block_threshold - 1 copies get through and each refusal counts on."""
    detector = LoopDetector(Policy(abort_threshold=1000))
    in_flight = []
    reached = 0
    counts = []
    answers = sorted(answered_after)
    for index in range(copies):
        while answers and answers[0] <= index and in_flight:
            answers.pop(0)
            detector.finish(in_flight.pop(0), SAME, float(index))
        ticket, verdict = detector.begin("search", ARGS, float(index))
        if ticket is not None:
            reached += 1
            in_flight.append(ticket)
        else:
            assert verdict.action is BLOCK
            counts.append(verdict.streak)
    assert reached == Policy().block_threshold - 1
    assert counts == list(range(5, copies + 1))


def test_an_abandoned_copy_no_longer_counts() -> None:
    """A cancelled copy is not a repetition: with two of four cancelled, the next copy is only the third."""
    detector = LoopDetector(Policy())
    begun = [detector.begin("search", ARGS, 0.0)[0] for _ in range(4)]
    for ticket in begun[:2]:
        assert ticket is not None
        detector.abandon(ticket, 0.1)
    ticket, verdict = detector.begin("search", ARGS, 0.2)
    assert verdict.action is ALLOW
    assert ticket is not None
    assert ticket.owed is not None
    assert ticket.owed[1] == 3


# --- side effects without a warning step ----------------------------------------------------


def test_side_effects_are_refused_when_only_their_warning_step_is_off() -> None:
    """side_effect_warn_threshold=0 switches the warning off, not the counting: the 2nd send is refused."""
    detector = LoopDetector(Policy(side_effect_warn_threshold=0, side_effect_block_threshold=2))
    destructive = {"destructiveHint": True}
    ticket, verdict = detector.begin("send_email", {"to": "a"}, 0.0, annotations=destructive)
    assert ticket is not None
    assert ticket.owed is None
    assert detector.finish(ticket, {"content": [{"type": "text", "text": "sent"}]}, 0.1).action is ALLOW
    ticket, verdict = detector.begin("send_email", {"to": "a"}, 1.0, annotations=destructive)
    assert ticket is None
    assert (verdict.action, verdict.family, verdict.streak) == (BLOCK, Family.SIDE_EFFECT, 2)


# --- budgets --------------------------------------------------------------------------------


def _budgeted(*budgets: Budget, mode: Mode = Mode.ENFORCE) -> LoopDetector:
    policy = Policy(budgets=budgets, mode=mode)
    return LoopDetector(policy)


def _calls(detector: LoopDetector, count: int, now: float = 0.0, tool: str = "search") -> list[Any]:
    """``count`` calls with different arguments (never a loop), one second apart; their verdicts."""
    verdicts = []
    for index in range(count):
        at = now + index
        ticket, verdict = detector.begin(tool, {"q": f"{tool}-{at}"}, at)
        if ticket is not None:
            verdict = detector.finish(ticket, {"content": [{"type": "text", "text": f"r{at}"}]}, at + 0.5)
        verdicts.append(verdict)
    return verdicts


def test_the_call_over_a_budget_is_refused_with_its_name_and_reset_time() -> None:
    """Three calls per minute: the 4th is refused (family budget) and says when the budget resets."""
    detector = _budgeted(Budget("*", 3, 60.0))
    verdicts = _calls(detector, 4)
    assert [v.action for v in verdicts] == [ALLOW, ALLOW, ALLOW, BLOCK]
    refused = verdicts[3]
    assert refused.family is Family.BUDGET
    assert refused.reason is not None
    assert "budget of 3 calls to any tool per minute is used up" in refused.reason
    assert "it resets in 57 seconds" in refused.reason
    assert detector.state.last_verdict == "block:budget:search"


def test_budget_refusals_never_close_the_session_and_the_window_resets() -> None:
    """Ten refusals for a budget abort nothing; once the window has passed, calls go through again."""
    detector = _budgeted(Budget("*", 2, 100.0))
    verdicts = _calls(detector, 12)
    assert [v.action for v in verdicts] == [ALLOW, ALLOW] + [BLOCK] * 10
    assert detector.state.blocks == 0  # not loop refusals: the abort count never moves
    assert [v.action for v in _calls(detector, 3, now=100.0)] == [ALLOW, ALLOW, BLOCK]


def test_a_budget_without_a_window_lasts_the_session() -> None:
    """No perSeconds: the cap holds however long the agent waits, and the text says it does not reset."""
    detector = _budgeted(Budget("search_*", 1))
    assert _calls(detector, 1, tool="search_web")[0].action is ALLOW
    refused = _calls(detector, 1, now=1e6, tool="search_web")[0]
    assert refused.action is BLOCK
    assert refused.reason is not None
    assert "1 calls to `search_*` per session" in refused.reason
    assert "does not reset during this session" in refused.reason


def test_a_call_refused_for_looping_is_not_counted_against_the_budget() -> None:
    """Identical calls refused by the loop rules leave the budget as it was."""
    hourly = Budget("*", 10, 3600.0)
    detector = _budgeted(hourly)
    for at in range(7):
        ticket, _ = detector.begin("search", ARGS, float(at))
        if ticket is not None:
            detector.finish(ticket, SAME, at + 0.5)
    assert detector.state.budget_use[hourly.key][1] == 4  # calls 5 to 7 were refused as a loop


def test_warn_mode_delivers_the_budget_as_a_warning_and_shadow_mode_logs_it() -> None:
    """Warn mode: the call goes through with the budget's note; shadow: it goes through unchanged, judged BLOCK."""
    warned = _budgeted(Budget("*", 1, 60.0), mode=Mode.WARN)
    verdicts = _calls(warned, 2)
    assert [v.action for v in verdicts] == [ALLOW, WARN]
    assert verdicts[1].family is Family.BUDGET
    assert verdicts[1].reason is not None
    assert "in enforce mode it would have been refused" in verdicts[1].reason
    shadowed = _budgeted(Budget("*", 1, 60.0), mode=Mode.SHADOW)
    verdicts = _calls(shadowed, 2)
    assert [(v.action, v.shadow) for v in verdicts] == [(ALLOW, ALLOW), (ALLOW, BLOCK)]
    assert verdicts[1].family is Family.BUDGET
    assert shadowed.state.blocks == 0


def test_budget_use_survives_the_state_wire_form() -> None:
    """A store keeps budgets with the loop state: a guard on another replica continues the count."""
    detector = _budgeted(Budget("*", 2, 60.0))
    _calls(detector, 2)
    again = LoopDetector(
        dataclasses.replace(Policy(), budgets=(Budget("*", 2, 60.0),)), state=State.loads(detector.state.dumps())
    )
    assert _calls(again, 1, now=2.0)[0].action is BLOCK


def test_raising_a_cap_keeps_the_calls_already_counted() -> None:
    """A budget's use is keyed by what it covers and its window, not its cap: a reload to 5 allows 3 more."""
    use: dict[str, tuple[float, int]] = {}
    charge(use, (Budget("*", 2, 60.0),), 0.0)
    charge(use, (Budget("*", 2, 60.0),), 1.0)
    assert over_budget(use, (Budget("*", 2, 60.0),), 2.0) is not None
    assert over_budget(use, (Budget("*", 5, 60.0),), 2.0) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (3600.0, "per hour"),
        (7200.0, "per 2 hours"),
        (90.0, "per 90 seconds"),
        (300.0, "per 5 minutes"),
        (1.0, "per second"),
    ],
)
def test_budget_names_read_naturally(seconds: float, text: str) -> None:
    """The window is said as people say it."""
    assert wording(Budget("*", 5, seconds), 30.0).count(text) == 1


def test_a_budget_rejects_caps_no_one_could_mean() -> None:
    """A cap below 1 or a window that is not positive is a configuration error."""
    with pytest.raises(ValueError, match="maxCalls"):
        Budget("*", 0)
    with pytest.raises(ValueError, match="perSeconds"):
        Budget("*", 1, 0.0)
