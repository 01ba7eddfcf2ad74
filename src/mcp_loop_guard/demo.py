"""``mcp-loop-guard demo``: a scripted agent, the real guard, a built-in server, a timeline.

Everything runs for real: the guard is started as a subprocess in front of the
demo server, and the agent talks to it over stdio with the official SDK client.
The guard gets this environment and the setting flags given to the demo, so
``LOOP_GUARD_MODE=shadow mcp-loop-guard demo`` or ``mcp-loop-guard demo
--warn-threshold 4`` shows what those settings do.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from rich.console import Console
from rich.table import Table
from rich.text import Text

from mcp_loop_guard.cli_options import add_setting_flags
from mcp_loop_guard.exits import EXIT_USAGE
from mcp_loop_guard.proxy.relay.verdicts import MARKER, VERDICT_META_KEY
from mcp_loop_guard.registry import SETTING
from mcp_loop_guard.settings import RULE_SETTINGS, SettingsError, load_settings, setting_fields

if TYPE_CHECKING:
    import mcp_types as types

_STEPS: list[tuple[str, dict[str, Any], str]] = [
    ("search_docs", {"query": "deploy"}, "normal work"),
    ("read_file", {"path": "README.md"}, "normal work"),
    ("read_file", {"path": "Makefile"}, "different arguments: not a loop"),
    *[("job_status", {"job": "build"}, "polling, the result changes") for _ in range(4)],
    *[("job_status", {"job": "deploy"}, "stuck: same call, same answer") for _ in range(8)],
]

_STYLE = {"pass": "green", "warn": "yellow", "block": "red", "abort": "bold red", "closed": "bold red"}


@dataclass
class _Row:
    step: int
    call: str
    why: str
    verdict: str
    told: str


def _summarize(result: types.CallToolResult) -> tuple[str, str]:
    import mcp_types as types  # noqa: PLC0415 - loaded with the session (see _drive)

    meta = (result.meta or {}).get(VERDICT_META_KEY)
    verdict = str(meta["action"]) if isinstance(meta, dict) else "pass"
    texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
    guard_texts = [t for t in texts if t.startswith(MARKER)]
    told = guard_texts[-1] if guard_texts else (texts[0] if texts else "")
    return verdict, _first_sentences(told)


def _first_sentences(text: str, limit: int = 160) -> str:
    """Enough of a long message to read in a table cell."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(". ", 0, limit)
    return text[: cut + 1] if cut > 0 else text[:limit] + "..."


async def _drive(flags: Sequence[str]) -> list[_Row]:
    """The scripted session through a guard started with ``flags`` (after the demo's own) and this environment."""
    # The SDK loads here, not with the module: it takes a second and a half, and ``demo --help`` needs none of it.
    import mcp_types as types  # noqa: PLC0415
    from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: PLC0415
    from mcp.shared.exceptions import MCPError  # noqa: PLC0415

    guard = ["-m", "mcp_loop_guard", "--log-level", "error", *flags, "--transport", "stdio"]
    params = StdioServerParameters(
        command=sys.executable,
        args=[*guard, "--", sys.executable, "-m", "mcp_loop_guard.demo_server"],
        env=dict(os.environ),
    )
    rows: list[_Row] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for step, (tool, args, why) in enumerate(_STEPS, start=1):
            call = f"{tool}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
            try:
                with anyio.fail_after(10):
                    result = await session.send_request(
                        types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=args)),
                        types.CallToolResult,
                    )
            except MCPError:
                rows.append(_Row(step, call, why, "closed", "the guard closed the session"))
                break
            verdict, told = _summarize(result)
            rows.append(_Row(step, call, why, verdict, told))
            if verdict == "abort":
                break
    return rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-loop-guard demo",
        usage="mcp-loop-guard demo [OPTIONS]",
        description="A scripted agent calls a small built-in server through the real guard over stdio, and the "
        "timeline of its calls is printed: normal work, polling, then a stuck call warned, refused and cut off. "
        "The guard takes the LOOP_GUARD_* variables and these flags, as it does in front of a real server.",
    )
    add_setting_flags(parser, [field for field in setting_fields() if field.name != "transport"])
    return parser


def run_demo(argv: Sequence[str]) -> int:
    """Run the scripted session and print its timeline; exit 0 when it behaved as designed."""
    args = _parser().parse_args(argv)
    try:
        settings = load_settings(None, **vars(args))
    except SettingsError as exc:
        print(f"mcp-loop-guard demo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    changed = [name for name in sorted(RULE_SETTINGS) if getattr(settings, name) != SETTING[name].default]
    console = Console(highlight=False, width=max(Console().width, 110))
    console.print(Text("mcp-loop-guard demo: a scripted agent calls a small server through the guard\n", style="bold"))
    rows = anyio.run(_drive, list(argv))
    table = Table(title="Timeline", show_lines=True)
    for column in ("#", "call", "situation", "verdict", "what the model was told"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row.step), row.call, row.why, Text(row.verdict, style=_STYLE.get(row.verdict, "")), Text(row.told)
        )
    console.print(table)
    if changed:
        console.print(f"Your settings change the rules ({', '.join(changed)}): the timeline shows what they do.")
        return 0
    verdicts = [row.verdict for row in rows]
    expected = ["pass"] * 9 + ["warn", "warn", "block", "block", "abort"]
    if verdicts != expected:
        console.print(f"[red]unexpected verdicts:[/red] {verdicts}")
        return 1
    console.print(
        "Different arguments and polling with a changing result pass untouched. The stuck call is warned at its "
        "3rd and 4th identical result and refused from the 5th; the 3rd refusal closes the session "
        "(the guard exits with code 3)."
    )
    return 0
