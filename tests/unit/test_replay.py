"""`mcp-loop-guard replay`: traces in, verdicts out, with any settings; both trace forms agree."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_loop_guard.config import GuardConfig, StdioServer
from mcp_loop_guard.core import LoopDetector, Policy
from mcp_loop_guard.core.detector import call_of, outcome_of
from mcp_loop_guard.plan import plan
from mcp_loop_guard.replay import TraceError, judge_lines, judge_trace, read_trace, suggest_scrub
from mcp_loop_guard.settings import FileSettings, load_settings
from mcp_loop_guard.traces import respace
from tests.harness import guard_argv


def line(tool: str, arguments: dict[str, Any], text: str, **extra: Any) -> dict[str, Any]:
    """A trace line with a one-text result."""
    return {
        "session": "s1",
        "tool": tool,
        "arguments": arguments,
        "result": {"content": [{"type": "text", "text": text}]},
        **extra,
    }


def verdicts(lines: list[dict[str, Any]], **settings: Any) -> list[str]:
    """The verdict of each line under these settings."""
    stream = io.StringIO("".join(json.dumps(entry) + "\n" for entry in lines))
    decided = plan(GuardConfig(None, (), FileSettings({})), load_settings(FileSettings({}), **settings))
    return [item.verdict for item in judge_trace(list(read_trace(stream, "t.jsonl")), decided.policies)]


def test_a_loop_is_warned_refused_then_closed() -> None:
    """Identical calls: allow, allow, warn, warn, block, block, abort, then the session is closed."""
    assert verdicts([line("read", {"p": 1}, "same")] * 9) == [
        *["allow"] * 2,
        *["warn"] * 2,
        *["block"] * 2,
        "abort",
        "closed",
        "closed",
    ]


def test_settings_change_the_verdicts() -> None:
    """The same trace with a block threshold of 3."""
    assert verdicts([line("read", {"p": 1}, "same")] * 4, warn_threshold=2, block_threshold=3) == [
        "allow",
        "warn",
        "block",
        "block",
    ]


def test_a_batch_is_begun_together() -> None:
    """Lines sharing a batch value were in flight together: a burst of 6 reaches 4 times."""
    lines = [line("fetch", {"u": 1}, "page", batch=1) for _ in range(6)]
    assert verdicts(lines) == ["allow", "allow", "warn", "warn", "block", "block"]


def test_sessions_are_judged_apart() -> None:
    """Two sessions interleaved never add up."""
    lines = [{**line("read", {"p": 1}, "same"), "session": f"s{i % 2}"} for i in range(8)]
    assert "block" not in verdicts(lines)


def test_the_fingerprint_form_gives_the_same_verdicts_as_the_contents_form() -> None:
    """The event log writes fingerprints (call, outcome) unless contents are asked for; replay takes both."""
    contents = [line("read", {"p": i % 2}, f"r{i % 2}") for i in range(12)]
    hashed = [
        {
            "session": "s1",
            "tool": entry["tool"],
            "call": call_of(entry["tool"], entry["arguments"]).key,
            "outcome": outcome_of(entry["result"], load_settings().to_policy()).key,
            "isError": False,
        }
        for entry in contents
    ]
    assert verdicts(contents) == verdicts(hashed)
    assert "block" in verdicts(contents)


def test_a_refused_calls_recorded_result_is_not_seen() -> None:
    """After the refusal a new result would break the streak if it were seen; it is not, as live."""
    lines = [line("read", {"p": 1}, "same")] * 5 + [line("read", {"p": 1}, "other")] + [line("read", {"p": 1}, "same")]
    assert verdicts(lines)[4:] == ["block", "block", "abort"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json\n", "t.jsonl:1: not JSON"),
        ('{"tool": "x"}\n', 't.jsonl:1: "session" and "tool" are required strings'),
        ('{"session": "s", "tool": "x", "arguments": [1]}\n', 't.jsonl:1: "arguments" must be an object'),
        ('{"session": "s", "tool": "x"}\n{"session": "s", "tool": "x", "at": "soon"}\n', 't.jsonl:2: "at" must be'),
    ],
)
def test_an_unreadable_line_names_the_file_and_line(text: str, problem: str) -> None:
    """Each kind of bad line is an error naming file and line."""
    with pytest.raises(TraceError, match=problem):
        list(read_trace(io.StringIO(text), "t.jsonl"))


def test_replay_says_which_scrub_setting_would_catch_volatile_results() -> None:
    """Results differing only in a timestamp and a request id: timestamps and uuids are named."""
    lines = [
        line("status", {"job": 1}, f'{{"state": "pending", "at": "2026-12-01T10:00:0{i}Z", "id": "{u}"}}')
        for i, u in enumerate(["1b4e28ba-2fa1-11d2-883f-0016d3cca427", "6fa459ea-ee8a-3ca4-894e-db77e160355e"])
    ]
    parsed = list(read_trace(io.StringIO("".join(json.dumps(entry) + "\n" for entry in lines)), "t"))
    assert set(suggest_scrub(parsed)) == {"timestamps", "uuids"}


def test_the_command_prints_json_lines_and_exits_zero(tmp_path: Path) -> None:
    """`replay --json FILE`: one object per input line with line, session, tool, verdict, rule."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(line("read", {"p": 1}, "same")) + "\n" for _ in range(5)), encoding="utf-8")
    done = subprocess.run(
        [*guard_argv(), "replay", "--json", str(trace)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(text) for text in done.stdout.splitlines()]
    assert [row["verdict"] for row in rows] == ["allow", "allow", "warn", "warn", "block"]
    assert rows[4] == {"line": 5, "session": "s1", "tool": "read", "verdict": "block", "rule": "identical", "count": 5}


def test_the_command_refuses_an_unreadable_file_with_exit_2(tmp_path: Path) -> None:
    """A broken line stops replay with exit 2 and a message naming the file and line."""
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"session": "s", "tool": "x"}\n{oops\n', encoding="utf-8")
    done = subprocess.run([*guard_argv(), "replay", str(trace)], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert f"{trace}:2: not JSON" in done.stderr


def test_replay_reads_standard_input_with_other_settings() -> None:
    """`-` reads stdin; flags apply as for the guard."""
    text = "".join(json.dumps(line("read", {"p": 1}, "same")) + "\n" for _ in range(3))
    done = subprocess.run(
        [*guard_argv(), "replay", "--json", "--warn-threshold", "2", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [json.loads(row)["verdict"] for row in done.stdout.splitlines()] == ["allow", "warn", "warn"]


def test_an_event_log_is_replayed_in_the_order_calls_began_and_ended() -> None:
    """A burst as the event log writes it: refusals at their start, answered copies at their end.

    Twenty copies begin before any answer; the four forwarded ones are written last. Replay
    begins each call by ``seq`` and ends it where its line stands, so the verdicts are the live ones.
    """
    copy = {"session": "s1", "tool": "search", "arguments": {"q": "x"}}
    refused = [{**copy, "seq": seq, "begun": seq} for seq in range(5, 21)]
    answered = [
        {**copy, "seq": seq, "begun": 20, "result": {"content": [{"type": "text", "text": "same"}]}}
        for seq in range(1, 5)
    ]
    assert verdicts([*refused, *answered], abort_threshold=1000) == [*["block"] * 16, "allow", "allow", "warn", "warn"]


def test_a_call_begun_after_an_answer_sees_that_answer() -> None:
    """Two copies in flight, one answered, then a third: replay ends and begins them as the live detector did."""
    copy = {"session": "s1", "tool": "search", "arguments": {"q": "x"}}
    same = {"content": [{"type": "text", "text": "same"}]}
    trace = [
        {**copy, "seq": 1, "begun": 2, "result": same},
        {**copy, "seq": 3, "begun": 3, "result": same},
        {**copy, "seq": 2, "begun": 3, "result": same},
    ]
    live = LoopDetector(Policy())
    first, second = (live.begin("search", {"q": "x"}, 0.0)[0] for _ in range(2))
    assert first is not None
    assert second is not None
    ended = {1: live.finish(first, same, 0.0)}
    third, _ = live.begin("search", {"q": "x"}, 0.0)
    assert third is not None
    ended[3] = live.finish(third, same, 0.0)
    ended[2] = live.finish(second, same, 0.0)
    expected = [ended[n].action.name.lower() for n in (1, 3, 2)]
    assert verdicts(trace) == expected
    assert verdicts([{k: v for k, v in entry.items() if k not in {"seq", "begun"}} for entry in trace]) != expected


def test_lines_without_a_server_take_the_configs_only_server() -> None:
    """A one-server config's thresholds judge a trace whose lines name no server."""
    stream = io.StringIO("".join(json.dumps(line("get_issue", {"n": 1}, "same")) + "\n" for _ in range(2)))
    config = GuardConfig(None, (StdioServer("tracker", "tracker", policy={"warnThreshold": 2}),), FileSettings({}))
    decided = plan(config, load_settings(FileSettings({})))
    lines = list(read_trace(stream, "t.jsonl"))
    assert [item.verdict for item in judge_trace(lines, decided.policies, "tracker")] == ["allow", "warn"]
    stream.seek(0)
    assert [item.verdict for item in judge_trace(lines, decided.policies)] == ["allow", "allow"]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ((), "LOOP_GUARD_SCRUB=timestamps,uuids would"),
        (("--scrub", "timestamps"), "LOOP_GUARD_SCRUB=timestamps,uuids would"),
        (("--scrub", "timestamps,uuids"), None),
    ],
)
def test_the_scrub_suggestion_names_the_whole_setting_and_only_when_it_adds_something(
    given: tuple[str, ...], said: str | None
) -> None:
    """The suggestion keeps the presets already set, and is left out when they already catch everything."""
    text = "".join(
        json.dumps(line("status", {"job": 1}, f'{{"at": "2026-12-01T10:00:0{i}Z", "id": "{u}"}}')) + "\n"
        for i, u in enumerate(["1b4e28ba-2fa1-11d2-883f-0016d3cca427", "6fa459ea-ee8a-3ca4-894e-db77e160355e"])
    )
    done = subprocess.run(
        [*guard_argv(), "replay", *given, "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    if said is None:
        assert "LOOP_GUARD_SCRUB" not in done.stderr
    else:
        assert said in done.stderr


def test_replay_takes_budgets_as_the_guard_does() -> None:
    """`--budgets` applies in replay: the third call over a cap of two is refused."""
    text = "".join(json.dumps(line("read", {"p": n}, str(n))) + "\n" for n in range(3))
    done = subprocess.run(
        [*guard_argv(), "replay", "--json", "--budgets", "read=2", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(row) for row in done.stdout.splitlines()]
    assert [(row["verdict"], row["rule"]) for row in rows] == [("allow", None), ("allow", None), ("block", "budget")]


def test_a_line_without_a_recorded_answer_is_unknown_not_judged() -> None:
    """An enforce-mode log's refused calls record no result: replay in warn mode lets them through as unknown,
    and the streak is not advanced by an answer nobody saw."""
    answered = line("read", {"p": 1}, "same")
    unanswered = {"session": "s1", "tool": "read", "arguments": {"p": 1}}
    found = verdicts([answered] * 4 + [unanswered] * 3 + [answered], mode="warn")
    assert found[4:7] == ["unknown", "unknown", "unknown"]
    assert found[7] == "warn"


def test_spacing_sets_the_time_between_lines_that_record_none() -> None:
    """`--spacing 200` puts identical calls 200 s apart: past the request window, refusals start over."""
    text = "".join(json.dumps(line("read", {"p": 1}, "same")) + "\n" for _ in range(8))
    runs = {}
    for spacing in ("1", "200"):
        done = subprocess.run(
            [*guard_argv(), "replay", "--json", "--spacing", spacing, "-"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        runs[spacing] = [json.loads(row)["verdict"] for row in done.stdout.splitlines()]
    assert runs["1"][-1] == "closed"
    assert "abort" not in runs["200"]
    assert runs["200"][4] == "block"


def test_a_wait_is_kept_when_a_trace_is_respaced() -> None:
    """`respace` gives every call the model's thinking time plus the wait the agent took on purpose."""
    lines = [{**line("poll", {"j": 1}, "running"), "wait": wait} for wait in (0, 1, 2, 4)]
    stream = io.StringIO("".join(json.dumps(entry) + "\n" for entry in lines))
    spaced = list(respace(read_trace(stream, "t"), 65.0))
    assert [entry.at for entry in spaced] == [0.0, 66.0, 133.0, 202.0]


def test_respacing_keeps_a_batch_together() -> None:
    """Calls of one response begin together at any speed."""
    lines = [line("fetch", {"u": i}, "page", batch=1) for i in range(3)] + [line("read", {"p": 1}, "x")]
    stream = io.StringIO("".join(json.dumps(entry) + "\n" for entry in lines))
    assert [entry.at for entry in respace(read_trace(stream, "t"), 15.0)] == [0.0, 0.0, 0.0, 15.0]


def test_replay_streams_a_long_trace_in_small_memory() -> None:
    """5,000 lines of half a kilobyte are judged one at a time: the lines (2.5 MB of text) are never all held."""
    many = 5_000
    padding = "." * 400  # long lines: few of them outweigh the bound, so the judging of many is not what takes time

    def lines() -> Iterator[str]:
        for i in range(many):
            yield json.dumps(line("read", {"p": i % 50}, f"r{i % 50}{padding}")) + "\n"

    decided = plan(GuardConfig(None, (), FileSettings({})), load_settings(FileSettings({})))
    tracemalloc.start()
    count = sum(1 for _ in judge_lines(read_trace(lines(), "t"), decided.policies))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == many
    assert peak < 1_000_000, f"{peak} bytes at the peak"


def test_replay_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`replay big.jsonl | head -1`: no traceback, no complaint of a broken pipe."""
    trace = tmp_path / "big.jsonl"
    trace.write_text("".join(json.dumps(line("read", {"p": i}, "x")) + "\n" for i in range(20_000)), encoding="utf-8")
    command = f"{sys.executable} -m mcp_loop_guard replay {trace} | head -1"
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    assert done.stdout.startswith(str(trace))
    assert "Traceback" not in done.stderr
    assert "Broken pipe" not in done.stderr
