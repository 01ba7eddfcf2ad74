"""Convert tau2-bench simulation results into loop-guard traces, one file per simulation.

Usage: python convert.py results.json OUT_DIR [--prefix=NAME-] [--labelled]

Reads a local copy of a tau2-bench results file (``info``, ``tasks``, ``simulations``; each
simulation's ``messages`` carry a ``timestamp``). Each tool call the agent makes (requestor
``assistant``) becomes one trace line; calls of one message share a ``batch``. The tool
message's ``content`` is the text result and its ``error`` flag ``isError``. ``at`` is the
agent message's timestamp in seconds since the simulation's first message. The user
simulator's own tool calls (on the simulated phone) are left out; in the solo mode (no user)
the agent's calls on the phone are its own and kept. ``--prefix`` starts every run's name, to
tell apart runs of several results files. With ``--labelled`` only the runs named in
``labels.json`` beside this script are written.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

LIMIT = 2000


def clip(text: str) -> str:
    """Cut long results the same way every time: equal texts stay equal, different ones differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[:LIMIT]}\n[truncated: {len(text)} chars, sha256 {digest}]"


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def run_name(domain: str, index: int, simulation: dict[str, Any], prefix: str = "") -> str:
    return f"{prefix}{domain}-sim{index:02d}-trial{simulation['trial']}.jsonl"


def convert(simulation: dict[str, Any], session: str) -> list[dict[str, Any]]:
    messages = simulation["messages"]
    start = seconds(messages[0]["timestamp"])
    answers = {m["id"]: m for m in messages if m["role"] == "tool"}
    lines: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] != "assistant":
            continue
        calls = [call for call in message.get("tool_calls") or [] if call.get("requestor", "assistant") == "assistant"]
        for call in calls:
            answer = answers.get(call["id"])
            line: dict[str, Any] = {"session": session, "tool": call["name"], "arguments": call["arguments"]}
            if answer is None:
                line["error"] = {"code": -32603, "message": "no tool answer recorded"}
            else:
                text = clip(str(answer["content"]))
                line["result"] = {"content": [{"type": "text", "text": text}], "isError": bool(answer.get("error"))}
            if len(calls) > 1:
                line["batch"] = message["turn_idx"]
            line["at"] = round(seconds(message["timestamp"]) - start, 3)
            lines.append(line)
    return lines


def main() -> None:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    keep = None
    if "--labelled" in sys.argv:
        keep = set(json.loads((Path(__file__).parent / "labels.json").read_text()))
    prefix = next((arg.split("=", 1)[1] for arg in sys.argv if arg.startswith("--prefix=")), "")
    results = json.loads(source.read_text())
    domain = results["info"]["environment_info"]["domain_name"]
    out.mkdir(parents=True, exist_ok=True)
    for index, simulation in enumerate(results["simulations"]):
        name = run_name(domain, index, simulation, prefix)
        if keep is not None and name not in keep:
            continue
        lines = convert(simulation, name.removesuffix(".jsonl"))
        (out / name).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


if __name__ == "__main__":
    main()
