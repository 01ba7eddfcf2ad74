"""Repeats with other calls between, long cycles, failures in batches, and acknowledgments of writes."""

from __future__ import annotations

import pytest

from mcp_loop_guard.core import Family, Policy, Verdict
from mcp_loop_guard.core.detector import outcome_of
from tests.unit.timed import ALLOW, BLOCK, WARN, Timed, actions, first, text

EDIT = ("edit_file", {"path": "app.py", "old": "retrun x", "new": "return x"}, text("old text not found", error=True))


def test_the_same_failing_edit_between_reads_of_other_files_is_refused_at_its_fifth_try() -> None:
    """edit (fails), read a, edit (fails), read b...: no cycle, no streak, but the same call recurring unchanged."""
    agent = Timed()
    verdicts = []
    for i in range(7):
        verdicts.append(agent.call(*EDIT))
        agent.call("read_file", {"path": f"other{i}.py"}, text(f"contents {i}"))
    assert actions(verdicts[:4]) == [ALLOW, ALLOW, WARN, WARN]
    assert verdicts[4].action is BLOCK
    assert verdicts[4].family is Family.RECURRING
    assert verdicts[2].family is Family.RECURRING


def test_an_identical_failing_booking_between_differently_worded_notes_is_refused() -> None:
    """book (fails), think (a new note), book (fails)...: the notes change nothing the booking depends on."""
    agent = Timed()
    full = text("Error: flight HAT030 is full on 2024-05-13")
    verdicts = []
    for i in range(6):
        verdicts.append(agent.call("book_reservation", {"flight": "HAT030", "date": "2024-05-13"}, full))
        agent.call("think", {"thought": f"maybe another try works ({i})"}, text(""))
    assert first(verdicts, BLOCK) == 5


def test_a_new_write_between_lets_the_repeat_run_again() -> None:
    """Tests run after each different edit, failing the same way: warned once the runs repeat, never refused."""
    agent = Timed()
    failing = text("FAILED test_total: expected 10, got 9", error=True)
    verdicts = []
    for i in range(8):
        agent.call("write_file", {"path": "total.py", "content": f"attempt {i}"}, text("Successfully wrote total.py"))
        verdicts.append(agent.call("run_tests", {}, failing))
    assert actions(verdicts[:3]) == [ALLOW, ALLOW, WARN]
    assert verdicts[2].family is Family.RECURRING
    assert BLOCK not in actions(verdicts)


def test_the_same_write_done_again_between_others_is_not_warned() -> None:
    """`mkdir exports` before every new file: a write repeated with its acknowledgment is no loop."""
    agent = Timed()
    verdicts = []
    for i in range(6):
        verdicts.append(agent.call("create_directory", {"path": "exports"}, text("Created exports")))
        agent.call("write_file", {"path": f"exports/f{i}.py", "content": str(i)}, text(f"Wrote exports/f{i}.py"))
    assert set(actions(verdicts)) == {ALLOW}


def test_a_wait_between_lets_the_repeat_run_again() -> None:
    """A status checked again after a wait is polling, not a recurring call."""
    agent = Timed()
    verdicts = []
    for _ in range(8):
        verdicts.append(agent.call("job_status", {"job": 1}, text("running")))
        agent.call("read_file", {"path": "notes.md"}, text("notes"))
        agent.call("wait", {"seconds": 20}, text("waited"))
    assert set(actions(verdicts)) == {ALLOW}


def test_the_window_forgets_calls_older_than_its_length() -> None:
    """Four occurrences spread over more than the window's calls are never refused as recurring."""
    agent = Timed(Policy(recurring_window=8))
    verdicts = []
    for round_ in range(6):
        verdicts.append(agent.call("git_status", {}, text("nothing to commit")))
        for i in range(8):
            agent.call("read_file", {"path": f"f{round_}-{i}"}, text(f"{round_} {i}"))
    assert set(actions(verdicts)) == {ALLOW}


