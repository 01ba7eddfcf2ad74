"""The detector's rules, driven the way the proxy drives it, with time passed in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from benchmarks.detector_memory import graph_size
from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.core import Action, Family, LoopDetector, Policy, Verdict, wording

ARGS: Mapping[str, Any] = MappingProxyType({"path": "/etc/hosts"})


def text(value: str, *, error: bool = False) -> dict[str, Any]:
    """A tools/call result in wire form with one text item."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": value}]}
    if error:
        result["isError"] = True
    return result


SAME = text("127.0.0.1 localhost")


class Session:
    """One downstream session: forwards allowed calls to a fake upstream that counts them."""

    def __init__(self, policy: Policy | None = None, policy_for: Callable[[str], Policy] | None = None) -> None:
        self.detector = LoopDetector(policy or Policy(), policy_for)
        self.reached = 0
        self.now = 0.0

    def call(
        self,
        tool: str = "read_file",
        arguments: Mapping[str, Any] | None = ARGS,
        result: Mapping[str, Any] = SAME,
        *,
        at: float | None = None,
    ) -> Verdict:
        """One call from arrival to answer; the verdict the model's answer depends on."""
        if at is not None:
            self.now = at
        ticket, verdict = self.detector.begin(tool, arguments, self.now)
        if verdict.action >= Action.BLOCK:
            assert ticket is None
            return verdict
        self.reached += 1
        if ticket is None:
            return verdict
        return self.detector.finish(ticket, result, self.now)

    def actions(self, count: int, **kwargs: Any) -> list[Action]:
        """The actions of ``count`` identical calls."""
        return [self.call(**kwargs).action for _ in range(count)]


ALLOW, WARN, BLOCK, ABORT = Action.ALLOW, Action.WARN, Action.BLOCK, Action.ABORT


def test_third_and_fourth_identical_results_warn() -> None:
    """With defaults the 3rd and 4th identical results warn, saying when refusals start."""
    session = Session()
    verdicts = [session.call() for _ in range(4)]
    assert [v.action for v in verdicts] == [ALLOW, ALLOW, WARN, WARN]
    assert [v.streak for v in verdicts] == [1, 2, 3, 4]
    third, fourth = verdicts[2].reason, verdicts[3].reason
    assert third is not None
    assert fourth is not None
    assert "`read_file`" in third
    assert "3 times" in third
    assert "refused from call #5" in third
    assert "4 times" in fourth
    assert "next identical call will be refused" in fourth
    assert "final answer" in fourth


def test_fifth_identical_call_is_refused_before_the_upstream() -> None:
    """Four identical calls are allowed; the 5th is refused by begin() and never forwarded."""
    session = Session()
    session.actions(4)
    refused = session.call()
    assert refused.action is BLOCK
    assert session.reached == 4
    assert refused.streak == 5
    assert refused.reason is not None
    assert "`read_file`" in refused.reason
    assert "#5" in refused.reason
    assert "final answer" in refused.reason


def test_sixth_identical_call_is_refused_again() -> None:
    """A block does not reset the streak: the identical retry is refused again."""
    session = Session()
    session.actions(5)
    again = session.call()
    assert again.action is BLOCK
    assert again.streak == 6
    assert again.reason is not None
    assert "#6" in again.reason
    assert session.reached == 4
    assert session.detector.blocks == 2


def test_polling_with_changing_results_is_never_judged_a_loop() -> None:
    """Same arguments but a new result each time: 100 calls, all ALLOW with streak 1."""
    session = Session()
    verdicts = [session.call(result=text(f"status: {i}")) for i in range(100)]
    assert {v.action for v in verdicts} == {ALLOW}
    assert {v.streak for v in verdicts} == {1}


def test_different_arguments_start_a_new_streak() -> None:
    """Other arguments in between reset the identical streak (with the recurring family off, the old call is
    allowed again)."""
    session = Session(Policy(recurring_warn_threshold=0, recurring_block_threshold=0))
    session.actions(4)
    assert session.call(arguments={"path": "/etc/passwd"}).streak == 1
    again = session.call()
    assert again.action is ALLOW
    assert again.streak == 1


