"""The real-run corpus: every source folder reads as traces, names its license, and labels every run by the schema."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mcp_loop_guard.traces import read_trace

REAL = Path(__file__).parents[2] / "tests" / "corpus" / "real"
FOLDERS = (
    sorted(path for path in REAL.iterdir() if path.is_dir() and not path.name.startswith(("_", ".")))
    if REAL.is_dir()
    else []
)
KINDS = {
    "identical", "variant", "cycle", "interleaved", "same_error", "same_result", "burst",
    "side_effect", "batch_errors", "wait_poll", "backoff", "writes", "polling", "work",
}  # fmt: skip
LICENSES = re.compile(r"\b(MIT|Apache[- ]2\.0|BSD|ISC|MPL|CC[- ]BY|CC0|GPL|LGPL|AGPL|Unlicense)\b")


def lines_of(path: Path) -> int:
    """The number of calls in a trace, read with the replay reader (which rejects a malformed line)."""
    with path.open(encoding="utf-8") as stream:
        return sum(1 for _ in read_trace(stream, str(path)))


def expected_marks(kind: str, repeats: list[int]) -> tuple[int | None, int | None]:
    """``warn`` and ``due`` as the labelling guide defines them from the occurrences."""
    warn_at, due_at = (4, None) if kind == "same_result" else (3, 8 if kind == "same_error" else 5)
    warn = repeats[warn_at - 1] if len(repeats) >= warn_at else None
    due = repeats[due_at - 1] if due_at is not None and len(repeats) >= due_at else None
    return warn, due


def test_there_are_source_folders() -> None:
    """The real corpus has at least one source folder to check."""
    assert FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_folder_names_its_source_and_license(folder: Path) -> None:
    """Each source folder has a README that names a license."""
    readme = folder / "README.md"
    assert readme.is_file(), f"{folder.name} has no README.md"
    text = readme.read_text(encoding="utf-8")
    assert re.search(r"(?i)licen[cs]e", text), f"{folder.name}/README.md does not speak of a license"
    assert LICENSES.search(text), f"{folder.name}/README.md names no license"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_every_run_is_labelled_by_the_schema(folder: Path) -> None:
    """Every trace reads as a trace and has a label, every label a trace, and the labels follow the guide."""
    labels: dict[str, dict[str, Any]] = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    traces = {path.name for path in folder.glob("*.jsonl")}
    assert traces, f"{folder.name} has no traces"
    assert set(labels) == traces, f"unlabelled {traces - set(labels)}, labels without a file {set(labels) - traces}"
    for name, label in labels.items():
        where = f"{folder.name}/{name}"
        count = lines_of(folder / name)
        assert count > 0, f"{where} is empty"
        assert label["label"] in {"loop", "productive"}, where
        assert label["kind"] in KINDS, f"{where}: unknown kind {label['kind']!r}"
        assert isinstance(label.get("note"), str), f"{where}: no note"
        assert label["note"].strip(), f"{where}: an empty note"
        repeats, fair = label.get("repeats", []), label.get("fair", [])
        for line in [*repeats, *fair]:
            assert isinstance(line, int), f"{where}: {line!r} is not a line number"
            assert 1 <= line <= count, f"{where}: line {line} is not a line of the file"
        assert repeats == sorted(set(repeats)), f"{where}: repeats must be increasing"
        if label["label"] == "loop":
            assert len(repeats) >= 3, f"{where}: a loop needs three occurrences or more"
            assert (label.get("warn"), label.get("due")) == expected_marks(label["kind"], repeats), where
        else:
            assert label.get("warn") is None, f"{where}: a productive run has no warning due"
            assert label.get("due") is None, f"{where}: a productive run has no refusal due"
