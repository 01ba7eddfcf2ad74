"""A stored state read back: any JSON at all is a state or a StateFormatError, and what is read never crashes a guard.

A store holds what anyone with write access put there. Reading it must be total: a wrong
container, a count that is negative, not finite or beyond reason, more entries than a state
keeps, all raise StateFormatError (which stores turn into "no state"). And a state that does
read back, however odd its values, goes through the detector and the operator's summary.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_loop_guard.core.budget import Budget
from mcp_loop_guard.core.detector import Call, Outcome, abandon, begin, finish, take_over
from mcp_loop_guard.core.model import Mode
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.state import FORMAT, MAX_BATCHES, MAX_EFFECTS, MAX_MEMBERS, State, StateFormatError
from mcp_loop_guard.store.base import KeyInfo, read_state

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**53 - 2, max_value=2**70)
    | st.floats()  # NaN and the infinities included: Python's parser reads NaN, Infinity and 1e999
    | st.text(max_size=8)
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=4), children, max_size=6),
    max_leaves=30,
)
"""Any JSON value the standard parser can produce."""
SMALL_JSON = st.recursive(
    JSON_LEAVES,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)
"""Any JSON value, of every type and nesting the standard parser gives, but small: what replaces a part of a state.

A reader refuses a wrong part by its type or its first wrong item, so a large stand-in tests
nothing a small one does not; drawing JSON's 30 leaves at every depth took three quarters of
the test's time.
"""


def either(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-formed piece, sometimes any JSON value in its place."""
    return st.one_of(good, good, SMALL_JSON)


TEXT = either(st.text(max_size=6))
COUNT = either(st.integers(min_value=-3, max_value=40))
SECONDS = either(st.floats(min_value=-1e12, max_value=1e12) | st.integers(min_value=-10, max_value=10**10))
FLAG = either(st.integers(min_value=-1, max_value=4))
ENTRY = either(st.tuples(TEXT, TEXT, TEXT, FLAG).map(list))
COUNTS = either(st.dictionaries(st.text(max_size=4), COUNT, max_size=MAX_MEMBERS + 2))
BATCH = either(
    st.tuples(COUNT, COUNT, FLAG, SECONDS, COUNTS, COUNTS, st.none() | ENTRY, SECONDS, FLAG).map(list)
    | st.tuples(COUNT, COUNT, FLAG, SECONDS, COUNTS, COUNTS, st.none() | ENTRY, SECONDS, FLAG, COUNTS).map(list)
)
NEAR_STATES = st.fixed_dictionaries(
    {"v": st.just(1), "h": either(st.lists(ENTRY, max_size=10)), "r": either(st.lists(COUNT, max_size=10))},
    optional={
        "e": either(st.tuples(TEXT, TEXT, COUNT).map(list)),
        "s": either(st.tuples(TEXT, TEXT, COUNT, TEXT, COUNT).map(list)),
        "x": either(st.dictionaries(st.text(max_size=4), either(st.tuples(TEXT, COUNT).map(list)), max_size=10)),
        "p": either(st.lists(SECONDS, max_size=10)),
        "w": either(st.text("0123456789abcdef", max_size=60) | st.just("0" * 25 * 3)),
        "f": either(st.lists(TEXT, max_size=10)),
        "o": either(st.lists(TEXT, max_size=10)),
        "b": COUNT,
        "i": SECONDS,
        "B": either(st.lists(BATCH, max_size=MAX_BATCHES + 2)),
        "n": COUNT,
        "l": TEXT,
        "u": either(st.dictionaries(st.text(max_size=4), either(st.tuples(SECONDS, COUNT).map(list)), max_size=4)),
    },
)
"""Wire forms of states with any part of them, at any depth, possibly replaced by something else."""


def read(wire: object) -> State | None:
    """``State.from_wire``: a state, or None for a StateFormatError (any other exception fails the test)."""
    try:
        return State.from_wire(wire)
    except StateFormatError:
        return None


@given(JSON)
def test_any_json_value_is_a_state_or_a_format_error(wire: object) -> None:
    """from_wire over arbitrary JSON: a State or StateFormatError, never another exception."""
    read(wire)
    read({"v": 1, "h": [], "r": [], "x": wire})


