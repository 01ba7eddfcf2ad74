"""The corpus recorder keeps working and reproduces the committed traces byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO_ROOT

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


@pytest.mark.e2e
def test_recording_again_gives_the_committed_traces(tmp_path: Path) -> None:
    """`python -m tests.corpus.record NAME...` writes the same files as those committed, and the same labels."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.corpus.record", "--out", str(tmp_path), *SAMPLE],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in SAMPLE:
        recorded = (tmp_path / f"{name}.jsonl").read_text(encoding="utf-8")
        assert recorded == (CORPUS / f"{name}.jsonl").read_text(encoding="utf-8"), name
    labels = json.loads((tmp_path / "labels.json").read_text(encoding="utf-8"))
    assert labels == json.loads((CORPUS / "labels.json").read_text(encoding="utf-8"))
