"""The trace corpora (main and hard): every file follows the trace format, every file has a label, the counts hold."""

from __future__ import annotations

import json
import math
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from mcp_loop_guard.replay import read_trace

CORPUS = Path(__file__).parents[2] / "tests" / "corpus"
HARD = CORPUS / "hard"
FAMILIES = {"identical", "cycle", "same_error", "same_result", "burst", "side_effect", "volatile"}
LINE_KEYS = {"session", "tool", "arguments", "result", "error", "batch", "annotations", "server", "at", "wait"}
RESULT_KEYS = {"content", "structuredContent", "isError", "_meta"}
HINTS = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
TRACES = sorted(CORPUS.glob("*.jsonl"))
HARD_TRACES = sorted(HARD.glob("*.jsonl"))
ALL_TRACES = TRACES + HARD_TRACES
ALL_IDS = [str(path.relative_to(CORPUS).with_suffix("")) for path in ALL_TRACES]
LOOP_KINDS = {"variant", "cycle", "interleaved", "batch_errors", "same_result", "side_effect"}
PRODUCTIVE_KINDS = {"wait_poll", "clock_wait", "backoff", "writes", "polling", "work"}
HARD_KEYS = {"label", "kind", "repeats", "warn", "due", "fair", "note"}


def load_labels(directory: Path = CORPUS) -> dict[str, dict[str, Any]]:
    """A corpus's labels.json as a dict."""
    labels: dict[str, dict[str, Any]] = json.loads((directory / "labels.json").read_text(encoding="utf-8"))
    return labels


def load_trace(path: Path) -> list[dict[str, Any]]:
    """The lines of a trace file, parsed."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def check_result(result: Any) -> None:
    """A CallToolResult in wire names."""
    assert isinstance(result, dict)
    assert set(result) <= RESULT_KEYS, f"unknown result keys {set(result) - RESULT_KEYS}"
    assert isinstance(result.get("content"), list)
    assert all(isinstance(item, dict) for item in result["content"])
    assert all(isinstance(item.get("type"), str) for item in result["content"])
    assert isinstance(result.get("isError", False), bool)
    assert isinstance(result.get("structuredContent", {}), dict)
    assert isinstance(result.get("_meta", {}), dict)


def check_line(line: Any) -> None:
    """One trace line in the fixed format."""
    assert isinstance(line, dict)
    assert set(line) <= LINE_KEYS, f"unknown keys {set(line) - LINE_KEYS}"
    assert isinstance(line.get("session"), str)
    assert line["session"]
    assert isinstance(line.get("tool"), str)
    assert line["tool"]
    assert isinstance(line.get("arguments", {}), dict)
    assert ("result" in line) != ("error" in line), "a line has either a result or an error"
    if "result" in line:
        check_result(line["result"])
    else:
        error = line["error"]
        assert isinstance(error, dict)
        assert set(error) == {"code", "message"}
        assert isinstance(error["code"], int)
        assert not isinstance(error["code"], bool)
        assert isinstance(error["message"], str)
    if "batch" in line:
        assert isinstance(line["batch"], str | int | float | bool), "batch is a scalar"
    if "annotations" in line:
        annotations = line["annotations"]
        assert isinstance(annotations, dict)
        assert set(annotations) <= HINTS | {"title"}
        assert all(isinstance(annotations[hint], bool) for hint in HINTS & set(annotations))
    if "server" in line:
        assert isinstance(line["server"], str)
        assert line["server"]
    for key in ("at", "wait"):
        if key in line:
            assert isinstance(line[key], int | float), f"{key} is a number of seconds"
            assert not isinstance(line[key], bool)
            assert math.isfinite(line[key])
            assert line[key] >= 0


def test_the_corpus_has_traces() -> None:
    """The corpus directory holds trace files and a labels file."""
    assert TRACES
    assert (CORPUS / "labels.json").is_file()


@pytest.mark.parametrize("path", ALL_TRACES, ids=ALL_IDS)
def test_trace_follows_the_format(path: Path) -> None:
    """Every line of every trace is a tools/call in the fixed trace format, in start order."""
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), "every line ends with a newline"
    assert "\n\n" not in text, "one JSON object per line, no blank lines"
    lines = load_trace(path)
    assert lines
    for number, line in enumerate(lines, start=1):
        try:
            check_line(line)
        except AssertionError as error:
            raise AssertionError(f"{path.name}:{number}: {error}") from error
    times = [line.get("at") for line in lines]
    if all(at is not None for at in times):
        assert times == sorted(times), "lines are in the order the calls started"
    for number, (before, line) in enumerate(pairwise(lines), start=2):
        if line.get("wait"):
            assert "at" in line, f"{path.name}:{number}: a wait needs the agent's clock"
            assert line["at"] - before["at"] >= line["wait"], f"{path.name}:{number}: at leaves no room for the wait"
    with_server = {("server" in line) for line in lines}
    assert len(with_server) == 1, "either every line names its server or none does"


@pytest.mark.parametrize("path", ALL_TRACES, ids=ALL_IDS)
def test_the_replay_reads_the_trace(path: Path) -> None:
    """The benchmark's trace reader takes every line of every trace (it ignores keys it does not know)."""
    with path.open(encoding="utf-8") as stream:
        assert len(list(read_trace(stream, path.name))) == len(load_trace(path))