@pytest.mark.parametrize("period", [5, 6, 7, 8])
def test_cycles_of_period_five_to_eight_are_refused_by_default(period: int) -> None:
    """A cycle of `period` different calls, the same answers each round: refused at its 5th round."""
    agent = Timed(Policy(recurring_warn_threshold=0, recurring_block_threshold=0))
    steps = [(f"step_{i}", {"i": i}, text(f"answer {i}")) for i in range(period)]
    verdicts = [agent.call(*steps[n % period]) for n in range(6 * period)]
    refused = first(verdicts, BLOCK)
    assert refused == 4 * period + 1
    assert verdicts[refused - 1].family is Family.CYCLE


def test_every_failure_of_a_batch_counts_toward_the_same_error() -> None:
    """Nine failures in three batches of three, one tool and one error: refused at the 8th, as in a row."""
    agent = Timed()
    denied = text("403 Forbidden", error=True)
    verdicts = []
    for batch in range(4):
        verdicts += agent.batch([("fetch", {"url": f"https://x.dev/{batch}/{i}"}, denied) for i in range(3)])
    assert first(verdicts, WARN) is not None
    refused = [v for v in verdicts if v.action is BLOCK]
    assert refused
    assert refused[0].family is Family.SAME_ERROR
    assert agent.reached <= 9


def test_the_same_error_between_other_calls_is_warned_but_one_look_elsewhere_earns_another_try() -> None:
    """Failures of one tool with reads between: warned from the 3rd; refused only when retried right away."""
    agent = Timed()
    denied = text("EACCES: permission denied", error=True)
    verdicts = []
    for i in range(9):
        verdicts.append(agent.call("run", {"cmd": f"npm test --attempt={i}"}, denied))
        agent.call("read_file", {"path": f"log{i}"}, text(f"log {i}"))
    assert verdicts[2].action is WARN
    assert verdicts[2].family is Family.SAME_ERROR
    assert BLOCK not in actions(verdicts)
    assert agent.call("run", {"cmd": "npm test --again"}, denied).action is WARN
    assert agent.call("run", {"cmd": "npm test --once-more"}, denied).action is BLOCK


def _alternating_queries(agent: Timed, rounds: int) -> list[Verdict]:
    """SELECT pet_type (unknown column), SELECT type (unknown column), pet_type again...: two wrong columns in turn."""
    verdicts = []
    for i in range(rounds):
        column = "type" if i % 3 == 2 else "pet_type"
        failed = text(f"Error executing query: Unknown column '{column}' in 'field list'", error=True)
        query = " ".join(("SELECT", column, "AVG(weight) FROM pets --", str(i)))
        verdicts.append(agent.call("sql", {"query": query}, failed))
    return verdicts


def test_the_same_error_through_another_failure_of_the_tool_still_counts_to_a_refusal() -> None:
    """A tool failing A, A, B, A, A, B...: the other failure ends A's run but not its count; A's 8th is refused."""
    verdicts = _alternating_queries(Timed(), 12)
    # A at calls 1, 2, 4, 5, 7, 8, 10, 11: the 8th A (call 11) is refused, never called 3 times in a row.
    assert first(verdicts, BLOCK) == 11
    assert verdicts[10].family is Family.SAME_ERROR


def test_the_same_error_through_other_failures_is_warned_before_its_refusal() -> None:
    """Never three in a row, so the warning comes two failures before the refusal: none comes unwarned."""
    verdicts = _alternating_queries(Timed(), 11)
    assert actions(verdicts[:7]) == [ALLOW] * 7
    assert verdicts[7].action is WARN  # the 6th A
    assert verdicts[7].family is Family.SAME_ERROR


def test_a_tool_failing_another_way_and_then_working_starts_every_count_over() -> None:
    """A, B, then a success: the tool works, no error of it is counted any more."""
    agent = Timed()
    _alternating_queries(agent, 7)
    agent.call("sql", {"query": "SELECT species, AVG(weight) FROM pets GROUP BY species"}, text("dog | 12.5"))
    assert set(actions(_alternating_queries(agent, 5))) == {ALLOW}


