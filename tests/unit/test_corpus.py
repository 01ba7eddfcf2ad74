"""The trace corpus: every file follows the trace format, every file has a label, the counts hold."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

CORPUS = Path(__file__).parents[2] / "tests" / "corpus"
FAMILIES = {"identical", "cycle", "same_error", "same_result", "burst", "side_effect", "volatile"}
LINE_KEYS = {"session", "tool", "arguments", "result", "error", "batch", "annotations", "server", "at"}
RESULT_KEYS = {"content", "structuredContent", "isError", "_meta"}
HINTS = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
TRACES = sorted(CORPUS.glob("*.jsonl"))


def load_labels() -> dict[str, dict[str, Any]]:
    """labels.json as a dict."""
    labels: dict[str, dict[str, Any]] = json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))
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
    if "at" in line:
        assert isinstance(line["at"], int | float)
        assert not isinstance(line["at"], bool)
        assert math.isfinite(line["at"])
        assert line["at"] >= 0


def test_the_corpus_has_traces() -> None:
    """The corpus directory holds trace files and a labels file."""
    assert TRACES
    assert (CORPUS / "labels.json").is_file()


@pytest.mark.parametrize("path", TRACES, ids=[path.stem for path in TRACES])
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
    with_server = {("server" in line) for line in lines}
    assert len(with_server) == 1, "either every line names its server or none does"


@pytest.mark.parametrize("path", TRACES, ids=[path.stem for path in TRACES])
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
    """A loop names its family, a due line within the file and a note; productive has a note only."""
    for name, label in load_labels().items():
        assert isinstance(label.get("note"), str), name
        assert label["note"].strip(), name
        if label.get("label") == "productive":
            assert set(label) == {"label", "note"}, name
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