@pytest.mark.parametrize("path", ALL_TRACES, ids=ALL_IDS)
def test_batches_overlap(path: Path) -> None:
    """Calls sharing a batch value belong to one session, have several members and started together."""
    members: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for line in load_trace(path):
        if "batch" in line:
            members.setdefault((line["session"], line["batch"]), []).append(line)
    for (session, batch), lines in members.items():
        assert len(lines) > 1, f"batch {batch} of {session} has a single call"
        assert len({line.get("at") for line in lines}) == 1, f"batch {batch} of {session} did not start together"


def test_every_file_has_a_label_and_every_label_a_file() -> None:
    """labels.json and the trace files name the same traces."""
    assert set(load_labels()) == {path.name for path in TRACES}


def test_labels_follow_the_format() -> None:
    """A loop names its family, a due line within the file and a note; productive has a note (and a family
    only for polling that waits by the clock alone, ``clock_wait``)."""
    for name, label in load_labels().items():
        assert isinstance(label.get("note"), str), name
        assert label["note"].strip(), name
        if label.get("label") == "productive":
            assert set(label) in ({"label", "note"}, {"label", "note", "family"}), name
            assert label.get("family", "clock_wait") == "clock_wait", name
            continue
        assert label.get("label") == "loop", name
        assert set(label) <= {"label", "family", "due", "settings", "note"}, name
        assert label.get("family") in FAMILIES, name
        due = label.get("due")
        assert isinstance(due, int), name
        assert not isinstance(due, bool), name
        assert 1 <= due <= len(load_trace(CORPUS / name)), f"{name}: due {due} is not a line of the file"
        if label["family"] == "volatile":
            settings = label.get("settings")
            assert isinstance(settings, dict), f"{name}: volatile needs its settings"
            assert "scrub" in settings, f"{name}: volatile needs its scrub setting"
        else:
            assert "settings" not in label, f"{name}: settings are for the volatile family only"


def test_the_counts() -> None:
    """At least 30 loops covering every family (at least 3 of each), and at least 30 productive traces."""
    labels = load_labels().values()
    kinds = Counter(label["label"] for label in labels)
    families = Counter(label["family"] for label in labels if label["label"] == "loop")
    assert kinds["loop"] >= 30
    assert kinds["productive"] >= 30
    assert set(families) == FAMILIES
    assert min(families.values()) >= 3, families


def test_labels_are_those_the_recorder_declares() -> None:
    """labels.json is exactly what the recorder writes from the labels declared with its scripts."""
    from tests.corpus import scripts
    from tests.corpus.recording import REGISTRY

    assert scripts.__all__
    declared = {f"{name}.jsonl": REGISTRY[name].label.to_json() for name in REGISTRY}
    assert declared == load_labels()


# --- the hard cases (tests/corpus/hard) ------------------------------------------------------


def outcome(line: dict[str, Any]) -> Any:
    """What a call ended with: its result without _meta, or its error."""
    if "result" in line:
        return {key: value for key, value in line["result"].items() if key != "_meta"}
    return line["error"]