def test_a_text_that_says_it_failed_is_a_failure() -> None:
    """`Error: ...` from a server that sets no isError is judged as an error."""
    assert outcome_of(text("Error: flight HAT030 not available"), Policy()).error
    assert outcome_of(text("ERROR:\nParameter `old_str` is required"), Policy()).error
    assert outcome_of(text("Traceback (most recent call last):\n  File ..."), Policy()).error
    assert not outcome_of(text("Error handling in Python uses try/except."), Policy()).error
    assert not outcome_of(text("Errors: 0, warnings: 2"), Policy()).error


def test_a_shell_reporting_a_failure_is_a_failure() -> None:
    """bash's own complaint (`/bin/bash: line 1: x: command not found`) fails the call, whatever the exit
    status the server reported."""
    assert outcome_of(text("/bin/bash: line 1: weekly: command not found\n"), Policy()).error
    assert outcome_of(text("bash: -c: line 2: syntax error: unexpected end of file"), Policy()).error
    assert not outcome_of(text("bash is the shell; line 1 of the script reads the config"), Policy()).error


def test_the_same_error_lines_in_another_order_are_the_same_error() -> None:
    """A shell listing the same three failures in another order each run fails the same way."""
    policy = Policy()
    lines = [f"/bin/bash: line 1: {word}: command not found" for word in ("daily", "weekly", "yearly")]
    one = outcome_of(text("\n".join(lines)), policy)
    two = outcome_of(text("\n".join(reversed(lines))), policy)
    fewer = outcome_of(text("\n".join(lines[:2])), policy)
    assert one.key == two.key
    assert one.key != fewer.key


def test_an_empty_answer_of_a_failing_tool_does_not_clear_its_error_count() -> None:
    """`cmd1 || true` fails, `true` answers nothing, `cmd1 || :` fails...: the nothing shows no fix."""
    agent = Timed()
    missing = text("/bin/bash: line 1: command1: command not found")
    verdicts = []
    for i in range(3):
        verdicts.append(agent.call("bash", {"command": f"command1 || true # {i}"}, missing))
        agent.call("bash", {"command": f"true; true # {i}"}, text(""))
    assert verdicts[2].action is WARN
    assert verdicts[2].family is Family.SAME_ERROR


def test_a_failing_tool_that_answers_something_starts_its_error_count_over() -> None:
    """A success with content between the failures: the tool works, the count starts over."""
    agent = Timed()
    missing = text("/bin/bash: line 1: command1: command not found")
    verdicts = []
    for i in range(3):
        verdicts.append(agent.call("bash", {"command": f"command1 || true # {i}"}, missing))
        agent.call("bash", {"command": f"echo command{i}"}, text(f"command{i}"))
    assert set(actions(verdicts)) == {ALLOW}


def test_an_error_echoing_a_variant_or_an_id_is_the_same_error() -> None:
    """Failures that differ only in spacing or a fresh request id are one failure; different causes stay apart."""
    policy = Policy()
    one = outcome_of(text("No match for `a  b` (request 3f2a9c1e-77aa-4b1c-9d2e-0123456789ab)", error=True), policy)
    two = outcome_of(text("No match for `a b` (request 0c1d2e3f-0000-4b1c-9d2e-abcdefabcdef)", error=True), policy)
    other = outcome_of(text("No match for `c d` (request 0c1d2e3f-0000-4b1c-9d2e-abcdefabcdef)", error=True), policy)
    assert one.key == two.key
    assert one.key != other.key


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("execute_sql", {"sql": "INSERT INTO orders VALUES ({i}, 'x')"}),
        ("execute_sql", {"sql": "CREATE TABLE t{i} (id INTEGER)"}),
        ("execute_sql", {"sql": "ALTER TABLE orders ADD COLUMN c{i} TEXT"}),
        ("set_key", {"key": "k{i}", "value": "v"}),
        ("bash", {"command": "echo 'line {i}' >> notes.txt"}),
        ("bash", {"command": "sed -i 's/a{i}/b/' app.py"}),
        ("str_replace_editor", {"command": "str_replace", "path": "a.py", "old_str": "x{i}", "new_str": "y"}),
    ],
)
def test_different_writes_acknowledged_alike_are_not_the_same_result(tool: str, arguments: dict[str, str]) -> None:
    """Different writes answered `OK` (or nothing) on a server without annotations: no same-result warning."""
    agent = Timed()
    verdicts = [agent.call(tool, {k: v.format(i=i) for k, v in arguments.items()}, text("OK")) for i in range(8)]
    assert set(actions(verdicts)) == {ALLOW}


