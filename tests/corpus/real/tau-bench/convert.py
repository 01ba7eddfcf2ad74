"""Convert tau-bench historical trajectories into loop-guard traces, one file per run.

Usage: python convert.py gpt-4o-airline.json OUT_DIR [--labelled]

Reads a local copy of ``historical_trajectories/<model>-<domain>.json`` (a list of runs with
``task_id``, ``trial`` and ``traj``, OpenAI chat messages). Each tool call of an assistant
message becomes one trace line; calls of one message share a ``batch``. With ``--labelled``
only the runs named in ``labels.json`` beside this script are written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

LIMIT = 2000


def clip(text: str) -> str:
    """Cut long results the same way every time: equal texts stay equal, different ones differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[:LIMIT]}\n[truncated: {len(text)} chars, sha256 {digest}]"


def run_name(run: dict[str, Any], domain: str) -> str:
    return f"{domain}-task{run['task_id']:02d}-trial{run['trial']}.jsonl"


def convert(run: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The tool answers follow their assistant message in order; ids are not unique in these files."""
    traj = run["traj"]
    lines: list[dict[str, Any]] = []
    for turn, message in enumerate(traj):
        calls = (message.get("tool_calls") or []) if message["role"] == "assistant" else []
        answers = []
        for later in traj[turn + 1 :]:
            if later["role"] != "tool":
                break
            answers.append(later)
        for index, call in enumerate(calls):
            line: dict[str, Any] = {
                "session": session,
                "tool": call["function"]["name"],
                "arguments": json.loads(call["function"]["arguments"] or "{}"),
            }
            if index < len(answers):
                text = clip(str(answers[index]["content"]))
                line["result"] = {"content": [{"type": "text", "text": text}], "isError": False}
            else:
                line["error"] = {"code": -32603, "message": "no tool answer recorded"}
            if len(calls) > 1:
                line["batch"] = turn
            lines.append(line)
    return lines


def main() -> None:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    domain = source.stem.rsplit("-", 1)[-1]
    keep = None
    if "--labelled" in sys.argv:
        keep = set(json.loads((Path(__file__).parent / "labels.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    for run in json.loads(source.read_text()):
        name = run_name(run, domain)
        if keep is not None and name not in keep:
            continue
        lines = convert(run, name.removesuffix(".jsonl"))
        (out / name).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


if __name__ == "__main__":
    main()
