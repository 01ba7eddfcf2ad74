"""Convert mini-swe-agent trajectories (``*.traj.json``, format ``mini-swe-agent-1``) to traces.

Each command the agent ran becomes one ``bash {"command": ...}`` call; its result is the
observation the model saw next. Usage:

    python convert.py OUT_DIR TRAJ.json [TRAJ.json ...]

writes ``OUT_DIR/<instance_id>.jsonl`` for each trajectory.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
"""The agent's own action pattern: a response with exactly one match ran a command."""
RETURNCODE = re.compile(r"\A<returncode>(-?\d+)</returncode>")
TIMEOUT = "The last command <command>"
LIMIT = 2000


def clip(text: str) -> str:
    """Cut a long observation the same way every time: equal texts stay equal, others differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return f"{text[:LIMIT]}\n[... cut: {len(text)} chars in all, sha256 {digest}]"


def failed(observation: str) -> bool:
    """A non-zero exit code, or the agent's own timeout message."""
    match = RETURNCODE.match(observation)
    if match:
        return int(match.group(1)) != 0
    return observation.startswith(TIMEOUT)


def convert(trajectory: dict[str, Any], session: str) -> list[dict[str, Any]]:
    """The trace lines of one run."""
    messages = trajectory["messages"]
    lines: list[dict[str, Any]] = []
    times: list[float | None] = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        actions = ACTION.findall(message["content"])
        if len(actions) != 1:
            continue  # a format error: no command ran
        following = messages[index + 1] if index + 1 < len(messages) else None
        if following is None or following["role"] != "user":
            continue
        observation = following["content"]
        final = trajectory["info"].get("exit_status") == "Submitted" and index + 2 == len(messages)
        error = False if final else failed(observation)
        lines.append(
            {
                "session": session,
                "tool": "bash",
                "arguments": {"command": actions[0].strip()},
                "result": {"content": [{"type": "text", "text": clip(observation)}], "isError": error},
            }
        )
        response = (message.get("extra") or {}).get("response") or {}
        created = response.get("created")
        times.append(float(created) if isinstance(created, int | float) else None)
    known = [moment for moment in times if moment is not None]
    if lines and len(known) == len(times) and known == sorted(known):
        for line, moment in zip(lines, known, strict=True):
            line["at"] = moment - known[0]
    return lines


def main(argv: list[str]) -> None:
    """Convert each trajectory named on the command line into OUT_DIR."""
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name in argv[1:]:
        trajectory = json.loads(Path(name).read_text(encoding="utf-8"))
        session = trajectory.get("instance_id") or Path(name).name.split(".")[0]
        lines = convert(trajectory, session)
        text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
        (out / f"{session}.jsonl").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
