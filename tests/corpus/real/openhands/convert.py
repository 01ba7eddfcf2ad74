"""Convert OpenHands run histories (``output.jsonl`` lines, each with a ``history`` of events) to traces.

Each tool call the model made becomes one line: with function calling, the tool's name and the
arguments exactly as the model sent them (``tool_call_metadata.model_response``); in older
histories without it, ``run`` becomes ``execute_bash {"command"}`` and ``run_ipython`` becomes
``execute_ipython_cell {"code"}``. The result is the observation the model saw. Usage:

    python convert.py OUT_DIR PREFIX OUTPUT.jsonl [INDEX ...]

writes ``OUT_DIR/<PREFIX><instance>.jsonl`` for each run of the file (or the runs at INDEX).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

LIMIT = 2000
OLD_TOOLS = {"run": ("execute_bash", "command"), "run_ipython": ("execute_ipython_cell", "code")}


def clip(text: str) -> str:
    """Cut a long observation the same way every time: equal texts stay equal, others differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{text[:LIMIT]}\n[... cut: {len(text)} chars in all, sha256 {digest}]"


def seen(observation: dict[str, Any]) -> str:
    """The observation's text as the model saw it: a command's output with its prefix and suffix."""
    text = str(observation.get("content", ""))
    metadata = (observation.get("extras") or {}).get("metadata")
    if observation.get("observation") == "run" and isinstance(metadata, dict):
        text = f"{metadata.get('prefix') or ''}{text}{metadata.get('suffix') or ''}"
    return text


def failed(observation: dict[str, Any]) -> bool:
    """What the source itself marks as a failure: an error event, an exit code above 0, an ``ERROR:`` reply."""
    if observation.get("observation") == "error":
        return True
    metadata = (observation.get("extras") or {}).get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("exit_code"), int):
        return bool(metadata["exit_code"] > 0)
    return str(observation.get("content", "")).startswith("ERROR:")


def when(event: dict[str, Any]) -> float | None:
    stamp = event.get("timestamp")
    return datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else None


def called(observation: dict[str, Any]) -> tuple[str, dict[str, Any], str | None, int] | None:
    """The tool call an observation answers, from the model's own response."""
    meta = observation.get("tool_call_metadata")
    if not isinstance(meta, dict):
        return None
    response = meta.get("model_response") or {}
    for choice in response.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            if call.get("id") == meta.get("tool_call_id"):
                function = call["function"]
                arguments = json.loads(function["arguments"]) if function.get("arguments") else {}
                total = int(meta.get("total_calls_in_response") or 1)
                return function["name"], arguments, response.get("id"), total
    return None


def flat(run: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The oldest histories: events without ids, each action followed by its observation, fields inline."""
    lines: list[dict[str, Any]] = []
    history = run["history"]
    for action, observation in itertools.pairwise(history):
        if action.get("action") not in OLD_TOOLS or "observation" not in observation:
            continue
        tool, key = OLD_TOOLS[action["action"]]
        code = observation.get("exit_code")
        error = code > 0 if isinstance(code, int) else str(observation.get("content", "")).startswith("ERROR:")
        text = clip(str(observation.get("content", "")))
        lines.append(
            {
                "session": session,
                "tool": tool,
                "arguments": {key: action.get(key, "")},
                "result": {"content": [{"type": "text", "text": text}], "isError": error},
            }
        )
    return lines


def convert(run: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The trace lines of one run, in the order the calls started."""
    history = run["history"]
    if history and all("id" not in event for event in history):
        return flat(run, session)
    actions = {event["id"]: event for event in history if "action" in event and "id" in event}
    rows: list[tuple[float, int, dict[str, Any]]] = []
    stamps: list[float | None] = []
    for order, event in enumerate(history):
        if "observation" not in event or event.get("observation") in ("recall", "agent_state_changed"):
            continue
        action = actions.get(event.get("cause"))
        call = called(event)
        if call is not None:
            tool, arguments, response, total = call
        elif action is not None and action.get("action") in OLD_TOOLS:
            tool, key = OLD_TOOLS[action["action"]]
            arguments, response, total = {key: action["args"].get(key, "")}, None, 1
        else:
            continue
        line: dict[str, Any] = {
            "session": session,
            "tool": tool,
            "arguments": arguments,
            "result": {"content": [{"type": "text", "text": clip(seen(event))}], "isError": failed(event)},
        }
        if total > 1 and response:
            line["batch"] = response
        start = when(action) if action is not None else when(event)
        stamps.append(start)
        rows.append((start or 0.0, order, line))
    if rows and all(stamp is not None for stamp in stamps):
        rows.sort(key=lambda row: (row[0], row[1]))
        first = rows[0][0]
        for start, _, line in rows:
            line["at"] = round(start - first, 3)
    return [line for _, _, line in rows]


def main(argv: list[str]) -> None:
    """Convert the runs of one output.jsonl into OUT_DIR."""
    out, prefix, source = Path(argv[0]), argv[1], Path(argv[2])
    picked = {int(index) for index in argv[3:]}
    out.mkdir(parents=True, exist_ok=True)
    for index, text in enumerate(source.read_text(encoding="utf-8").splitlines()):
        if picked and index not in picked:
            continue
        run = json.loads(text)
        name = run.get("instance_id") or f"issue-{(run.get('issue') or {}).get('number', index)}"
        session = f"{prefix}{name}"
        lines = convert(run, session)
        body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        (out / f"{session}.jsonl").write_text(body, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
