"""The command line's options and ``--help``: the subcommands first, then every setting by group.

Every setting flag is made from the registry (:mod:`mcp_loop_guard.registry`), so a new setting
gets its flag, its help text, its default and its accepted values at once.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from mcp_loop_guard import __version__
from mcp_loop_guard.core.setting import Setting
from mcp_loop_guard.registry import GROUPS

__all__ = ["Formatter", "add_setting_flags", "guard_parser", "help_text"]

_USAGE = """\
mcp-loop-guard [OPTIONS] -- COMMAND [ARG...]   guard one server run as a command (stdio)
       mcp-loop-guard [OPTIONS] --upstream URL        guard one remote server (streamable HTTP or SSE)
       mcp-loop-guard [OPTIONS] --config FILE         guard the servers of an mcpServers JSON file
       mcp-loop-guard {wrap,unwrap,replay,state,demo} ...   (each has its own --help)"""

_DESCRIPTION = """\
Guard MCP servers against agents stuck repeating the same tool call: between the client and
its servers, the guard warns, refuses, or ends the session when calls repeat without progress.

commands:
  wrap      put the guard in front of the servers of a client's config (Claude Desktop, Cursor,
            VS Code, Claude Code, ...): shows the change, --write makes it
  unwrap    take the guard out of a client's config again
  replay    judge recorded calls (trace files, the event log) as the guard would, with other settings
  state     the agents in the state store: `state list`; `state reset KEY` unblocks one
  demo      watch a scripted agent loop against a built-in server through the real guard

Each setting below names its LOOP_GUARD_* variable; it is also a key of a config file's
top-level loopGuard section (warnThreshold or warn_threshold). Flags win over variables,
variables over the file. Every setting, with where each may be set: docs/settings.md."""

_EPILOG = """\
examples:
  mcp-loop-guard -- uvx mcp-server-time
  mcp-loop-guard --transport http --port 8080 --config mcp.json
  mcp-loop-guard --upstream http://127.0.0.1:3001/mcp
  mcp-loop-guard --warn-threshold 4 --ignore-tools 'todo_*' -- npx -y @modelcontextprotocol/server-everything
  mcp-loop-guard demo
  mcp-loop-guard replay --json events.jsonl          (judge recorded calls with other settings)
  mcp-loop-guard state list                        (agents in the state store; `state reset KEY` unblocks one)
  mcp-loop-guard wrap --client claude-desktop      (then --write; see `mcp-loop-guard wrap --help`)

exit codes: 0 client closed the session, 1 the upstream could not be started,
2 bad usage or settings (an HTTP port in use, a state store or event log that cannot be used
included), 3 the session was aborted for looping.
"""


class Formatter(argparse.HelpFormatter):
    """Texts laid out by hand (with line breaks) kept as they are; one-paragraph texts wrapped to the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" not in text:
            return super()._fill_text(text, width, indent)
        return "".join(indent + line for line in text.splitlines(keepends=True))


_METAVARS = {"event_log": "FILE", "scrub": "PRESETS", "state": "STORE"}


def guard_parser(fields: Sequence[Setting]) -> argparse.ArgumentParser:
    """The guard's own parser: how to name the upstreams, then one flag per setting, by group."""
    parser = argparse.ArgumentParser(
        prog="mcp-loop-guard",
        usage=_USAGE,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=Formatter,
    )
    parser.add_argument("--version", action="version", version=f"mcp-loop-guard {__version__}")
    upstreams = parser.add_argument_group(GROUPS["upstreams"][0], "What to guard: -- COMMAND, --upstream or --config.")
    upstreams.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]: the upstream MCP server")
    upstreams.add_argument(
        "--upstream", metavar="URL", help="guard one streamable HTTP (or SSE, path ending in /sse) upstream"
    )
    upstreams.add_argument(
        "--header",
        action="append",
        default=[],
        metavar='"NAME: VALUE"',
        help="with --upstream: a header sent with every request to it (repeatable)",
    )
    upstreams.add_argument(
        "--config", metavar="FILE", help="an mcpServers JSON file: several upstreams, loopGuard settings"
    )
    upstreams.add_argument("--cwd", metavar="DIR", help="working directory of the upstream command")
    add_setting_flags(parser, fields, {"upstreams": upstreams})
    return parser


def add_setting_flags(
    parser: argparse.ArgumentParser,
    fields: Sequence[Setting],
    groups: Mapping[str, argparse._ArgumentGroup] | None = None,
) -> None:
    """One flag per setting, under its group, with its default, accepted values and variable.

    The guard's, replay's and the demo's; ``groups`` are groups the parser already has, by registry group key.
    """
    for key, (title, about) in GROUPS.items():
        members = [field for field in fields if field.group == key]
        if not members:
            continue
        group = (groups or {}).get(key) or parser.add_argument_group(title, about)
        for field in members:
            kind = {"action": argparse.BooleanOptionalAction} if field.type is bool else {"metavar": _metavar(field)}
            group.add_argument(field.flag, default=None, help=help_text(field), **kind)


def help_text(field: Setting) -> str:
    """A flag's help: what it does, its default, its accepted values (unless the flag shows them), its variable."""
    shown = [f"default: {field.shown_default}"]
    if field.type is not bool and field.choices is None:
        shown.append(field.accepted)
    shown.append(field.env)
    return f"{field.description} [{'; '.join(shown)}]".replace("%", "%%")


def _metavar(field: Setting) -> str:
    if field.choices is not None:
        return "{" + ",".join(field.choices) + "}"
    if field.name in _METAVARS:
        return _METAVARS[field.name]
    last = field.name.rpartition("_")[2]
    if last in ("seconds", "bytes"):
        return last.upper()
    return "N" if field.accepted.startswith("an integer") else last.upper()