def test_different_reads_answered_alike_still_earn_the_same_result_warning() -> None:
    """Reworded searches all answered `No results`: warned from the 4th."""
    agent = Timed()
    verdicts = [agent.call("search_issues", {"q": f"crash on login v{i}"}, text("No results")) for i in range(5)]
    assert verdicts[3].action is WARN
    assert verdicts[3].family is Family.SAME_RESULT


def test_one_answer_to_reworded_queries_with_other_calls_between_is_warned() -> None:
    """The same rows for `!=`, `NOT LIKE`, `<>`, a failing query, then `!=` again: warned at the 4th answer
    among the recent calls, for three different queries."""
    agent = Timed()
    rows = text("[('Liliane Bettencourt',), ('Christy Walton',)]")
    queries = ["x != 'French'", "x NOT LIKE 'French'", "x <> 'French'"]
    verdicts = [agent.call("sql", {"query": f"SELECT name WHERE {q}"}, rows) for q in queries]
    agent.call("sql", {"query": "SELECT name FROM singers"}, text("Error: no table singers", error=True))
    verdicts.append(agent.call("sql", {"query": f"SELECT name WHERE {queries[0]}"}, rows))
    assert actions(verdicts) == [ALLOW, ALLOW, ALLOW, WARN]
    assert verdicts[3].family is Family.SAME_RESULT


def test_one_answer_between_new_findings_is_not_warned() -> None:
    """Back to the same results page between new products: every return follows something new."""
    agent = Timed()
    page = text("results: A, B, C, D")
    verdicts = []
    for i in range(6):
        verdicts.append(agent.call("search", {"q": f"lamp {i % 3}"}, page))
        agent.call("open", {"item": i}, text(f"product {i}: a lamp, {10 + i} dollars"))
    assert set(actions(verdicts)) == {ALLOW}


def test_a_call_asked_again_right_after_itself_counts_its_answers_before_the_news() -> None:
    """count (4), a new listing, count (4), count (4): warned at the third count, the news between
    notwithstanding, as the agent no longer browses but repeats itself."""
    agent = Timed()
    count = ("bash", {"command": "find . -name '*.py' | sort | uniq -c | wc -l"}, text("4"))
    verdicts = [agent.call(*count)]
    agent.call("bash", {"command": "find . -name '*.py' | sort | uniq -c"}, text("1 a.py\n1 b.py\n1 c.py\n1 d.py"))
    verdicts += [agent.call(*count), agent.call(*count)]
    assert actions(verdicts) == [ALLOW, ALLOW, WARN]
    assert verdicts[2].family is Family.RECURRING


def test_an_empty_structured_answer_says_nothing() -> None:
    """`{"content": ""}` beside an empty text tells nothing; `{"count": 0}` tells something."""
    empty = {"content": [{"type": "text", "text": ""}], "structuredContent": {"content": ""}}
    counted = {"content": [{"type": "text", "text": ""}], "structuredContent": {"count": 0}}
    assert outcome_of(empty, Policy()).says_nothing
    assert not outcome_of(counted, Policy()).says_nothing


def test_annotations_win_over_the_name() -> None:
    """`update_view` annotated read-only is a read: its alike answers to different arguments earn the warning."""
    agent = Timed()
    read_only = {"readOnlyHint": True}
    verdicts = [agent.call("update_view", {"id": i}, text("nothing to show"), annotations=read_only) for i in range(5)]
    assert verdicts[3].action is WARN
