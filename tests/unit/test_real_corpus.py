"""The real-run corpus: every source folder reads as traces, names a license, and labels each run by the guide."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from mcp_loop_guard.replay import read_trace

REAL = Path(__file__).parents[2] / "tests" / "corpus" / "real"
FOLDERS = sorted(path for path in REAL.iterdir() if path.is_dir() and not path.name.startswith((".", "_")))
KINDS = {
    "identical", "variant", "cycle", "interleaved", "same_error", "same_result", "burst",
    "side_effect", "batch_errors", "wait_poll", "backoff", "writes", "polling", "work",
}  # fmt: skip
LICENSE = re.compile(r"\b(MIT|Apache[- ]2\.0|BSD|ISC|MPL|CC[- ]BY|CC0|GPL|LGPL|AGPL|Unlicense)\b")


def calls(path: Path) -> int:
    """How many calls a trace has, read by the replay reader (it rejects a malformed line)."""
    with path.open(encoding="utf-8") as stream:
        return sum(1 for _ in read_trace(stream, str(path)))


def marks(kind: str, repeats: list[int]) -> tuple[int | None, int | None]:
    """``warn`` and ``due`` as the labelling guide derives them from the occurrences."""
    warn_at = 4 if kind == "same_result" else 3
    due_at = None if kind == "same_result" else 8 if kind == "same_error" else 5
    warn = repeats[warn_at - 1] if len(repeats) >= warn_at else None
    due = repeats[due_at - 1] if due_at is not None and len(repeats) >= due_at else None
    return warn, due


def test_the_real_corpus_has_sources() -> None:
    """There is at least one source folder to check."""
    assert FOLDERS


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_source_readme_names_a_license(folder: Path) -> None:
    """Each source folder has a README.md that names the source's license."""
    readme = folder / "README.md"
    assert readme.is_file(), f"{folder.name} has no README.md"
    assert LICENSE.search(readme.read_text(encoding="utf-8")), f"{folder.name}/README.md names no license"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda path: path.name)
def test_every_run_has_a_label_of_the_schema(folder: Path) -> None:
    """Every trace reads, every trace has a label and every label a trace; marks follow from the repeats."""
    labels: dict[str, dict[str, Any]] = json.loads((folder / "labels.json").read_text(encoding="utf-8"))
    traces = {path.name for path in folder.glob("*.jsonl")}
    assert traces, f"{folder.name} has no traces"
    assert set(labels) == traces, f"no label: {traces - set(labels)}; no file: {set(labels) - traces}"
    for name, label in labels.items():
        where = f"{folder.name}/{name}"
        count = calls(folder / name)
        assert count > 0, f"{where} is empty"
        assert label["label"] in {"loop", "productive"}, where
        assert label["kind"] in KINDS, f"{where}: unknown kind {label['kind']!r}"
        assert isinstance(label.get("note"), str), f"{where}: no note"
        assert label["note"].strip(), f"{where}: empty note"
        repeats, fair = label.get("repeats", []), label.get("fair", [])
        assert all(isinstance(line, int) and 1 <= line <= count for line in [*repeats, *fair]), f"{where}: no such line"
        assert repeats == sorted(set(repeats)), f"{where}: repeats must increase"
        if label["label"] == "loop":
            assert len(repeats) >= 3, f"{where}: two occurrences are not a loop"
            assert (label.get("warn"), label.get("due")) == marks(label["kind"], repeats), where
        else:
            assert label.get("warn") is None, f"{where}: a productive run is never warned"
            assert label.get("due") is None, f"{where}: a productive run is never due"
