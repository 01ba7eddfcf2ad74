"""Reading a config file, showing a change as a diff, and writing it safely.

A file is read as every file a user names is (:mod:`mcp_loop_guard.userfile`): a regular
file of at most 64 MB; a FIFO, a device or a larger file is refused with the reason.

Writing keeps a timestamped copy of the file first (never overwriting an earlier one),
then replaces the file in one rename from a temporary file in the same folder, with the
original's permissions, so a client never reads a half-written config. A file that
changed on disk since it was read is not replaced. A symlinked config is written
through: its target changes, the link stays.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mcp_loop_guard.userfile import MIB, UserFileError, read_bytes

BOM = "\ufeff"
BACKUP_TAG = ".bak-mcp-loop-guard-"
MAX_FILE_BYTES = 64 * MIB
"""The largest client config read; Claude Code's ``~/.claude.json`` keeps per-project data and can grow to megabytes."""


class FileError(Exception):
    """The file cannot be read or written: the message says why."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A config file as read: its text (without a byte-order mark) and its bytes."""

    path: Path
    text: str
    raw: bytes

    @property
    def bom(self) -> bool:
        """The file starts with a UTF-8 byte-order mark, which is written back."""
        return self.raw.startswith(BOM.encode())


def load(path: Path) -> Loaded:
    """Reads ``path`` as UTF-8 text: a regular file of at most :data:`MAX_FILE_BYTES`.

    Raises:
        FileNotFoundError: there is no such file.
        FileError: it cannot be read, is not a regular file, is too large or is not UTF-8 text.
    """
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FileError("not UTF-8 text") from None
    return Loaded(path, text.removeprefix(BOM), raw)


def _read(path: Path) -> bytes:
    try:
        return read_bytes(path, limit=MAX_FILE_BYTES)
    except UserFileError as error:
        if error.missing:
            raise FileNotFoundError(error.problem) from None
        raise FileError(error.problem) from None


def diff(loaded: Loaded, new: str) -> str:
    """A unified diff from the file to ``new``, as ``git diff`` would show it."""
    old_lines = loaded.text.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    name = str(loaded.path)
    lines = []
    for line in difflib.unified_diff(old_lines, new_lines, f"{name}", f"{name}"):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)


def write(loaded: Loaded, new: str, *, now: datetime | None = None) -> Path:
    """Replaces the file with ``new`` after writing a backup beside it; returns the backup's path.

    Raises:
        FileError: the file changed since it was read, or a write failed (nothing replaced then).
    """
    target = loaded.path.resolve()
    data = ((BOM if loaded.bom else "") + new).encode("utf-8")
    try:
        info = target.stat()
        backup = _backup(target, loaded.raw, info, now or datetime.now().astimezone())
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise FileError(f"cannot write beside it: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, stat.S_IMODE(info.st_mode))
        if hasattr(os, "chown") and info.st_uid != os.geteuid():
            with contextlib.suppress(PermissionError):
                os.chown(temporary, info.st_uid, info.st_gid)
        if _read(target) != loaded.raw:
            raise FileError("it changed on disk while wrap was working: nothing written, run it again")
        os.replace(temporary, target)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise FileError(f"cannot write it: {error.strerror or error}") from None
    except FileError:
        Path(temporary).unlink(missing_ok=True)
        raise
    _sync_folder(target.parent)
    return backup


def _backup(target: Path, raw: bytes, info: os.stat_result, now: datetime) -> Path:
    """A new file beside ``target`` holding ``raw``, with the same permissions; never overwrites one."""
    stamp = now.strftime("%Y%m%dT%H%M%S")
    for attempt in range(1, 100):
        suffix = "" if attempt == 1 else f"-{attempt}"
        backup = target.with_name(f"{target.name}{BACKUP_TAG}{stamp}{suffix}")
        try:
            descriptor = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, stat.S_IMODE(info.st_mode))
        except FileExistsError:
            continue
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(raw)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(backup, stat.S_IMODE(info.st_mode))
        return backup
    raise FileExistsError(f"{target.name}{BACKUP_TAG}{stamp}")


def _sync_folder(folder: Path) -> None:
    """Makes the rename durable where the platform allows it."""
    if os.name == "nt":
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
