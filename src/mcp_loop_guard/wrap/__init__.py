"""``mcp-loop-guard wrap`` / ``unwrap``: put the guard in front of every server of a client's config.

A dry run by default: it prints what it would do and the diff. ``--write`` applies it,
after a backup. Nothing here imports the MCP SDK, so the command starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from mcp_loop_guard.wrap import files
from mcp_loop_guard.wrap.clients import CLIENTS, Client, Scope, client_of, paths
from mcp_loop_guard.wrap.entries import RefusedError
from mcp_loop_guard.wrap.guard import GuardCommand, GuardNotFoundError, resolve
from mcp_loop_guard.wrap.plan import Rewrite, rewrite

__all__ = ["main"]

EXIT_OK = 0
EXIT_IO = 1
EXIT_USAGE = 2

_EPILOG = """\
clients (--client) and the files they edit:
  claude-desktop   claude_desktop_config.json in the user settings folder
  claude-code      ~/.claude.json (user: mcpServers and every projects.<path>.mcpServers), .mcp.json (project)
  cursor           ~/.cursor/mcp.json (user), .cursor/mcp.json (project)
  vscode           mcp.json in the VS Code user folder (user), .vscode/mcp.json (project)
  windsurf         ~/.codeium/windsurf/mcp_config.json (user)
  gemini           ~/.gemini/settings.json (user), .gemini/settings.json (project)
  codex            ~/.codex/config.toml or $CODEX_HOME/config.toml (user), .codex/config.toml (project)

Without --scope: the project file when the current directory has one, else the user file.
Exit status: 0 done (or nothing to do), 1 the file could not be written, 2 bad usage or a file
that is not what it should be (nothing is written then).
"""


def _parser(undo: bool) -> argparse.ArgumentParser:
    verb = "unwrap" if undo else "wrap"
    parser = argparse.ArgumentParser(
        prog=f"mcp-loop-guard {verb}",
        description=(
            "Take the guard out of every server of an MCP client's config, restoring each entry as it was."
            if undo
            else "Put the guard in front of every server of an MCP client's config."
        )
        + " Prints the change as a diff; --write applies it, after a backup beside the file.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="the config file (or give --client)")
    parser.add_argument("--client", choices=sorted(CLIENTS), help="find this client's config file")
    parser.add_argument("--scope", choices=("user", "project"), help="with --client: which of its files")
    parser.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="only this server (repeatable, or NAME,NAME)"
    )
    parser.add_argument("--write", action="store_true", help="apply the change (default: show it only)")
    parser.add_argument(
        "--guard-command",
        metavar="COMMAND",
        help='the guard command to write, e.g. "uvx mcp-loop-guard" (default: mcp-loop-guard from PATH, '
        "as an absolute path)" + ("; with unwrap: also recognise entries starting with it" if undo else ""),
    )
    return parser


def _locate(args: argparse.Namespace) -> tuple[Path, Client, str] | str:
    """The file, its client and how it was chosen; or the error message."""
    if (args.file is None) == (args.client is None):
        return "give exactly one of FILE or --client"
    if args.file is not None:
        if args.scope is not None:
            return "--scope goes with --client"
        path = Path(args.file).expanduser()
        client = client_of(path)
        return path, client, f"read as {client.title}'s format"
    client = CLIENTS[args.client]
    scopes: list[Scope] = [args.scope] if args.scope else ["project", "user"]
    looked: list[Path] = []
    for scope in scopes:
        candidates = paths(client, scope, home=Path.home(), cwd=Path.cwd(), environ=os.environ)
        if args.scope and not candidates:
            return f"{client.title} has no {scope} config file"
        looked += candidates
        for candidate in candidates:
            if candidate.exists():
                return candidate, client, f"{client.title}, {scope} scope"
    shown = ", ".join(map(str, looked))
    return f"no {client.title} config file found (looked at: {shown})"


def main(argv: Sequence[str], *, undo: bool) -> int:
    """Runs ``wrap`` (or ``unwrap`` when ``undo``) with ``argv``; returns the exit status."""
    try:
        return _main(argv, undo=undo)
    except BrokenPipeError:
        # The reader (``| head``) went away: say nothing more, and let the exit not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _main(argv: Sequence[str], *, undo: bool) -> int:
    verb = "unwrap" if undo else "wrap"
    prepared = _prepare(list(argv), undo=undo)
    if isinstance(prepared, int):
        return prepared
    loaded, client, result, write = prepared
    if result.text == loaded.text:
        print(f"Nothing to {verb}: the file stays as it is.")
        return EXIT_OK
    print()
    print(files.diff(loaded, result.text), end="")
    if not write:
        print("\nDry run: nothing written. Run again with --write to apply it (a backup is written first).")
        return EXIT_OK
    try:
        backup = files.write(loaded, result.text)
    except files.FileError as problem:
        return _fail(verb, f"{loaded.path}: {problem}", EXIT_IO)
    restart = client.title if client.key != "generic" else "the client"
    print(f"\nWrote {loaded.path} (backup: {backup}). Restart {restart}, or reload its MCP servers, to use it.")
    return EXIT_OK


def _prepare(argv: list[str], *, undo: bool) -> tuple[files.Loaded, Client, Rewrite, bool] | int:
    """The file read, its client, the rewrite (reported) and ``--write``; or the exit status of a failure."""
    parser = _parser(undo)
    args = parser.parse_args(argv)
    verb = "unwrap" if undo else "wrap"
    located = _locate(args)
    if isinstance(located, str):
        parser.print_usage(sys.stderr)
        return _fail(verb, located, EXIT_USAGE)
    path, client, how = located
    try:
        guard = resolve(args.guard_command, executable=sys.executable) if not undo or args.guard_command else None
        only = {name.strip() for value in args.only for name in value.split(",") if name.strip()}
        loaded = files.load(path)
        result = rewrite(loaded.text, client, prefix=guard.words if guard else (), undo=undo, only=only)
    except FileNotFoundError:
        return _fail(verb, f"{path}: no such file", EXIT_USAGE)
    except GuardNotFoundError as problem:
        return _fail(verb, str(problem), EXIT_USAGE)
    except (files.FileError, RefusedError) as problem:
        return _fail(verb, f"{path}: {problem}", EXIT_USAGE)
    _report(path, how, guard if not undo else None, result)
    return loaded, client, result, bool(args.write)


def _fail(verb: str, message: str, status: int) -> int:
    """One line on stderr; the exit status."""
    print(f"mcp-loop-guard {verb}: error: {message}", file=sys.stderr)
    return status


def _report(path: Path, how: str, guard: GuardCommand | None, result: Rewrite) -> None:
    """What happens to each server, one line each."""
    print(f"{path} ({how})")
    if guard is not None:
        print(f"guard command: {' '.join(guard.words)} ({guard.how})")
    width = max((len(outcome.name) for outcome in result.outcomes), default=0)
    for outcome in result.outcomes:
        section = "" if outcome.section in ("mcpServers", "servers", "mcp_servers") else f" [{outcome.section}]"
        print(f"  {outcome.name:<{width}}  {outcome.detail}{section}")
    if not result.outcomes:
        print("  (no servers)")