def test_the_same_call_coming_back_after_another_one_is_refused_as_recurring() -> None:
    """A 5th unchanged answer among the recent calls is refused, whatever came between (no write, no wait)."""
    session = Session()
    session.actions(4)
    assert session.call(arguments={"path": "/etc/passwd"}).streak == 1
    again = session.call()
    assert again.action is BLOCK
    assert again.family is Family.RECURRING
    assert again.streak == 5
    assert "/etc/hosts" not in (again.reason or "")


def test_a_different_tool_starts_a_new_streak() -> None:
    """Another tool with the same arguments and result breaks the identical streak."""
    session = Session(Policy(recurring_warn_threshold=0, recurring_block_threshold=0))
    session.actions(4)
    assert session.call(tool="cat").streak == 1
    assert session.call().streak == 1


def test_a_changed_result_starts_a_new_streak() -> None:
    """Same call, new result: streak 1, and it counts up from the new result."""
    session = Session()
    session.actions(3)
    assert session.call(result=text("changed")).streak == 1
    assert session.call(result=text("changed")).streak == 2


def test_key_order_does_not_make_a_new_call() -> None:
    """Arguments differing only in key order are the same call."""
    session = Session()
    orders = [{"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"d": 3, "c": 2}, "a": 1}]
    actions = [session.call(arguments=orders[i % 2]).action for i in range(5)]
    assert actions == [ALLOW, ALLOW, WARN, WARN, BLOCK]


def test_missing_arguments_and_empty_arguments_are_the_same_call() -> None:
    """None and {} arguments continue one streak."""
    session = Session()
    streaks = [session.call(arguments=args).streak for args in (None, {}, None)]
    assert streaks == [1, 2, 3]


def test_different_screenshots_with_the_same_caption_are_not_a_loop() -> None:
    """Two images with different bytes and the same text are different results."""
    session = Session()
    shots = [
        {
            "content": [
                {"type": "text", "text": "Screenshot of the page"},
                {"type": "image", "mimeType": "image/png", "data": data},
            ]
        }
        for data in ("iVBORw0KGgoAAAA=", "iVBORw0KGgoBBBB=")
    ]
    verdicts = [session.call(tool="screenshot", arguments={}, result=shots[i % 2]) for i in range(10)]
    assert {v.action for v in verdicts} == {ALLOW}


def test_third_block_in_a_window_aborts() -> None:
    """With defaults the 1st and 2nd refusal are BLOCK, the 3rd is ABORT."""
    session = Session()
    actions = session.actions(7)
    assert actions == [ALLOW, ALLOW, WARN, WARN, BLOCK, BLOCK, ABORT]
    assert session.detector.blocks == 3
    aborted = session.call()
    assert aborted.action is ABORT
    assert aborted.reason is not None
    assert "closing this session" in aborted.reason


def test_blocks_of_different_loops_share_the_window() -> None:
    """Refusals count per request window, whichever loop caused them."""
    session = Session()
    assert session.actions(5)[-1] is BLOCK
    assert session.actions(5, tool="list_dir")[-1] is BLOCK
    assert session.call(tool="list_dir").action is ABORT


def test_idle_window_reset_clears_the_block_count_but_not_the_streak() -> None:
    """After reset_after_seconds with nothing going on, refusals start over; the refused call goes through once,
    and, its answer unchanged, the loop stays refused from the next call on."""
    session = Session(Policy(reset_after_seconds=120))
    session.actions(6)
    assert session.detector.blocks == 2
    later = session.call(at=session.now + 120)
    assert later.action is WARN
    assert "next identical call will be refused" in (later.reason or "")
    assert session.reached == 5
    again = session.call()
    assert again.action is BLOCK
    assert again.blocks == 1
    assert session.reached == 5


def test_a_call_let_through_in_a_new_window_whose_answer_changed_has_no_streak() -> None:
    """The world changed while the agent was away: the call let through answers anew, and its streak is gone."""
    session = Session(Policy(reset_after_seconds=120))
    session.actions(7)
    assert session.detector.blocks == 3
    changed = session.call(result=text("a new hosts file"), at=session.now + 300)
    assert changed.action is ALLOW
    assert changed.streak == 1
    assert session.call(result=text("a new hosts file")).action is ALLOW


def test_only_the_calls_refused_before_the_window_are_let_through_once() -> None:
    """A call refused in the earlier window goes through once; refused again at once, it aborts as before."""
    session = Session(Policy(reset_after_seconds=120, abort_threshold=2))
    session.actions(6)
    assert session.call(at=session.now + 500).action is WARN
    assert [session.call().action for _ in range(2)] == [BLOCK, ABORT]
    assert session.reached == 5


def test_window_stays_open_just_below_the_idle_time() -> None:
    """Refusals 119.9 s apart are in one window, so the third one aborts."""
    session = Session(Policy(reset_after_seconds=120))
    session.actions(4)
    assert [session.call(at=t).action for t in (0.0, 119.9, 239.8)] == [BLOCK, BLOCK, ABORT]


def test_a_call_in_flight_keeps_the_window_open() -> None:
    """A long call in flight is activity: the window stays open however long it runs."""
    session = Session()
    session.actions(6)
    ticket, _ = session.detector.begin("slow_query", {}, 1.0)
    assert ticket is not None
    assert session.call(at=400.0).action is ABORT


def test_idle_time_counts_from_the_end_of_the_last_call() -> None:
    """Once a long call ends, 120 idle seconds later a new window begins."""
    session = Session()
    session.actions(6)
    ticket, _ = session.detector.begin("slow_query", {}, 1.0)
    assert ticket is not None
    session.detector.abandon(ticket, 500.0)
    assert session.call(at=620.0).action is WARN, "a new window: the refused call goes through once"
    refused = session.call()
    assert refused.action is BLOCK
    assert refused.blocks == 1


def test_ignored_tools_are_invisible() -> None:
    """An ignored tool is never judged and does not break another tool's streak."""
    session = Session(Policy(ignore_tools=("todo",)))
    for _ in range(10):
        ticket, verdict = session.detector.begin("todo", {"op": "list"}, 0.0)
        assert ticket is None
        assert verdict.action is ALLOW
    session.actions(2)
    session.call(tool="todo")
    assert session.call().action is WARN


def test_ignore_patterns_are_shell_style_wildcards() -> None:
    """github__* ignores every github__ tool and nothing else."""
    session = Session(Policy(ignore_tools=("github__*", "todo")))
    assert set(session.actions(10, tool="github__search_issues")) == {ALLOW}
    assert session.detector.blocks == 0
    assert session.actions(5, tool="githubsearch")[-1] is BLOCK


def test_ignored_tools_do_not_form_batches() -> None:
    """An ignored call overlapping a visible one leaves the visible one judged alone."""
    session = Session(Policy(ignore_tools=("todo",)))
    session.actions(2)
    detector = session.detector
    ticket, _ = detector.begin("read_file", ARGS, 0.0)
    assert ticket is not None
    assert detector.begin("todo", {}, 0.0)[0] is None
    assert detector.finish(ticket, SAME, 0.0).action is WARN


def test_error_results_count_unless_errors_are_ignored() -> None:
    """Identical errors are a loop by default; with ignore_errors they are invisible."""
    failing = text("permission denied", error=True)
    assert Session().actions(5, result=failing)[-1] is BLOCK
    session = Session(Policy(ignore_errors=True))
    assert set(session.actions(10, result=failing)) == {ALLOW}
    assert session.call().streak == 1
    session.call(result=failing)
    assert session.call().streak == 2


def test_abandoned_calls_move_nothing_but_free_their_slot() -> None:
    """A call with no result neither advances nor breaks a streak, and ends its batch."""
    session = Session()
    detector = session.detector
    session.actions(2)
    ticket, _ = detector.begin("read_file", ARGS, 0.0)
    assert ticket is not None
    detector.abandon(ticket, 0.0)
    assert session.call().streak == 3


def test_a_stale_ticket_changes_nothing() -> None:
    """Finishing a ticket twice judges it only once."""
    detector = LoopDetector(Policy())
    ticket, _ = detector.begin("read_file", ARGS, 0.0)
    assert ticket is not None
    assert detector.finish(ticket, SAME, 0.0).streak == 1
    assert detector.finish(ticket, SAME, 0.0).streak == 0
    detector.abandon(ticket, 0.0)
    second, _ = detector.begin("read_file", ARGS, 0.0)
    assert second is not None
    assert detector.finish(second, SAME, 0.0).streak == 2


def test_use_terminate_aborts_at_the_first_block() -> None:
    """With use_terminate the first refusal already ends the session."""
    session = Session(Policy(use_terminate=True))
    actions = session.actions(5)
    assert actions == [ALLOW, ALLOW, WARN, WARN, ABORT]


def test_warn_not_below_block_disables_the_guard() -> None:
    """warn >= block is a misconfiguration: everything passes, without tickets."""
    for policy in (Policy(warn_threshold=5, block_threshold=5), Policy(warn_threshold=6)):
        assert policy.misconfiguration is not None
        session = Session(policy)
        assert set(session.actions(20)) == {ALLOW}
        assert session.reached == 20
        assert session.detector.begin("read_file", ARGS, 0.0)[0] is None


def test_disabled_guard_passes_everything() -> None:
    """enabled=False: 20 identical calls all reach the upstream."""
    session = Session(Policy(enabled=False))
    assert set(session.actions(20)) == {ALLOW}
    assert session.reached == 20


def test_warning_names_the_first_refused_call_number() -> None:
    """With warn 2 and block 6, early warnings point at call #6, the last one at the next."""
    session = Session(Policy(warn_threshold=2, block_threshold=6))
    reasons = [session.call().reason for _ in range(5)]
    assert reasons[0] is None
    assert all("refused from call #6" in (r or "") for r in reasons[1:4])
    assert "next identical call will be refused" in (reasons[4] or "")


def test_identical_calls_in_one_batch_count_like_a_streak() -> None:
    """Five identical calls in flight together: the 3rd and 4th are warned, the 5th refused at once."""
    detector = LoopDetector(Policy())
    begun = [detector.begin("read_file", ARGS, 0.0) for _ in range(5)]
    assert [verdict.action for _, verdict in begun] == [ALLOW, ALLOW, ALLOW, ALLOW, BLOCK]
    assert begun[4][1].family is Family.BURST
    assert begun[4][1].reason is not None
    assert "copy #5" in begun[4][1].reason
    verdicts = [detector.finish(t, SAME, 0.0) for t, _ in begun if t is not None]
    assert [v.action for v in verdicts] == [ALLOW, ALLOW, WARN, WARN]
    ticket, verdict = detector.begin("read_file", ARGS, 1.0)
    assert ticket is None
    assert verdict.action is BLOCK
    assert verdict.streak == 6  # the refused 5th copy counts too, as a refused sequential call does


def test_batch_calls_are_judged_with_the_streak_before_the_batch() -> None:
    """At streak 3, a batch of three identical calls: the first runs, the copies reach the block count."""
    session = Session()
    session.actions(3)
    detector = session.detector
    begun = [detector.begin("read_file", ARGS, 0.0) for _ in range(3)]
    assert [verdict.action for _, verdict in begun] == [ALLOW, BLOCK, BLOCK]
    assert [verdict.streak for _, verdict in begun] == [0, 5, 6]
    ticket = begun[0][0]
    assert ticket is not None
    assert detector.finish(ticket, SAME, 0.0).action is WARN
    assert session.call().action is ABORT


def test_distinct_calls_in_a_batch_do_not_advance_a_streak() -> None:
    """A batch of different calls adds only its last-completing result to the sequence."""
    session = Session(Policy(recurring_warn_threshold=0, recurring_block_threshold=0))
    session.actions(2)
    detector = session.detector
    tickets = [detector.begin("read_file", {"path": f"notes/{i}.txt"}, 0.0)[0] for i in range(6)]
    verdicts = [detector.finish(t, text(f"file {i}"), 0.0) for i, t in enumerate(tickets) if t is not None]
    assert {v.action for v in verdicts} == {ALLOW}
    assert session.call().streak == 1


def test_a_call_after_one_of_the_batch_completed_starts_a_new_batch() -> None:
    """With a long call in flight, identical calls made one after another still form a streak."""
    detector = LoopDetector(Policy())
    slow, _ = detector.begin("run_build", {}, 0.0)
    assert slow is not None
    actions = []
    for i in range(1, 8):
        ticket, verdict = detector.begin("read_file", ARGS, float(i))
        actions.append(verdict.action if ticket is None else detector.finish(ticket, SAME, float(i)).action)
    assert actions == [ALLOW, ALLOW, WARN, WARN, BLOCK, BLOCK, ABORT]


def test_batch_refuses_a_call_that_was_already_at_the_limit() -> None:
    """A call matching a streak at block - 1 is refused even inside a batch."""
    session = Session()
    session.actions(4)
    detector = session.detector
    other, _ = detector.begin("list_dir", {}, 0.0)
    ticket, verdict = detector.begin("read_file", ARGS, 0.0)
    assert ticket is None
    assert verdict.action is BLOCK
    assert other is not None
    assert detector.finish(other, text("a b c"), 0.0).streak == 1


def test_only_the_last_completing_result_of_a_batch_counts() -> None:
    """The batch's last-finishing result is compared with the state before it; others are not."""
    for order, expected in (((0, 1), 3), ((1, 0), 1)):
        session = Session()
        session.actions(2)
        detector = session.detector
        results = [text("changed"), SAME]
        tickets = [detector.begin("read_file", ARGS, 0.0)[0] for _ in results]
        verdicts = [detector.finish(tickets[i], results[i], 0.0) for i in order if tickets[i] is not None]
        assert verdicts[-1].streak == expected


def test_a_batch_ending_in_an_abandoned_call_settles_without_a_warning() -> None:
    """If the last call of a batch has no result, the last visible result still counts."""
    session = Session()
    session.actions(2)
    detector = session.detector
    first, _ = detector.begin("read_file", ARGS, 0.0)
    last, _ = detector.begin("search", {"q": "x"}, 0.0)
    assert first is not None
    assert last is not None
    assert detector.finish(first, SAME, 0.0).action is ALLOW
    detector.abandon(last, 0.0)
    assert session.call().streak == 4


def test_an_ignored_error_ending_a_batch_is_invisible() -> None:
    """With ignore_errors, a batch whose last result is an error settles on the visible one."""
    session = Session(Policy(ignore_errors=True))
    session.actions(2)
    detector = session.detector
    first, _ = detector.begin("read_file", ARGS, 0.0)
    last, _ = detector.begin("read_file", ARGS, 0.0)
    assert first is not None
    assert last is not None
    detector.finish(first, SAME, 0.0)
    assert detector.finish(last, text("boom", error=True), 0.0).family is Family.BURST
    assert session.call().streak == 4


def test_state_does_not_grow_with_the_number_of_calls() -> None:
    """The detector's object graph is as big after 10,000 calls as after 10."""

    def drive(calls: int) -> LoopDetector:
        session = Session()
        for i in range(calls):
            session.call(result=text(f"poll {i % 7}"), at=float(i))
            if i % 10 == 0:
                session.actions(6, tool="stuck")
        return session.detector

    small, big = graph_size(drive(60)), graph_size(drive(10_000))  # the benchmark's own measure, windows full
    assert big == small
    assert big < 6144


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([None, {"x": 1}])), max_size=60))
def test_results_that_all_differ_are_never_warned_or_blocked(calls: list[tuple[str, Any]]) -> None:
    """Whatever the tools and arguments, a session whose results all differ is never judged a loop."""
    session = Session()
    for i, (tool, arguments) in enumerate(calls):
        verdict = session.call(tool, arguments, text(f"result {i}"))
        assert verdict.action is ALLOW
        assert verdict.streak == 1


