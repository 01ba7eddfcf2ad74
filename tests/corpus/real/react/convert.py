"""Convert the ReAct notebooks' recorded WebShop and FEVER runs into loop-guard traces, one file per run.

Usage: python convert.py OUT_DIR [webshop=WebShop.ipynb] [fever=FEVER.ipynb] [--labelled]

Reads local copies of the notebooks and the text their run cell printed.

WebShop (``-----------------`` then the episode number, then ``Action: ...`` / ``Observation:
...`` pairs): each ``search[...]`` becomes tool ``search`` with ``{"query"}``, each ``click[...]``
tool ``click`` with ``{"button"}``; the observation is the text result (``Invalid action!`` is
the harness's answer to an action the shop refused, kept as text). ``reset`` (the harness
opening the shop) and ``think[...]`` (the agent's reasoning, answered ``OK.`` by the harness
without touching the shop) are left out. Runs are named ``webshop-<episode>``.

FEVER (``<index> Claim: ...`` then ``Thought n`` / ``Action n`` / ``Observation n``): each
``Search[...]`` becomes tool ``Search`` with ``{"entity"}``, each ``Lookup[...]`` tool ``Lookup``
with ``{"keyword"}``; ``Finish[...]`` (the verdict) and actions written in no valid form are
left out: the environment answers those ``Invalid action: ...`` without looking anything up
(among them calls the agent prefixed with blank lines, which the environment's lower-casing of
the first character leaves capitalised). Runs are named ``fever-<index>``.

Neither log marks errors, times or annotations: ``isError`` is false, no ``at``. With
``--labelled`` only the runs named in ``labels.json`` beside this script are written.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

LIMIT = 2000
WEBSHOP_RUN = re.compile(r"^-----------------\n(\d+)\n", re.M)
WEBSHOP_STEP = re.compile(
    r"^Action: (.*?)\nObservation: (.*?)\n\n(?=Action: |\d+ [\d.]+ [\d.]+ [\d.]+\n|\Z)", re.S | re.M
)
WEBSHOP_CALL = re.compile(r"^(search|click)\[(.*)\]$", re.S)
WEBSHOP_ARGUMENT = {"search": "query", "click": "button"}
FEVER_RUN = re.compile(r"^(\d+) Claim: ", re.M)
FEVER_STEP = re.compile(r"^Action (\d+): (.*?)\nObservation \1: (.*?)\n(?=\nThought |\n\{|\Z)", re.S | re.M)
FEVER_CALL = re.compile(r"^(Search|Lookup)\[(.*)\]$", re.S)
FEVER_ARGUMENT = {"Search": "entity", "Lookup": "keyword"}


def clip(text: str) -> str:
    """Cut long results the same way every time: equal texts stay equal, different ones differ."""
    if len(text) <= LIMIT:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    return f"{text[:LIMIT]}\n[truncated: {len(text)} chars, sha256 {digest}]"


def printed(notebook: Path) -> str:
    """The text the notebook's longest-printing cell wrote: the recorded runs."""
    cells = json.loads(notebook.read_text())["cells"]
    outputs = ["".join("".join(out.get("text", [])) for out in cell.get("outputs", [])) for cell in cells]
    return max(outputs, key=len)


def line(session: str, tool: str, argument: str, value: str, text: str) -> dict[str, Any]:
    result = {"content": [{"type": "text", "text": clip(text)}], "isError": False}
    return {"session": session, "tool": tool, "arguments": {argument: value}, "result": result}


def webshop(text: str) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    parts = WEBSHOP_RUN.split(text)
    for number, body in zip(parts[1::2], parts[2::2], strict=True):
        name = f"webshop-{number}"
        runs[name] = []
        for step in WEBSHOP_STEP.finditer(body):
            call = WEBSHOP_CALL.match(step[1].strip())
            if call:
                runs[name].append(line(name, call[1], WEBSHOP_ARGUMENT[call[1]], call[2], step[2]))
    return runs


def fever(text: str) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    parts = FEVER_RUN.split(text)
    for number, body in zip(parts[1::2], parts[2::2], strict=True):
        name = f"fever-{number}"
        runs[name] = []
        for step in FEVER_STEP.finditer(body):
            call = FEVER_CALL.match(step[2].strip())
            if call and not step[3].startswith("Invalid action"):
                runs[name].append(line(name, call[1], FEVER_ARGUMENT[call[1]], call[2], step[3]))
    return runs


def main() -> None:
    out = Path(sys.argv[1])
    keep = None
    if "--labelled" in sys.argv:
        keep = set(json.loads((Path(__file__).parent / "labels.json").read_text()))
    out.mkdir(parents=True, exist_ok=True)
    readers = {"webshop": webshop, "fever": fever}
    for spec in sys.argv[2:]:
        if spec.startswith("--"):
            continue
        kind, source = spec.split("=", 1)
        for name, lines in readers[kind](printed(Path(source))).items():
            if not lines or (keep is not None and f"{name}.jsonl" not in keep):
                continue
            (out / f"{name}.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))


if __name__ == "__main__":
    main()
