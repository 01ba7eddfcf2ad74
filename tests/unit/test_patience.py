"""Time as evidence, never as an exemption: slow models are judged as fast ones; waiting shows in what is called."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.core import Family, Policy, patience
from tests.unit.timed import ALLOW, BLOCK, WARN, Timed, actions, first, text

STATUS = ("job_status", {"job": "release-42"}, text("queued: waiting for a runner"))
SPEEDS = (1.0, 15.0, 65.0, 180.0)
"""Seconds a model thinks before each call: fast, a benchmark's median, slow, very slow."""


@pytest.mark.parametrize("think", SPEEDS)
def test_a_slow_model_repeating_a_call_is_warned_and_refused_as_a_fast_one_is(think: float) -> None:
    """The same call and answer every `think` seconds: warned at 3, refused at 5, whatever the pace."""
    agent = Timed(Policy(reset_after_seconds=600), think=think)
    verdicts = [agent.call(*STATUS) for _ in range(6)]
    assert actions(verdicts) == [ALLOW, ALLOW, WARN, WARN, BLOCK, BLOCK]
    assert agent.reached == 4


@pytest.mark.parametrize("think", SPEEDS)
def test_a_slow_models_warning_reaches_it(think: float) -> None:
    """A model thinking minutes per call still reads the warning at its third identical call."""
    agent = Timed(think=think)
    third = [agent.call(*STATUS) for _ in range(3)][-1]
    assert third.action is WARN
    assert third.family is Family.IDENTICAL


@pytest.mark.parametrize("think", SPEEDS)
@pytest.mark.parametrize("wait", [("wait", {"seconds": 30}), ("bash", {"command": "sleep 30"})])
def test_a_status_polled_with_a_wait_between_is_never_refused(think: float, wait: tuple[str, dict[str, int]]) -> None:
    """status, wait, status, wait...: the same answers round after round, but the agent is waiting: no cycle."""
    agent = Timed(think=think)
    verdicts = []
    for _ in range(12):
        verdicts.append(agent.call(*STATUS))
        verdicts.append(agent.call(wait[0], wait[1], text("waited 30 s")))
    assert set(actions(verdicts)) == {ALLOW}


def test_a_call_that_sleeps_first_is_a_patient_poll() -> None:
    """`sleep 30 && curl .../status` again and again with the same answer: polling, never refused."""
    agent = Timed(think=5.0)
    poll = ("bash", {"command": "sleep 30 && curl -s http://ci.local/jobs/42"}, text('{"state": "running"}'))
    assert set(actions([agent.call(*poll) for _ in range(10)])) == {ALLOW}


@pytest.mark.parametrize("think", SPEEDS)
def test_retries_backing_off_are_never_refused(think: float) -> None:
    """The same failing call retried after 1, 2, 4, 8 and 16 s of waiting (on top of thinking) is not a loop."""
    agent = Timed(think=think)
    agent.call("get_order", {"id": 7}, text("order 7"))
    agent.call("list_orders", {}, text("7, 8"))
    unavailable = text("503 Service Unavailable", error=True)
    retries = [agent.call("fetch_invoice", {"id": 7}, unavailable, wait=wait) for wait in (0, 1, 2, 4, 8, 16)]
    assert BLOCK not in actions(retries)
    assert agent.call("fetch_invoice", {"id": 7}, text("invoice 7"), wait=32).action is ALLOW


def test_think_times_that_vary_by_themselves_are_no_backoff() -> None:
    """A model whose thinking varies (3.5, 3.9, 5.0 s...) retrying a failure is refused at its 5th identical call."""
    agent = Timed()
    for gap in (2.0, 5.0, 3.9):
        agent.call("read_docs", {"page": gap}, text("docs"), think=gap)
    refused = text("connect ECONNREFUSED", error=True)
    gaps = (3.5, 3.9, 5.0, 2.9, 4.6, 1.7)
    verdicts = [agent.call("http_get", {"url": "https://api.down/v1"}, refused, think=gap) for gap in gaps]
    assert first(verdicts, BLOCK) == 5


def test_a_gap_far_longer_than_the_agents_rhythm_holds_the_repeat() -> None:
    """An agent calling every 2 s that repeats a status after 5 minutes: that repeat does not lengthen the streak
    (a 20 s thought does)."""
    agent = Timed(Policy(reset_after_seconds=3600), think=2.0)
    for i in range(5):
        agent.call("read_file", {"path": f"f{i}"}, text(f"file {i}"))
    first_two = [agent.call(*STATUS) for _ in range(2)]
    later = agent.call(*STATUS, think=300.0)
    assert actions([*first_two, later]) == [ALLOW, ALLOW, ALLOW]
    assert later.streak == 2
    assert agent.call(*STATUS).action is WARN


def test_a_long_gap_before_a_first_call_holds_nothing() -> None:
    """Thinking long before a new call is no patience: the call counts from its first occurrence."""
    agent = Timed(think=2.0)
    for i in range(5):
        agent.call("read_file", {"path": f"f{i}"}, text(f"file {i}"))
    verdicts = [agent.call(*STATUS, think=60.0 if i == 0 else 2.0) for i in range(3)]
    assert actions(verdicts) == [ALLOW, ALLOW, WARN]


def test_a_pollable_tool_is_never_refused_for_the_same_answer() -> None:
    """`pollable` on a tool: its identical answers are polling, however many, at any pace."""
    pollable = Policy(pollable=True)
    agent = Timed(Policy(), policy_for=lambda tool: pollable if tool == "job_status" else Policy())
    assert set(actions([agent.call(*STATUS) for _ in range(20)])) == {ALLOW}
    assert [agent.call("read_file", {"path": "x"}, text("x")).action for _ in range(5)][-1] is BLOCK


def test_a_loop_already_refused_stays_refused_however_long_the_agent_waits() -> None:
    """Waiting (a long gap) after a refusal does not lift it within the request window."""
    agent = Timed(Policy(reset_after_seconds=3600), think=2.0)
    for i in range(4):
        agent.call("read_file", {"path": f"f{i}"}, text(f"file {i}"))
    [agent.call(*STATUS) for _ in range(5)]
    assert agent.call(*STATUS, think=600.0).action is BLOCK


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=64))
def test_the_rhythms_median_is_the_standard_librarys(gaps: list[float]) -> None:
    """The guard's own median (no ``statistics`` import in every guard) agrees with ``statistics.median``."""
    assert patience._median(gaps) == statistics.median(gaps)