@given(
    warn=st.integers(1, 8),
    gap=st.integers(1, 8),
    abort=st.integers(1, 4),
    terminate=st.booleans(),
    extra=st.integers(0, 6),
)
def test_identical_calls_escalate_monotonically_to_a_block_at_the_threshold(
    warn: int, gap: int, abort: int, terminate: bool, extra: int
) -> None:
    """N identical calls: ALLOW, then WARN from warn, then a refusal exactly at call block."""
    block = warn + gap
    session = Session(
        Policy(warn_threshold=warn, block_threshold=block, abort_threshold=abort, use_terminate=terminate)
    )
    actions = session.actions(block + extra)
    assert actions == sorted(actions)
    first_refusal = next(i for i, a in enumerate(actions) if a >= BLOCK)
    assert first_refusal == block - 1
    assert actions[: warn - 1] == [ALLOW] * (warn - 1)
    assert actions[warn - 1 : block - 1] == [WARN] * (block - warn)
    assert session.reached == block - 1
    refusals = actions[block - 1 :]
    aborts_from = 0 if terminate else abort - 1
    assert refusals == [BLOCK if i < aborts_from else ABORT for i in range(len(refusals))]


def by_server(session: Policy, **servers: Policy) -> Callable[[str], Policy]:
    """policy_for over prefixed tool names: the server's policy, else the session's."""
    return lambda tool: servers.get(tool.partition("__")[0], session)


