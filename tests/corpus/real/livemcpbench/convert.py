"""Convert LiveMCPBench baseline runs into loop-guard traces, one file per task.

Usage: python convert.py claude-sonnet-4-20250514_Qwen3-Embedding-0.6B.json OUT_DIR [--labelled]

Reads a local copy of ``baseline/output/<model>_<embedder>.json`` (a list of tasks, each with
the agent's ``messages`` in OpenAI chat form). The agent talks to the MCP Copilot server, whose
two tools are ``route`` (find tools) and ``execute-tool`` (call a tool of another MCP server);
each of their calls becomes one trace line with the call's own name and arguments. The tool
messages hold the ``CallToolResult`` as Python's repr; it is turned back into wire form
(``content`` texts and ``isError``). With ``--labelled`` only the runs named in
``labels.json`` beside this script are written.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tokenize
from ast import literal_eval
from pathlib import Path
from typing import Any

LIMIT = 2000
TEXT = "TextContent(type='text', text="


def clip(text: str) -> str:
    """Cut long results the same way every time: equal texts stay equal, different ones differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[:LIMIT]}\n[truncated: {len(text)} chars, sha256 {digest}]"


def string_at(source: str, start: int) -> tuple[str, int]:
    """The Python string literal that begins at ``start``, and where it ends."""
    token = next(tokenize.generate_tokens(io.StringIO(source[start:]).readline))
    return literal_eval(token.string), start + len(token.string)


def parse_result(recorded: str) -> dict[str, Any]:
    """A ``CallToolResult`` repr back in wire form; any other text is kept as one text item.

    The benchmark cut each tool message at 10,000 characters: a repr cut short is kept as it
    was recorded, as one text item (that is what the model saw).
    """
    whole = recorded.rstrip().endswith(("isError=True", "isError=False"))
    if not recorded.startswith("meta=") or TEXT not in recorded or not whole:
        return {"content": [{"type": "text", "text": clip(recorded)}], "isError": False}
    texts, at = [], recorded.find(TEXT)
    while at >= 0:
        text, end = string_at(recorded, at + len(TEXT))
        texts.append({"type": "text", "text": clip(text)})
        at = recorded.find(TEXT, end)
    return {"content": texts, "isError": recorded.rstrip().endswith("isError=True")}


def run_name(run: dict[str, Any]) -> str:
    return f"{run['category'].lower()}-{run['task_id'][:8]}.jsonl"


def convert(run: dict[str, Any], session: str) -> list[dict[str, Any]]:
    answers = {m["tool_call_id"]: m for m in run["messages"] if m["role"] == "tool"}
    lines: list[dict[str, Any]] = []
    for turn, message in enumerate(run["messages"]):
        calls = (message.get("tool_calls") or []) if message["role"] == "assistant" else []
        for call in calls:
            answer = answers.get(call["id"])
            line: dict[str, Any] = {
                "session": session,
                "tool": call["function"]["name"],
                "arguments": json.loads(call["function"]["arguments"] or "{}"),
            }
            if answer is None:
                line["error"] = {"code": -32603, "message": "no tool answer recorded"}
            else:
                line["result"] = parse_result(str(answer["content"]))
            if len(calls) > 1:
                line["batch"] = turn
            lines.append(line)
    return lines


def main() -> None:
    source, out = Path(sys.argv[1]), Path(sys.argv[2])
    keep = None
    if "--labelled" in sys.argv:
        keep = set(json.loads((Path(__file__).parent / "labels.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    for run in json.loads(source.read_text()):
        name = run_name(run)
        if keep is not None and name not in keep:
            continue
        lines = convert(run, name.removesuffix(".jsonl"))
        (out / name).write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


if __name__ == "__main__":
    main()
