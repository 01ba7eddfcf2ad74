"""The corpus recorder keeps working and reproduces the committed traces byte for byte."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT, forked_module

CORPUS = REPO_ROOT / "tests" / "corpus"
# One trace per kind of server and normalisation: the tracker's new message ids, the job
# runner, fresh timestamps and request ids, concurrent calls to the filesystem server, git
# with fixed commit dates, and the shell server running real commands.
SAMPLE = [
    "email-resent",
    "stuck-release-job",
    "payments-status-fresh-fields",
    "burst-20-same-read",
    "git-status-after-commit",
    "tax-fix-flip-flop",
]
# The hard set: a timestamp argument, fresh UUID arguments, the wait tool and recorded waits,
# the SQL, booking and key-value servers, a batch.
HARD_SAMPLE = [
    "refunds-since-now",
    "order-lookup-fresh-request-id",
    "capture-503-wait-tool-backoff",
    "sql-seed-batch",
    "booking-declined-between-notes",
    "kv-feature-flags",
]


def record_again(out: Path, names: list[str], committed: Path, *options: str) -> None:
    """Records the traces into out with the recorder's command line and compares them and the labels with committed."""
    done = subprocess.run(
        forked_module("tests.corpus.record", *options, "--out", str(out), *names),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in names:
        recorded = (out / f"{name}.jsonl").read_text(encoding="utf-8")
        assert recorded == (committed / f"{name}.jsonl").read_text(encoding="utf-8"), name
    labels = json.loads((out / "labels.json").read_text(encoding="utf-8"))
    assert labels == json.loads((committed / "labels.json").read_text(encoding="utf-8"))


@pytest.mark.e2e
def test_recording_again_gives_the_committed_traces(tmp_path: Path) -> None:
    """`python -m tests.corpus.record NAME...` writes the same files as those committed, and the same labels."""
    record_again(tmp_path, SAMPLE, CORPUS)


@pytest.mark.e2e
def test_recording_the_hard_set_again_gives_the_committed_traces(tmp_path: Path) -> None:
    """`python -m tests.corpus.record --set hard NAME...` writes the committed hard traces and labels again."""
    record_again(tmp_path, HARD_SAMPLE, CORPUS / "hard", "--set", "hard")
