"""Convert InterCode experiment results into loop-guard traces, one file per task run.

Usage: python convert.py OUT_DIR PREFIX=results.json [PREFIX=results.json ...] [--labelled]

Reads local copies of ``data/results/<env>/<model>/ic_<env>_multiturn_*.json`` (a JSON object
of task runs, each with ``environment``, ``query`` and ``turn_history``: parallel lists
``actions``, ``observations``, ``rewards``, ``valid_action``). Each action the harness ran is
one line: ``ic_sql`` actions become tool ``sql`` with ``{"query"}``, ``ic_bash`` actions tool
``bash`` with ``{"command"}``; the observation is the text result, as the model saw it.
``isError`` is the harness's own verdict: true where ``valid_action`` is false (the query
raised, or the command exited non-zero). Turns where the model wrote no code are left out
(the harness answered them itself with a format reminder, no tool ran), as are ``skip`` and
``blocked``. Runs are named ``<prefix>-<index>``. With ``--labelled`` only the runs named in
``labels.json`` beside this script are written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

LIMIT = 2000
TOOLS = {"ic_sql": ("sql", "query"), "ic_bash": ("bash", "command")}
REMINDERS = ("No SQL code was found", "No bash code was found", "Format your ")


def clip(text: str) -> str:
    """Cut long results the same way every time: equal texts stay equal, different ones differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[:LIMIT]}\n[truncated: {len(text)} chars, sha256 {digest}]"


def convert(run: dict[str, Any], session: str) -> list[dict[str, Any]]:
    tool, argument = TOOLS[run["environment"]]
    history = run["turn_history"]
    lines: list[dict[str, Any]] = []
    for index, action in enumerate(history["actions"]):
        if action in ("skip", "blocked") or index >= len(history["observations"]):
            continue
        observation = str(history["observations"][index])
        if observation.startswith(REMINDERS):
            continue
        valid = history["valid_action"][index]
        lines.append(
            {
                "session": session,
                "tool": tool,
                "arguments": {argument: action},
                "result": {"content": [{"type": "text", "text": clip(observation)}], "isError": valid is False},
            }
        )
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    keep = None
    if "--labelled" in sys.argv:
        keep = set(json.loads((Path(__file__).parent / "labels.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    for spec in sys.argv[2:]:
        if spec.startswith("--"):
            continue
        prefix, source = spec.split("=", 1)
        runs = json.loads(Path(source).read_text())
        for key, run in runs.items():
            name = f"{prefix}-{key}.jsonl"
            if keep is not None and name not in keep:
                continue
            lines = convert(run, name.removesuffix(".jsonl"))
            if lines:
                (out / name).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


if __name__ == "__main__":
    main()
