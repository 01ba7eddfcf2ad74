"""A claimed key's latest state in a file of its own, rewritten in place by one system call per event.

A stdio guard writes its agent's state after every call, before the answer goes out, so a
guard killed at any moment loses no count. A SQLite transaction costs about ten system calls
(locks, WAL frames) and, between real calls with cold caches, a tenth of a millisecond or
more; one ``pwrite`` of a few hundred bytes into the page cache survives the death of the
process just as well. So while a guard holds a key, its state goes to the key's live file;
the SQLite row is written when the guard lets the key go, and by whoever next claims a key
whose guard died (see :class:`~mcp_loop_guard.store.sqlite.SqliteStore`).

A record is ``MAGIC, length, CRC-32`` and then the key, its expiry and the state's JSON: a
record cut short (the machine lost power mid-write) fails its check and is ignored, and the
row, one event older at worst, stands.

The folder and its files are this user's alone (:mod:`mcp_loop_guard.private_files`): a file
is never opened through a symbolic link, nor read unless it is a regular file of ours.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mcp_loop_guard.private_files import open_private, private_directory

__all__ = ["LiveFile", "LiveFiles", "Record"]

MAGIC = b"MLG1"
_HEAD = struct.Struct("<4sII")
_EXPIRES = struct.Struct("<d")
MAX_RECORD = 1 << 20
"""Bytes of a live file read at most: a record is a few hundred bytes, never a megabyte."""


@dataclass(frozen=True, slots=True)
class Record:
    """What a live file holds: a key's state (as stored JSON) and when it expires."""

    key: str
    expires: float
    state: str


def encode(record: Record) -> bytes:
    """The record as written: header, then key, NUL, expiry, state."""
    return _framed(record.key.encode() + b"\0", record.expires, record.state.encode())


def _framed(key: bytes, expires: float, state: bytes) -> bytes:
    """Header and body of a record, from its key's bytes (NUL included) and its state's."""
    body = key + _EXPIRES.pack(expires) + state
    return _HEAD.pack(MAGIC, len(body), zlib.crc32(body)) + body


def decode(data: bytes) -> Record | None:
    """A record, or None for anything else (empty, cut short, another format)."""
    if len(data) < _HEAD.size:
        return None
    magic, length, crc = _HEAD.unpack_from(data)
    body = data[_HEAD.size : _HEAD.size + length]
    if magic != MAGIC or len(body) != length or zlib.crc32(body) != crc:
        return None
    key, sep, rest = body.partition(b"\0")
    if not sep or len(rest) < _EXPIRES.size:
        return None
    try:
        return Record(key.decode(), _EXPIRES.unpack_from(rest)[0], rest[_EXPIRES.size :].decode())
    except UnicodeDecodeError:
        return None


class LiveFile:
    """One held key's file, open for rewriting."""

    def __init__(self, path: Path, fd: int, key: str) -> None:
        """Take over ``fd``, open on ``path`` for ``key``."""
        self.path = path
        self.fd = fd
        self.key = key
        self._prefix = key.encode() + b"\0"
        self._last: tuple[float, bytes] | None = None

    @property
    def last(self) -> Record | None:
        """The record written last, for the row written at release."""
        if self._last is None:
            return None
        expires, state = self._last
        return Record(self.key, expires, state.decode())

    def write(self, expires: float, state: bytes) -> None:
        """Rewrite the file with the key's ``state`` (stored JSON) expiring at ``expires``, as :func:`encode` does.

        One ``pwrite``; a shorter record leaves stale bytes the header excludes. The record is
        built from the key's bytes, encoded once, and the state as it was serialized: this runs
        before every answer a stdio guard sends.

        Raises:
            OSError: the file cannot be written (disk full, I/O error).
        """
        data = _framed(self._prefix, expires, state)
        if hasattr(os, "pwrite"):
            written = os.pwrite(self.fd, data, 0)
        else:  # Windows: no pwrite; the file is ours alone, so seek and write is the same
            os.lseek(self.fd, 0, os.SEEK_SET)
            written = os.write(self.fd, data)
        if written != len(data):
            raise OSError(f"short write to {self.path} ({written} of {len(data)} bytes)")
        self._last = (expires, state)

    def close(self, *, remove: bool) -> None:
        """Close the file; ``remove``: its record is in the row now, so the file goes too."""
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class LiveFiles:
    """The live files of one state file: a folder beside it, a file per key (named by its hash)."""

    def __init__(self, directory: Path) -> None:
        """``directory`` is created at the first :meth:`open`."""
        self.directory = directory

    def path(self, key: str) -> Path:
        """Where ``key``'s live file is."""
        return self.directory / hashlib.sha256(key.encode()).hexdigest()[:32]

    def open(self, key: str) -> LiveFile:
        """Open (or create) ``key``'s file for rewriting, keeping what it holds until the first write.

        Raises:
            UnsafePathError: the folder or the file could be written by another user, or is a link.
            OSError: the folder or the file cannot be created.
        """
        private_directory(self.directory)
        path = self.path(key)
        fd = open_private(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0))
        return LiveFile(path, fd, key)

    def read(self, key: str) -> Record | None:
        """``key``'s record, if its file holds a whole one for that key."""
        record = _read(self.path(key))
        return record if record is not None and record.key == key else None

    def remove(self, key: str) -> bool:
        """Delete ``key``'s file; whether there was one."""
        try:
            self.path(key).unlink()
        except FileNotFoundError:
            return False
        return True

    def records(self) -> Iterator[tuple[Path, Record | None]]:
        """Every file in the folder, with its record (None: unreadable, or being rewritten right now)."""
        try:
            entries = list(self.directory.iterdir())
        except OSError:
            return
        for path in entries:
            yield path, _read(path)


def _read(path: Path) -> Record | None:
    """The record in ``path``; None when it holds none, or is not a private file of ours (a link, a FIFO...)."""
    try:
        fd = open_private(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError:
        return None
    with open(fd, "rb") as file:
        try:
            return decode(file.read(MAX_RECORD))
        except OSError:
            return None