def test_each_server_blocks_at_its_own_threshold() -> None:
    """A server set to warn at 2 and block at 3 refuses its 3rd call; its neighbour keeps 3 and 5."""
    strict = Policy(warn_threshold=2, block_threshold=3)
    session = Session(Policy(), by_server(Policy(), git=strict))
    assert session.actions(3, tool="git__status") == [ALLOW, WARN, BLOCK]
    assert session.actions(5, tool="time__now") == [ALLOW, ALLOW, WARN, WARN, BLOCK]
    assert session.reached == 2 + 4
    assert session.detector.blocks == 2


def test_a_warning_names_the_servers_own_block_threshold() -> None:
    """The warning says when refusals start for this tool's server, not the session's default."""
    session = Session(Policy(), by_server(Policy(), git=Policy(warn_threshold=2, block_threshold=4)))
    session.call(tool="git__status")
    warning = session.call(tool="git__status")
    assert warning.action is WARN
    assert warning.reason is not None
    assert "refused from call #4" in warning.reason


def test_a_tool_ignored_on_one_server_only() -> None:
    """search is ignored on the docs server and still guarded on the web server."""
    session = Session(Policy(), by_server(Policy(), docs=Policy(ignore_tools=("docs__search",))))
    assert set(session.actions(10, tool="docs__search")) == {ALLOW}
    assert session.detector.blocks == 0
    assert session.actions(5, tool="web__search")[-1] is BLOCK


