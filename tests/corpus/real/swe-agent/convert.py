"""Convert SWE-agent trajectories (``*.traj``, the ``trajectory`` list of action/observation steps) to traces.

SWE-agent's own commands become tools of the same name with their arguments parsed as the
command's documentation names them (``open path [line_number]``, ``goto line_number``,
``edit start_line:end_line`` + text + ``end_of_edit``, ``search_dir search_term [dir]`` ...);
anything else is a shell command, ``bash {"command": ...}``. The result is the observation.
Usage:

    python convert.py OUT_DIR NAME=TRAJ [NAME=TRAJ ...]
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

LIMIT = 2000
SIGNATURES: dict[str, list[str]] = {
    "open": ["path", "line_number"],
    "goto": ["line_number"],
    "scroll_up": [],
    "scroll_down": [],
    "create": ["filename"],
    "search_dir": ["search_term", "dir"],
    "search_file": ["search_term", "file"],
    "find_file": ["file_name", "dir"],
    "submit": [],
}
RANGE = re.compile(r"\Aedit (\d+):(\d+)\n(.*?)\n?end_of_edit\s*\Z", re.DOTALL)
NUMBERS = {"line_number", "start_line", "end_line"}


def clip(text: str) -> str:
    """Cut a long observation the same way every time: equal texts stay equal, others differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{text[:LIMIT]}\n[... cut: {len(text)} chars in all, sha256 {digest}]"


def value(name: str, text: str) -> Any:
    return int(text) if name in NUMBERS and text.isdigit() else text


def parse(action: str) -> tuple[str, dict[str, Any]]:
    """The tool and arguments of one action string."""
    action = action.strip()
    match = RANGE.match(action)
    if match:
        start, end, text = match.groups()
        return "edit", {"start_line": int(start), "end_line": int(end), "replacement_text": text}
    name = action.split(maxsplit=1)[0] if action else ""
    if name == "edit":
        words = shlex.split(action)[1:]
        return "edit", dict(zip(["search", "replace", "replace_all"], words, strict=False))
    if name in SIGNATURES and "\n" not in action:
        words = shlex.split(action)[1:]
        return name, {key: value(key, word) for key, word in zip(SIGNATURES[name], words, strict=False)}
    return "bash", {"command": action}


def convert(trajectory: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The trace lines of one run (SWE-agent records no exit codes or times here: no isError, no at)."""
    lines = []
    for step in trajectory["trajectory"]:
        tool, arguments = parse(step["action"])
        text = clip(step["observation"] or "")
        lines.append(
            {
                "session": session,
                "tool": tool,
                "arguments": arguments,
                "result": {"content": [{"type": "text", "text": text}], "isError": False},
            }
        )
    return lines


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for pair in argv[1:]:
        name, path = pair.split("=", 1)
        lines = convert(json.loads(Path(path).read_text(encoding="utf-8")), name)
        body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        (out / f"{name}.jsonl").write_text(body, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