@given(NEAR_STATES)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_a_state_with_any_part_replaced_is_a_state_or_a_format_error(wire: dict[str, Any]) -> None:
    """A state's wire form with parts swapped for other JSON: read as a State, or refused with StateFormatError."""
    state = read(wire)
    if state is not None:
        assert read(state.wire()) == state, "what was read writes back the same"


def test_the_shapes_seen_planted_in_stores_are_format_errors() -> None:
    """Wrong containers, infinite, huge and negative numbers, oversized lists: StateFormatError each."""
    base: dict[str, Any] = {"v": 1, "h": [], "r": []}
    for extra in (
        {"x": []},
        {"u": []},
        {"b": math.inf},
        {"b": 1e999},
        {"b": 10**400},
        {"b": -1},
        {"p": [math.nan]},
        {"p": [1.0] * 9},
        {"w": 5},
        {"w": "xyz"},
        {"w": "0" * 24},
        {"w": "0" * 25 * 65},
        {"f": [1]},
        {"i": "now"},
        {"e": []},
        {"x": {str(n): ["t", 1] for n in range(MAX_EFFECTS + 1)}},
        {"B": [[1, 0, 0, 0.0, {}, {}, None, 0.0, 0]] * (MAX_BATCHES + 1)},
        {"B": [[1, -1, 0, 0.0, {}, {}, None, 0.0, 0]]},
        {"h": [["t", "c", "r", 0]] * 100, "r": [0] * 100},
        {"h": [["t", "c", "r", True]], "r": [0]},
    ):
        with pytest.raises(StateFormatError) as refused:
            State.from_wire({**base, **extra})
        assert str(extra) not in str(refused.value)
    assert read_state(b'{"v":1,"h":[],"r":[],"b":1e999}') is None
    assert read_state(b"\xff\xfe") is None


WILD_COUNT = st.integers(min_value=0, max_value=2**52)
"""Counts up to half the largest a state holds: the calls judged on top stay within it."""
WILD_SECONDS = st.floats(min_value=-1e10, max_value=4e10)
"""Times and gaps: any two of them are less than the largest a state holds apart."""
KEYS = st.sampled_from(["a" * 16, "b" * 16, "c" * 16, "ab"])
WILD_ENTRY = st.tuples(st.sampled_from(["t", "u"]), KEYS, KEYS, st.integers(0, 3)).map(list)
WILD_COUNTS = st.dictionaries(st.text(max_size=40), WILD_COUNT, max_size=MAX_MEMBERS)
WILD_BATCH = st.tuples(
    WILD_COUNT,
    WILD_COUNT,
    st.integers(0, 1),
    WILD_SECONDS,
    WILD_COUNTS,
    WILD_COUNTS,
    st.none() | WILD_ENTRY,
    WILD_SECONDS,
    st.integers(0, 1),
    WILD_COUNTS,
).map(list)
WILD_STATES = st.fixed_dictionaries(
    {"v": st.just(1), "h": st.lists(WILD_ENTRY, max_size=8), "r": st.lists(WILD_COUNT, max_size=8)},
    optional={
        "e": st.one_of(
            st.tuples(st.sampled_from(["t", "u"]), KEYS, WILD_COUNT).map(list),
            st.lists(
                st.tuples(st.sampled_from(["t", "u"]), KEYS, WILD_COUNT, WILD_COUNT).map(list), min_size=1, max_size=3
            ),
        ),
        "s": st.tuples(st.sampled_from(["t", "u"]), KEYS, WILD_COUNT, KEYS, WILD_COUNT).map(list),
        "x": st.dictionaries(KEYS, st.tuples(st.sampled_from(["t", "u"]), WILD_COUNT).map(list), max_size=MAX_EFFECTS),
        "g": WILD_SECONDS,
        "b": WILD_COUNT,
        "i": WILD_SECONDS,
        "B": st.lists(WILD_BATCH, max_size=MAX_BATCHES),
        "n": WILD_COUNT,
        "l": st.text(max_size=10),
        "u": st.dictionaries(st.sampled_from([":*:session", ":*:60s"]), st.tuples(WILD_SECONDS, WILD_COUNT).map(list)),
    },
)
"""Well-typed states with values no guard would write: huge counts, far times, batches that do not add up."""
POLICIES = st.sampled_from(
    [
        Policy(),
        Policy(cycle_max_period=1, mode=Mode.SHADOW),
        Policy(cycle_max_period=8, mode=Mode.WARN),
        Policy(budgets=(Budget("*", 3), Budget("*", 5, 60.0))),
    ]
)