def test_a_call_to_another_servers_tool_breaks_the_streak() -> None:
    """Rule 1 holds across servers: a visible call elsewhere starts the streak over."""
    git = Policy(warn_threshold=2, block_threshold=3, recurring_block_threshold=0, recurring_warn_threshold=0)
    session = Session(Policy(), by_server(Policy(), git=git))
    session.actions(1, tool="git__status")
    session.call(tool="time__now")
    assert session.call(tool="git__status").streak == 1


def test_a_disabled_server_is_invisible_like_an_ignored_tool() -> None:
    """enabled=False for one server: its calls are never judged and do not break other streaks."""
    session = Session(Policy(), by_server(Policy(), raw=Policy(enabled=False)))
    session.actions(2, tool="git__status")
    assert set(session.actions(10, tool="raw__dump")) == {ALLOW}
    assert session.call(tool="git__status").action is WARN


def test_one_server_can_be_guarded_while_the_session_default_is_off() -> None:
    """A server policy with enabled=True is judged even when the session's is disabled."""
    off = Policy(enabled=False)
    session = Session(off, by_server(off, git=Policy()))
    assert set(session.actions(10, tool="time__now")) == {ALLOW}
    assert session.actions(5, tool="git__status")[-1] is BLOCK


def test_ignore_errors_follows_the_tools_server() -> None:
    """Identical errors are free on a server that ignores errors and counted on the others."""
    failing = text("not found", error=True)
    session = Session(Policy(), by_server(Policy(), web=Policy(ignore_errors=True)))
    assert set(session.actions(8, tool="web__fetch", result=failing)) == {ALLOW}
    assert session.actions(3, tool="git__show", result=failing)[-1] is WARN


