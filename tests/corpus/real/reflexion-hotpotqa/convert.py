"""Convert Reflexion's HotPotQA ReAct logs into loop-guard traces, one file per agent run.

Usage: python convert.py OUT_DIR PREFIX=log.txt [PREFIX=log.txt ...] [--labelled]

Reads local copies of ``hotpotqa_runs/root/ReAct/{base,reflexion}/100_questions_*_trials.txt``.
Each agent's block (``Question:``, then ``Thought n``, ``Action n``, ``Observation n``) becomes
one trace; every ``Search[...]`` and ``Lookup[...]`` action one line (tool ``Search`` with
``{"entity"}``, tool ``Lookup`` with ``{"keyword"}``), its observation the text result.
``Finish[...]`` submits the answer and is left out, as are actions the agent wrote in no
valid form (the harness answers those itself, no tool is called). Runs are named
``<prefix>-t<trial>-<first 8 hex of the question's sha1>``. With ``--labelled`` only the runs
named in ``labels.json`` beside this script are written.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

LIMIT = 2000
STEP = re.compile(r"^(Thought|Action|Observation) (\d+): ?(.*)$")
CALL = re.compile(r"^(Search|Lookup)\[(.*)\]\s*$", re.S)
ARGUMENT = {"Search": "entity", "Lookup": "keyword"}
NOT_OBSERVED = ("Correct answer:", "Trial summary:", "---", "###")


def clip(text: str) -> str:
    """Cut long results the same way every time: equal texts stay equal, different ones differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[:LIMIT]}\n[truncated: {len(text)} chars, sha256 {digest}]"


def agents(log: str) -> list[tuple[int, str, list[tuple[str, int, str]]]]:
    """(trial, question, steps) of every agent block, steps as (kind, number, text)."""
    found: list[tuple[int, str, list[tuple[str, int, str]]]] = []
    trial = 0
    steps: list[tuple[str, int, str]] = []
    for raw in log.splitlines():
        if raw.startswith("BEGIN TRIAL "):
            trial = int(raw.split()[2])
            continue
        if raw.startswith("Question:"):
            steps = []
            found.append((trial, raw[len("Question:") :].strip(), steps))
            continue
        match = STEP.match(raw)
        if match and found:
            steps.append((match[1], int(match[2]), match[3]))
        elif steps and steps[-1][0] == "Observation" and raw and not raw.startswith(NOT_OBSERVED):
            kind, number, text = steps[-1]
            steps[-1] = (kind, number, f"{text}\n{raw}")
    return found


def convert(steps: list[tuple[str, int, str]], session: str) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    observations = {number: text for kind, number, text in steps if kind == "Observation"}
    for kind, number, text in steps:
        call = CALL.match(text.strip()) if kind == "Action" else None
        if call is None:
            continue
        line: dict[str, Any] = {"session": session, "tool": call[1], "arguments": {ARGUMENT[call[1]]: call[2]}}
        if number in observations:
            line["result"] = {"content": [{"type": "text", "text": clip(observations[number])}], "isError": False}
        else:
            line["error"] = {"code": -32603, "message": "no observation recorded"}
        lines.append(line)
    return lines


def main() -> None:
    out = Path(sys.argv[1])
    keep = None
    if "--labelled" in sys.argv:
        keep = set(json.loads((Path(__file__).parent / "labels.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    for pair in sys.argv[2:]:
        if pair.startswith("--"):
            continue
        prefix, _, path = pair.partition("=")
        for trial, question, steps in agents(Path(path).read_text()):
            name = f"{prefix}-t{trial}-{hashlib.sha1(question.encode(), usedforsecurity=False).hexdigest()[:8]}.jsonl"
            if keep is not None and name not in keep:
                continue
            lines = convert(steps, name.removesuffix(".jsonl"))
            (out / name).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


if __name__ == "__main__":
    main()
