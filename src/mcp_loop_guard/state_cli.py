"""``mcp-loop-guard state list|reset``: what the state store holds, and unblocking one agent.

An operator sees every agent key with names and counts only (last tool, streak, refusals,
calls in flight, last verdict, expiry, owner): never arguments or results, which the store
does not hold anyway. ``reset`` forgets one key's loop state, so an agent refused or aborted
for looping is served again. A guard still running keeps the state it holds in memory until
it exits (stdio, or an HTTP guard with a file); with Redis a reset applies to the next call.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence

import anyio
from rich.console import Console
from rich.table import Table

from mcp_loop_guard.store import (
    KeyInfo,
    Store,
    StoreError,
    StoreSetupError,
    describe_store,
    open_store,
    sqlite_path,
    store_kind,
)

__all__ = ["main"]

EXIT_OK = 0
EXIT_NOT_FOUND = 1
"""``reset``: no such key; both commands: the store could not be read."""
EXIT_USAGE = 2
"""Bad usage, or a store that cannot be used at all (a missing package, a path another user could write)."""
TIMEOUT = 5.0
"""Seconds one store operation may take: an operator waits, not an agent."""
PIPED_WIDTH = 400
"""Columns of the table when stdout is not a terminal (a key is never cut, nor wrapped)."""
DEFAULT_STATE = "sqlite"
"""What ``LOOP_GUARD_STATE`` defaults to in the guard."""

logger = logging.getLogger("mcp_loop_guard")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-loop-guard state",
        description="List the agents whose loop state the store keeps, or reset one so it is served again.",
        epilog="exit codes: 0 done, 1 no such key (reset) or the store could not be read, 2 bad usage or a store "
        "that cannot be used (a missing package, a path another user could write).",
    )
    state_help = "the store: sqlite, sqlite:///path, redis://host:port/db (default: LOOP_GUARD_STATE, else sqlite)"
    commands = parser.add_subparsers(dest="command", required=True, metavar="{list,reset}")
    listing = commands.add_parser("list", help="every agent key with its names and counts")
    listing.add_argument("--json", action="store_true", help="a JSON array instead of a table")
    listing.add_argument("--state", metavar="SPEC", help=state_help)
    reset = commands.add_parser("reset", help="forget one agent's loop state (unblocks it)")
    reset.add_argument("key", metavar="KEY", help="the key as `state list` shows it")
    reset.add_argument("--state", metavar="SPEC", help=state_help)
    return parser


def main(argv: Sequence[str]) -> int:
    """``state list [--json] [--state SPEC]`` or ``state reset KEY [--state SPEC]``; the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    spec = (args.state or os.environ.get("LOOP_GUARD_STATE") or DEFAULT_STATE).strip()
    try:
        kind = store_kind(spec)
    except ValueError as exc:
        return _usage(parser, f"--state / LOOP_GUARD_STATE: {exc}")
    if kind == "memory":
        return _usage(parser, "memory state lives inside each guard process: give a sqlite or redis store")
    return _run(spec, args)


def _run(spec: str, args: argparse.Namespace) -> int:
    """The command on the store; a store that fails is one line on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("mcp-loop-guard: %(levelname)s %(message)s"))
    logger.addHandler(handler)
    try:
        if args.command == "list":
            return anyio.run(_list, spec, args.json)
        return anyio.run(_reset, spec, args.key)
    except StoreSetupError as exc:
        print(f"mcp-loop-guard: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"mcp-loop-guard: error: {describe_store(spec)}: {exc}", file=sys.stderr)
        return EXIT_NOT_FOUND
    finally:
        logger.removeHandler(handler)


def _usage(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"mcp-loop-guard state: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _missing_file(spec: str) -> bool:
    """A SQLite store whose file does not exist: nothing to show, and nothing to create."""
    return store_kind(spec) == "sqlite" and not sqlite_path(spec).exists()


async def _keys(spec: str) -> list[KeyInfo]:
    if _missing_file(spec):
        return []
    store: Store = open_store(spec, timeout=TIMEOUT)
    try:
        return await store.keys()
    finally:
        await store.aclose()


async def _list(spec: str, as_json: bool) -> int:
    found = await _keys(spec)
    if as_json:
        print(json.dumps([info.summary() for info in found]))
        return EXIT_OK
    if not found:
        print(f"No agent has loop state in {describe_store(spec)}.")
        return EXIT_OK
    console = Console()
    if not console.is_terminal:  # piped: as wide as the table needs, never a key cut short
        console = Console(width=PIPED_WIDTH)
    console.print(_table(found, spec, time.time()))
    return EXIT_OK


def _table(found: Sequence[KeyInfo], spec: str, now: float) -> Table:
    table = Table(title=f"agents in {describe_store(spec)}", title_justify="left")
    for header in ("key", "last tool", "streak", "refusals", "in flight", "last verdict", "expires in", "owner pid"):
        numeric = header in {"streak", "refusals", "in flight", "owner pid"}
        table.add_column(header, justify="right" if numeric else "left", no_wrap=True)
    for info in found:
        summary = info.summary()
        expires = _duration(info.expires - now)
        if summary.get("unreadable"):
            table.add_row(info.key, "(unreadable)", "", "", "", "", expires, _owner(info, now), style="dim")
            continue
        table.add_row(
            info.key,
            str(summary["lastTool"] or "—"),
            str(summary["streak"]),
            str(summary["refusals"]),
            str(summary["inFlight"]),
            str(summary["lastVerdict"] or "—"),
            expires,
            _owner(info, now),
        )
    return table


def _owner(info: KeyInfo, now: float) -> str:
    """The guard holding the key: its pid, marked when it has exited (or runs on another host)."""
    owner = info.owner
    if owner is None:
        return "—"
    if not owner.alive(now):
        return f"{owner.pid} (exited)"
    return str(owner.pid)


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


async def _reset(spec: str, key: str) -> int:
    if _missing_file(spec):
        print(f"mcp-loop-guard: no loop state for {key!r} in {describe_store(spec)}", file=sys.stderr)
        return EXIT_NOT_FOUND
    store: Store = open_store(spec, timeout=TIMEOUT)
    try:
        held = next((info.owner for info in await store.keys() if info.key == key), None)
        found = await store.reset(key)
    finally:
        await store.aclose()
    if not found:
        print(f"mcp-loop-guard: no loop state for {key!r} in {describe_store(spec)}", file=sys.stderr)
        return EXIT_NOT_FOUND
    print(f"reset {key}")
    if held is not None and held.alive(time.time()) and not store.shared:
        print(
            f"mcp-loop-guard: the guard holding it (pid {held.pid}) is still running and keeps its own copy of the "
            "state until it exits; the reset applies to the next guard of this agent",
            file=sys.stderr,
        )
    return EXIT_OK