def rule_of(kind: str, lines: list[dict[str, Any]]) -> tuple[int, int | None]:
    """The occurrences warned and due for a loop of this kind over these lines (the rules of CORPUS.md)."""
    hints = lines[0].get("annotations", {})
    if hints.get("destructiveHint") is True and hints.get("idempotentHint") is not True:
        return 2, 3
    if kind == "same_result":
        return 4, None
    if kind == "batch_errors" and len({json.dumps(line["arguments"], sort_keys=True) for line in lines}) > 1:
        return 3, 8
    return 3, 5


def test_the_hard_set_has_traces() -> None:
    """The hard set holds trace files and a labels file."""
    assert HARD_TRACES
    assert (HARD / "labels.json").is_file()


def test_every_hard_file_has_a_label_and_every_label_a_file() -> None:
    """The hard set's labels.json and its trace files name the same traces."""
    assert set(load_labels(HARD)) == {path.name for path in HARD_TRACES}


def test_hard_labels_follow_the_schema() -> None:
    """Each hard label has every key of the schema; repeats, warn, due and fair are lines of the file."""
    for name, label in load_labels(HARD).items():
        assert HARD_KEYS <= set(label) <= HARD_KEYS | {"config"}, name
        assert isinstance(label["note"], str), name
        assert label["note"].strip(), name
        count = len(load_trace(HARD / name))
        for key in ("repeats", "fair"):
            lines = label[key]
            assert isinstance(lines, list), name
            assert all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= count for n in lines), name
            assert lines == sorted(set(lines)), f"{name}: {key} are ascending lines"
        if label["label"] == "productive":
            assert label["kind"] in PRODUCTIVE_KINDS, name
            assert label["warn"] is None, name
            assert label["due"] is None, name
            continue
        assert label["label"] == "loop", name
        assert label["kind"] in LOOP_KINDS, name
        assert label["fair"] == [], name
        assert label["warn"] in label["repeats"], name
        assert label["due"] is None or label["due"] in label["repeats"], name
        if "config" in label:
            config = label["config"]
            assert isinstance(config, dict), name
            assert set(config) <= {"tools"}, name
            assert all(isinstance(rules, dict) for rules in config["tools"].values()), name


def test_hard_loops_repeat_the_same_answer_and_are_due_by_their_rule() -> None:
    """Each loop's repeats are one tool answered the same way; warn and due are the occurrences its rule names."""
    for name, label in load_labels(HARD).items():
        if label["label"] != "loop":
            continue
        trace = load_trace(HARD / name)
        lines = [trace[number - 1] for number in label["repeats"]]
        assert len({line["tool"] for line in lines}) == 1, f"{name}: the repeats are not one tool"
        assert all(outcome(line) == outcome(lines[0]) for line in lines), f"{name}: the repeats answer differently"
        warn_at, due_at = rule_of(label["kind"], lines)
        assert label["warn"] == label["repeats"][warn_at - 1], name
        due = label["repeats"][due_at - 1] if due_at is not None and len(lines) >= due_at else None
        assert label["due"] == due, name


def test_hard_traces_record_deliberate_waits() -> None:
    """Every wait_poll and backoff trace records some waiting; no loop does."""
    for name, label in load_labels(HARD).items():
        waits = [line for line in load_trace(HARD / name) if line.get("wait")]
        if label["kind"] in {"wait_poll", "clock_wait", "backoff"}:
            assert waits, f"{name} records no wait"
        if label["label"] == "loop":
            assert not waits, f"{name} is a loop with deliberate waits"


def test_the_hard_counts() -> None:
    """At least 24 loops and 21 productive traces, covering every kind of each; most loops due to be refused."""
    labels = load_labels(HARD).values()
    kinds = Counter(label["label"] for label in labels)
    assert kinds["loop"] >= 24
    assert kinds["productive"] >= 21
    assert {label["kind"] for label in labels if label["label"] == "loop"} == LOOP_KINDS
    assert {label["kind"] for label in labels if label["label"] == "productive"} == PRODUCTIVE_KINDS
    assert sum(label["due"] is not None for label in labels) >= 20


def test_hard_labels_are_those_the_recorder_declares() -> None:
    """The hard set's labels.json is exactly what the recorder writes from the labels declared with its scripts."""
    from tests.corpus import hard_scripts
    from tests.corpus.recording import HARD_REGISTRY

    assert hard_scripts.__all__
    declared = {f"{name}.jsonl": HARD_REGISTRY[name].label.to_json() for name in HARD_REGISTRY}
    assert declared == load_labels(HARD)
