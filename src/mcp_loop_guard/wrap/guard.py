"""Which guard command ``wrap`` writes, and how an entry already running the guard is recognised.

GUI clients (Claude Desktop above all) start servers with a minimal ``PATH``, so a bare
``mcp-loop-guard`` that works in a terminal may not be found there: ``wrap`` writes the
absolute path of the one on ``PATH``, or of the one beside the running interpreter.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp_loop_guard.wrap.launchers import launched, stem

PROGRAM = "mcp-loop-guard"
_NAMES = frozenset({"mcp-loop-guard", "mcp_loop_guard"})
_MODULES = frozenset({"mcp_loop_guard", "mcp_loop_guard.cli"})
_PINNED = re.compile(r"^(mcp-loop-guard|mcp_loop_guard)(\[[^\]]*\])?([@=<>~!].*)?$", re.IGNORECASE)
_EPHEMERAL = re.compile(r"[/\\]archive-v\d+[/\\]")
"""A path inside uv's cache, where ``uvx`` runs tools from environments it may delete."""


class GuardNotFoundError(Exception):
    """No guard command to write: the message says what to do."""


@dataclass(frozen=True, slots=True)
class GuardCommand:
    """The command line that starts the guard, and how it was chosen (for the report)."""

    words: tuple[str, ...]
    how: str


def resolve(
    override: str | None,
    *,
    environ: Mapping[str, str] = os.environ,
    executable: str,
    windows: bool = os.name == "nt",
) -> GuardCommand:
    """The guard command: ``override`` split like a shell would, else an absolute path.

    Raises:
        GuardNotFoundError: no override and no ``mcp-loop-guard`` on PATH or beside ``executable``,
            or the one found lives in a temporary environment.
    """
    if override is not None:
        words = _split(override, windows=windows)
        if not words:
            raise GuardNotFoundError("--guard-command is empty")
        return GuardCommand(tuple(words), "as given with --guard-command")
    found = shutil.which(PROGRAM, path=environ.get("PATH", ""))
    how = "found on PATH"
    if found is None:
        folder = Path(executable).parent
        beside = [folder / name for name in (PROGRAM, f"{PROGRAM}.exe")]
        found = next((str(path) for path in beside if path.is_file()), None)
        how = "not on PATH; the one installed beside this Python"
    if found is None:
        raise GuardNotFoundError(f"{PROGRAM} is not on PATH: install it, or give --guard-command")
    found = os.path.abspath(found)
    if _EPHEMERAL.search(found):
        raise GuardNotFoundError(
            f"{found} is in uv's cache, which may be cleared: install it (uv tool install mcp-loop-guard) "
            f'or give --guard-command "uvx mcp-loop-guard"'
        )
    return GuardCommand((found,), how)


def _split(command: str, *, windows: bool) -> list[str]:
    """Words of a command line; on Windows quotes group words and backslashes stay as written."""
    if not windows:
        return shlex.split(command)
    return [word.strip('"') for word in re.findall(r'"[^"]*"|\S+', command)]


def guard_words(command: str, args: Sequence[str], custom: Sequence[str] = ()) -> int | None:
    """How many of ``args`` belong to starting the guard (0: ``command`` is the guard), or None if it is not.

    Recognised where the guard would be launched: the ``mcp-loop-guard`` program under any
    path, the program a launcher runs (``uvx mcp-loop-guard``, ``python -m mcp_loop_guard``),
    and ``custom`` (the words of ``--guard-command``). An argument that merely has the name (a
    folder given to a server, a launcher's ``--directory``) is not the guard.
    """
    if custom and [command, *args[: len(custom) - 1]] == list(custom):
        return len(custom) - 1
    found = launched([command, *args])
    if found is None:
        return None
    if found.module:
        return found.index if found.name in _MODULES else None
    return found.index if stem(found.name) in _NAMES or _PINNED.match(found.name) else None
