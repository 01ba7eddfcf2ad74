"""The loop families beyond identical calls, the modes, scrubbing and the state as a value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.core import Action, Family, LoopDetector, Mode, Policy, ScrubRules, State, StateFormatError, Verdict
from mcp_loop_guard.core.detector import MARK_TTL_SECONDS, take_over
from tests.unit.timed import ABORT, ALLOW, BLOCK, WARN, text


class Agent:
    """Drives a detector call by call; counts what reached the upstream."""

    def __init__(self, policy: Policy | None = None, state: State | None = None) -> None:
        self.policy = policy or Policy()
        self.detector = LoopDetector(self.policy, state=state)
        self.reached = 0
        self.now = 0.0

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        result: Mapping[str, Any] | None = None,
        *,
        side_effect: bool = False,
        annotations: dict[str, Any] | None = None,
    ) -> Verdict:
        """One sequential call, one second after the previous one; ``side_effect`` annotates it destructive."""
        self.now += 1.0
        if side_effect:
            annotations = {"destructiveHint": True}
        ticket, verdict = self.detector.begin(tool, arguments, self.now, annotations=annotations)
        if ticket is None:
            return verdict
        self.reached += 1
        return self.detector.finish(ticket, result if result is not None else text(f"{tool} done"), self.now)


def cycle(agent: Agent, steps: Sequence[tuple[str, dict[str, Any], dict[str, Any]]], calls: int) -> list[Verdict]:
    """``calls`` calls going round ``steps`` (tool, arguments, result) in order."""
    return [agent.call(*steps[i % len(steps)]) for i in range(calls)]


READ = ("read_file", {"path": "a.txt"}, text("hello"))
WRITE = ("write_file", {"path": "a.txt", "content": "hello"}, text("wrote 5 bytes"))
LIST = ("list_dir", {"path": "."}, text("a.txt"))
STAT = ("stat", {"path": "a.txt"}, text("5 bytes"))


def first(verdicts: Sequence[Verdict], action: Action) -> int:
    """1-based number of the first call with ``action``."""
    return next(i + 1 for i, v in enumerate(verdicts) if v.action is action)


def test_a_two_step_cycle_is_warned_at_its_fifth_call_and_refused_at_its_ninth() -> None:
    """read, write, read, write...: the 3rd occurrence of a position warns, the 5th is refused."""
    agent = Agent()
    verdicts = cycle(agent, [READ, WRITE], 12)
    assert first(verdicts, WARN) == 5
    assert first(verdicts, BLOCK) == 9
    refusal = verdicts[8]
    assert refusal.family is Family.CYCLE
    assert refusal.reason is not None
    assert "2-step cycle" in refusal.reason
    assert "`read_file` -> `write_file`" in refusal.reason
    assert "hello" not in refusal.reason  # never echoes argument values
    warning = verdicts[4].reason or ""
    assert "2-step cycle" in warning
    assert "Break the cycle" in warning


def test_three_and_four_step_cycles_are_refused_at_calls_13_and_17() -> None:
    """The same ladder per cycle position: period 3 refused at call 13, period 4 at call 17."""
    three = cycle(Agent(), [READ, WRITE, LIST], 16)
    four = cycle(Agent(), [READ, WRITE, LIST, STAT], 20)
    assert first(three, BLOCK) == 13
    assert first(four, BLOCK) == 17
    assert "3-step cycle" in (three[12].reason or "")
    assert "4-step cycle" in (four[16].reason or "")


def test_a_cycle_that_makes_progress_is_not_a_loop() -> None:
    """Test-edit-test with a different test output each round never repeats a cycle."""
    agent = Agent()
    verdicts = [
        agent.call("run_tests", {}, text(f"{10 - i} failing")) if i % 2 == 0 else agent.call("edit", {"n": i})
        for i in range(30)
    ]
    assert {v.action for v in verdicts} == {ALLOW}


def test_one_call_alternating_between_two_results_is_polling_not_a_cycle() -> None:
    """Same arguments, results flipping A/B/A/B: polling, never judged a cycle."""
    agent = Agent()
    verdicts = [agent.call("status", {}, text("up" if i % 2 else "down")) for i in range(20)]
    assert {v.action for v in verdicts} == {ALLOW}


def test_cycle_detection_can_be_switched_off() -> None:
    """cycle_max_period=1 and no recurring family leave only identical calls."""
    off = Policy(cycle_max_period=1, recurring_warn_threshold=0, recurring_block_threshold=0)
    verdicts = cycle(Agent(off), [READ, WRITE], 20)
    assert {v.action for v in verdicts} == {ALLOW}


def test_without_cycle_detection_a_cycle_still_recurs() -> None:
    """cycle_max_period=1: each step of an A-B cycle comes back unchanged, so the recurring family refuses it."""
    verdicts = cycle(Agent(Policy(cycle_max_period=1)), [READ, WRITE], 20)
    refused = next(v for v in verdicts if v.action is BLOCK)
    assert refused.family is Family.RECURRING
    assert verdicts.index(refused) == 9, "the 5th write: reads count from the first write, which may change them"


def test_the_same_error_with_tweaked_arguments_is_warned_at_3_and_refused_at_8() -> None:
    """run("npm test"), run("npm  test"), run("npm test --force")... all EACCES."""
    agent = Agent()
    denied = text("EACCES: permission denied, open '/usr/lib/node_modules'", error=True)
    tweaks = ["npm test", "npm run test", "npm test --force", "sudo npm test", "npm t", "npx npm test", "npm test -s"]
    commands = [*tweaks, "npm test --verbose", "npm test --silent", "npm test --ci"]
    verdicts = [agent.call("run", {"cmd": command}, denied) for command in commands]
    assert [v.action for v in verdicts[:7]] == [ALLOW, ALLOW, WARN, WARN, WARN, WARN, WARN]
    assert verdicts[2].family is Family.SAME_ERROR
    assert "failed 3 times" in (verdicts[2].reason or "")
    assert verdicts[7].action is BLOCK
    assert verdicts[7].family is Family.SAME_ERROR
    assert agent.reached == 7
    assert "npm" not in (verdicts[7].reason or "")


def test_another_tool_or_a_changed_result_lifts_the_same_error_refusal() -> None:
    """Refused at 8 while retried right away; a look with another tool earns one more (warned) try, and the
    same error right after it is refused again; a write clears the streak; a different error starts over."""
    agent = Agent()
    denied = text("EACCES", error=True)
    for i in range(7):
        agent.call("run", {"i": i}, denied)
    assert agent.call("run", {"i": 99}, denied).action is BLOCK
    assert agent.call("whoami", {}, text("me")).action is ALLOW
    assert agent.call("run", {"i": 100}, denied).action is WARN
    assert agent.call("run", {"i": 101}, denied).action is BLOCK
    assert agent.call("chmod_file", {"path": "/usr/lib"}, text("mode changed")).action is ALLOW
    assert agent.call("run", {"i": 102}, denied).action is ALLOW
    fresh = Agent()
    for i in range(6):
        fresh.call("run", {"i": i}, denied)
    assert fresh.call("run", {"i": 6}, text("ENOENT", error=True)).action is ALLOW
    assert fresh.call("run", {"i": 7}, text("ENOENT", error=True)).action is ALLOW  # a new error: 2 so far


def test_same_error_is_off_when_errors_are_ignored() -> None:
    """ignore_errors makes errors invisible, so the same-error family never fires."""
    agent = Agent(Policy(ignore_errors=True))
    verdicts = [agent.call("run", {"i": i}, text("EACCES", error=True)) for i in range(12)]
    assert {v.action for v in verdicts} == {ALLOW}


def test_a_jsonrpc_error_counts_like_an_error_result() -> None:
    """The same JSON-RPC error for every argument is the same failure."""
    detector = LoopDetector(Policy())
    actions = []
    for i in range(9):
        ticket, verdict = detector.begin("fetch", {"url": f"https://x/{i}"}, float(i))
        actions.append(verdict.action if ticket is None else detector.finish_error(ticket, -32000, "401", i).action)
    assert actions[2] is WARN
    assert actions[7] is BLOCK


def test_rotating_arguments_with_the_same_answer_warn_at_the_fourth_and_are_never_refused() -> None:
    """search("deploy docs"), search("deployment docs")... all "No results"."""
    agent = Agent()
    queries = ["deploy docs", "deployment docs", "docs deploy", "how to deploy", "deploy guide", "deploying"]
    verdicts = [agent.call("search", {"q": q}, text("No results")) for q in queries * 3]
    assert first(verdicts, WARN) == 4
    assert verdicts[3].family is Family.SAME_RESULT
    assert BLOCK not in {v.action for v in verdicts}
    assert agent.reached == 18


def test_same_result_refusal_when_configured() -> None:
    """same_result_block_threshold turns the warning into a refusal at that count."""
    agent = Agent(Policy(same_result_block_threshold=6))
    verdicts = [agent.call("search", {"q": f"q{i}"}, text("No results")) for i in range(8)]
    assert first(verdicts, BLOCK) == 6


def test_identical_arguments_do_not_count_as_rotating_ones() -> None:
    """Four identical calls then a fifth query with the same answer: two argument sets, no same-result warning."""
    agent = Agent()
    for _ in range(4):
        agent.call("search", {"q": "a"}, text("No results"))
    verdict = agent.call("search", {"q": "b"}, text("No results"))
    assert verdict.family is not Family.SAME_RESULT


def burst(detector: LoopDetector, count: int, tool: str = "fetch", arguments: Any = None) -> list[Verdict]:
    """``count`` identical calls begun together, then finished in order; the refused ones stay refused."""
    begun = [detector.begin(tool, arguments or {"url": "https://example.com"}, 0.0) for _ in range(count)]
    verdicts = []
    for ticket, verdict in begun:
        verdicts.append(verdict if ticket is None else detector.finish(ticket, text("page"), 0.0))
    return verdicts


def test_a_twenty_call_burst_reaches_the_server_four_times() -> None:
    """One response asking for the same call 20 times: 3rd and 4th warned, 5th and later refused."""
    detector = LoopDetector(Policy(abort_threshold=100))
    verdicts = burst(detector, 20)
    assert [v.action for v in verdicts[:5]] == [ALLOW, ALLOW, WARN, WARN, BLOCK]
    assert sum(v.action is not BLOCK for v in verdicts) == 4
    assert {v.family for v in verdicts[4:]} == {Family.BURST}


def test_a_sixty_call_burst_aborts_after_three_refusals() -> None:
    """The refusals of a burst count toward the abort threshold like any other."""
    verdicts = burst(LoopDetector(Policy()), 60)
    assert [v.action for v in verdicts[4:7]] == [BLOCK, BLOCK, ABORT]


def test_a_batch_of_distinct_calls_is_untouched() -> None:
    """Twenty different reads at once: all allowed, none warned."""
    detector = LoopDetector(Policy())
    begun = [detector.begin("read_file", {"path": f"f{i}"}, 0.0) for i in range(20)]
    verdicts = [detector.finish(t, text(f"file {i}"), 0.0) for i, (t, _) in enumerate(begun) if t is not None]
    assert len(verdicts) == 20
    assert {v.action for v in verdicts} == {ALLOW}


def test_bursts_can_be_switched_off() -> None:
    """burst_detection=False: copies in one batch are judged against the state before it."""
    verdicts = burst(LoopDetector(Policy(burst_detection=False)), 20)
    assert {v.action for v in verdicts} == {ALLOW}


def test_a_destructive_call_repeated_is_warned_at_the_second_and_refused_at_the_third() -> None:
    """send_email with identical arguments: new message ids each time, still the same harm."""
    agent = Agent()
    verdicts = [
        agent.call("send_email", {"to": "a@example.com", "body": "hi"}, text(f"sent id-{i}"), side_effect=True)
        for i in range(4)
    ]
    assert [v.action for v in verdicts] == [ALLOW, WARN, BLOCK, BLOCK]
    assert verdicts[1].family is Family.SIDE_EFFECT
    assert verdicts[2].family is Family.SIDE_EFFECT
    assert "a@example.com" not in (verdicts[2].reason or "")
    assert agent.reached == 2


def test_side_effects_count_even_with_other_calls_in_between() -> None:
    """create_issue, list_issues, create_issue (same arguments): the repeat is still the harm."""
    agent = Agent()
    args = {"title": "Crash on start"}
    agent.call("create_issue", args, text("#1"), side_effect=True)
    agent.call("list_issues", {}, text("#1"), annotations={"readOnlyHint": True})
    assert agent.call("create_issue", args, text("#2"), side_effect=True).action is WARN


def test_a_repeated_action_after_another_change_is_not_a_side_effect_loop() -> None:
    """run tests, edit, run tests, edit...: the repeat follows a change, so it is meant."""
    agent = Agent()
    for i in range(5):
        verdict = agent.call("run", {"cmd": "pytest"}, text(f"{4 - i} failing"), side_effect=True)
        assert verdict.action is ALLOW
        agent.call("edit_file", {"n": i}, text("edited"), side_effect=True)


def test_side_effects_are_not_judged_without_trusted_annotations() -> None:
    """trust_annotations=False: a destructive tool is judged like any other."""
    agent = Agent(Policy(trust_annotations=False))
    verdicts = [agent.call("send_email", {"to": "a"}, text(f"sent {i}"), side_effect=True) for i in range(5)]
    assert {v.action for v in verdicts} == {ALLOW}


def test_a_new_request_window_forgets_side_effects() -> None:
    """After the idle reset the same email may be sent again (a new request from the user)."""
    agent = Agent()
    agent.call("send_email", {"to": "a"}, text("sent 1"), side_effect=True)
    agent.now += 500
    assert agent.call("send_email", {"to": "a"}, text("sent 2"), side_effect=True).action is ALLOW


STATUS = [{"type": "text", "text": '{"status": "pending", "fetched_at": "2026-12-01T10:00:0%d.123Z"}'}]


def volatile(i: int) -> dict[str, Any]:
    """A status that never changes but carries a fresh timestamp."""
    return {"content": [{"type": "text", "text": STATUS[0]["text"] % (i % 10)}]}


def test_volatile_results_pass_unless_scrubbing_is_on() -> None:
    """Fresh timestamps make every result new; LOOP_GUARD_SCRUB=timestamps makes them the same."""
    plain = Agent()
    assert {plain.call("status", {"job": 1}, volatile(i)).action for i in range(10)} == {ALLOW}
    scrubbed = Agent(Policy(scrub=ScrubRules(presets=("timestamps",))))
    verdicts = [scrubbed.call("status", {"job": 1}, volatile(i)) for i in range(6)]
    assert [v.action for v in verdicts] == [ALLOW, ALLOW, WARN, WARN, BLOCK, BLOCK]


def test_scrubbing_by_key_drops_a_field_from_json_text_and_structured_content() -> None:
    """A key named in the rules is dropped at any depth, in structuredContent and in JSON text."""
    rules = ScrubRules(keys=("fetched_at", "$.meta.request_id"))
    one = {
        "content": [{"type": "text", "text": '{"a": 1, "fetched_at": "x"}'}],
        "structuredContent": {"a": 1, "meta": {"request_id": "r1", "region": "eu"}},
    }
    two = {
        "content": [{"type": "text", "text": '{"fetched_at": "y", "a": 1}'}],
        "structuredContent": {"a": 1, "meta": {"request_id": "r2", "region": "eu"}},
    }
    assert rules.apply(one) == rules.apply(two)
    other = {**two, "structuredContent": {"a": 1, "meta": {"request_id": "r2", "region": "us"}}}
    assert rules.apply(one) != rules.apply(other)
    assert one["structuredContent"]["meta"]["request_id"] == "r1"  # the input is untouched


def test_a_clock_read_repeatedly_is_polling_even_with_scrubbing_off() -> None:
    """get_current_time every second: every answer differs, nothing is judged."""
    agent = Agent()
    verdicts = [agent.call("get_current_time", {"tz": "UTC"}, text(f"10:00:{i:02d}")) for i in range(40)]
    assert {v.action for v in verdicts} == {ALLOW}


def test_warn_mode_never_refuses_but_says_so() -> None:
    """mode=warn: the 5th identical call is run, with a warning that it should not have been."""
    agent = Agent(Policy(mode=Mode.WARN))
    verdicts = [agent.call(*READ) for _ in range(8)]
    assert [v.action for v in verdicts] == [ALLOW, ALLOW, WARN, WARN, WARN, WARN, WARN, WARN]
    assert agent.reached == 8
    assert "should not have been" in (verdicts[4].reason or "")
    assert agent.detector.blocks == 0


def test_shadow_mode_changes_nothing_the_model_sees_and_records_what_enforce_would_do() -> None:
    """mode=shadow: every call ALLOW with no text for the model; shadow holds warn, block, abort."""
    agent = Agent(Policy(mode=Mode.SHADOW))
    verdicts = [agent.call(*READ) for _ in range(8)]
    assert {v.action for v in verdicts} == {ALLOW}
    assert [v.shadow for v in verdicts] == [ALLOW, ALLOW, WARN, WARN, BLOCK, BLOCK, ABORT, ABORT]
    assert [v.judged for v in verdicts][4] is BLOCK
    assert agent.reached == 8


def test_the_state_round_trips_through_its_serialized_form() -> None:
    """A state written and read back judges the next calls exactly as the original."""
    agent = Agent()
    cycle(agent, [READ, WRITE], 4)
    agent.call("send_email", {"to": "a"}, text("sent"), side_effect=True)
    agent.call("run", {"i": 1}, text("EACCES", error=True))
    copy = State.loads(agent.detector.state.dumps())
    assert copy == agent.detector.state
    twin = Agent(state=copy)
    twin.now = agent.now
    for step in [READ, WRITE, READ, WRITE, READ]:
        assert twin.call(*step) == agent.call(*step)


def test_a_serialized_state_stays_under_two_kilobytes_however_long_the_history() -> None:
    """The stored value is bounded: after 10 or 10,000 calls of every kind, under 2 KB (the last 8 calls for
    cycles, 20 short tokens for recurring calls, the agent's rhythm)."""

    def drive(calls: int) -> int:
        agent = Agent(Policy(abort_threshold=1_000_000))
        for i in range(calls):
            agent.call(f"tool_{i % 5:02d}_with_a_realistic_name", {"i": i % 13}, text(f"r{i % 7}"))
            if i % 50 == 0:
                burst(agent.detector, 8, tool="fetch_page")
                agent.call("send_email", {"to": f"user{i % 11}@example.com"}, text("ok"), side_effect=True)
        return len(agent.detector.state.dumps().encode())

    small, big = drive(10), drive(10_000)
    assert big < 2048
    assert small < 2048


@given(st.lists(st.sampled_from([READ, WRITE, LIST, STAT]), max_size=40))
def test_folding_through_a_store_changes_no_verdict(steps: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    """Writing and reading the state between every two calls (as a store does) gives the same verdicts."""
    memory, stored = Agent(), Agent()
    for step in steps:
        expected = memory.call(*step)
        stored.detector = LoopDetector(stored.policy, state=State.loads(stored.detector.state.dumps()))
        assert stored.call(*step) == expected


def test_a_corrupt_state_is_reported_not_guessed() -> None:
    """Text that is not a state of this version raises StateFormatError."""
    for junk in ("", "[]", '{"v": 99}', '{"v": 1, "h": 3}'):
        with pytest.raises(StateFormatError):
            State.loads(junk)


def test_taking_over_from_a_dead_guard_drops_its_calls_in_flight() -> None:
    """Calls begun by a process that died never end; the next guard closes their batch."""
    detector = LoopDetector(Policy())
    for _ in range(2):
        ticket, _ = detector.begin(*READ[:2], 0.0)
        assert ticket is not None
        detector.finish(ticket, READ[2], 0.0)
    detector.begin(*READ[:2], 1.0)  # the process dies here
    take_over(detector.state, Policy(), 2.0)
    assert detector.state.in_flight == 0
    ticket, _ = detector.begin(*READ[:2], 3.0)
    assert ticket is not None
    assert detector.finish(ticket, READ[2], 3.0).action is WARN


def test_marks_of_calls_that_never_end_expire() -> None:
    """A batch untouched for MARK_TTL_SECONDS is closed, so a lost call cannot hold a burst open forever."""
    detector = LoopDetector(Policy())
    detector.begin("fetch", {"u": 1}, 0.0)
    later = MARK_TTL_SECONDS + 1
    for _ in range(4):
        ticket, verdict = detector.begin("fetch", {"u": 1}, later)
        assert verdict.action is not BLOCK
        assert ticket is not None
        detector.finish(ticket, text("page"), later)
    assert detector.state.in_flight == 0