@given(WILD_STATES, POLICIES, st.sampled_from(["t", "u"]), KEYS, KEYS, WILD_SECONDS)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_state_that_reads_back_goes_through_the_detector(  # noqa: PLR0917 - one value per strategy
    wire: dict[str, Any], policy: Policy, tool: str, call: str, result: str, now: float
) -> None:
    """Whatever well-typed values a state holds, a guard takes it over, judges calls on it and summarizes it."""
    state = State.from_wire(wire)
    KeyInfo("k", state, 0.0).summary()
    take_over(state, policy, now)
    for _ in range(3):
        ticket, _ = begin(state, Call(tool, call, side_effect=True), policy, policy, now)
        if ticket is not None:
            finish(state, ticket, Outcome(result), policy, now)
    ticket, _ = begin(state, Call(tool, call), policy, policy, now)
    if ticket is not None:
        abandon(state, ticket, policy, now)
    KeyInfo("k", state, 0.0).summary()
    assert State.from_wire(state.wire()) == state, "a state the detector moved on reads back"


def test_an_error_count_of_an_earlier_version_reads_back_as_a_run() -> None:
    """Three fields ([tool, error, count]) were all a record held: the count was a run of failures in a row."""
    state = State.from_wire({"v": FORMAT, "h": [], "r": [0], "e": [["sql", "k" * 16, 4]]})
    assert [(e.count, e.run) for e in state.errors] == [(4, 4)]
    assert State.from_wire(state.wire()) == state


def test_a_record_without_runs_taken_over_still_reads_back() -> None:
    """Eight calls remembered, no runs, a batch left in flight: the guard taking it over keeps it readable."""
    entry = ["t", "a" * 16, "a" * 16, 0]
    batch = [0, 0, 0, 0.0, {}, {}, entry, 0.0, 0, {}]
    state = State.from_wire({"v": FORMAT, "h": [entry] * 8, "r": [], "B": [batch]})
    take_over(state, Policy(), 0.0)
    assert State.from_wire(state.wire()) == state


def test_every_write_reads_back_as_the_state_it_was_written_from() -> None:
    """The history's entries keep their wire form from one write to the next, and it stays theirs: a batch's
    last entry, written while the batch is open and made patient as it joins the history, reads back so."""
    policy = Policy(cycle_max_period=4)
    state = State()
    for step in range(20):
        now = step * 10.0
        waiting, _ = begin(state, Call("sleep", f"{step % 2:016x}", waits=True), policy, policy, now)
        reading, _ = begin(state, Call("read", f"{step % 3 + 8:016x}"), policy, policy, now)
        assert waiting is not None
        assert reading is not None
        finish(state, reading, Outcome(f"{step % 4:016x}"), policy, now + 1.0)
        assert read_state(state.dumps()) == state, f"step {step}: the read ended, the wait goes on"
        listing, _ = begin(state, Call("list", "f" * 16), policy, policy, now + 2.0)
        assert state.history[-1].held, "the read joined the history as a patient repeat: its batch began waiting"
        assert read_state(state.dumps()) == state, f"step {step}: the read joined the history"
        finish(state, waiting, Outcome("a" * 16), policy, now + 3.0)
        if listing is not None:
            finish(state, listing, Outcome("b" * 16), policy, now + 3.0)
        assert read_state(state.dumps()) == state, f"step {step}"


def test_a_full_window_folding_several_members_of_a_batch_at_once_reads_back() -> None:
    """64 calls remembered, three members of a batch completed, a next call folding them: still 64 tokens."""
    policy = Policy(recurring_window=64)
    state = State()
    for i in range(70):
        ticket, _ = begin(state, Call("read", f"{i:016x}"), policy, policy, float(i))
        assert ticket is not None
        finish(state, ticket, Outcome(f"{i + 1000:016x}"), policy, i + 0.5)
    tickets = [begin(state, Call("read", f"{i + 5000:016x}"), policy, policy, 70.0)[0] for i in range(4)]
    for number, ticket in enumerate(tickets[:3]):
        assert ticket is not None
        finish(state, ticket, Outcome(f"{number + 9000:016x}"), policy, 70.5)
    begin(state, Call("read", f"{7777:016x}"), policy, policy, 71.0)
    assert State.from_wire(state.wire()) == state