def test_the_request_window_and_abort_count_stay_the_sessions() -> None:
    """A server's abort_threshold, use_terminate and window length are not used: the session's are."""
    server = Policy(warn_threshold=1, block_threshold=2, abort_threshold=1, use_terminate=True, reset_after_seconds=1)
    session = Session(Policy(reset_after_seconds=60), by_server(Policy(), git=server))
    assert session.actions(4, tool="git__status") == [WARN, BLOCK, BLOCK, ABORT]
    assert session.call(tool="git__status", at=30.0).action is ABORT
    assert session.call(tool="git__status", at=100.0).action is WARN, "a new window: let through once"
    assert session.call(tool="git__status", at=100.0).action is BLOCK


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        (Family.IDENTICAL, "Identical calls will be refused from call #6."),
        (Family.BURST, "Identical copies will be refused from call #6."),
        (Family.SAME_ERROR, "Calls to this tool will be refused from call #6."),
        (Family.CYCLE, "Repetitions of the cycle will be refused from call #6."),
    ],
)
def test_warnings_say_when_refusals_start_in_plain_plural(family: Family, expected: str) -> None:
    """A warning well before the block threshold names what will be refused, in a correct plural."""

    text = wording.warning(family, "search", 3, 6, ("a", "b"))
    assert expected in text
    assert ": Change" not in text
