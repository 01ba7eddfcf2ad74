"""Reading a file a user names (the guard's ``--config``, a client's config for ``wrap``), safely.

Such a path can be anything: a FIFO or a device whose read never returns (it would freeze
the guard), a folder, a file of hundreds of megabytes, or a document nested so deep that a
recursive parser runs out of stack. Every file a user names is read here: opened without
blocking, refused unless it is a regular file no larger than the caller's cap, then read
whole; :func:`too_deep` finds nesting no parser should recurse into, before one does.
"""

from __future__ import annotations

import os
import re
import stat
from itertools import accumulate
from pathlib import Path
from typing import Literal

__all__ = ["MAX_DEPTH", "MIB", "UserFileError", "line_of", "read_bytes", "read_text", "too_deep"]

MIB = 1024 * 1024
MAX_DEPTH = 100
"""Deepest nesting of objects and arrays (arrays and inline tables in TOML) accepted in a file a user names."""

_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)  # a FIFO without a writer opens at once instead of waiting for one
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_CHUNK = MIB


class UserFileError(Exception):
    """The file cannot be used; ``problem`` says why, in words, without the path."""

    def __init__(self, problem: str, *, missing: bool = False) -> None:
        """``missing``: there is no such file (a caller may say so its own way)."""
        self.problem = problem
        self.missing = missing
        super().__init__(problem)


def read_bytes(path: Path, *, limit: int) -> bytes:
    """The contents of ``path``, a regular file of at most ``limit`` bytes.

    Raises:
        UserFileError: no such file, not readable, not a regular file, or larger than ``limit``.
    """
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        raise UserFileError(_unreadable(error), missing=isinstance(error, FileNotFoundError)) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UserFileError(f"not a regular file ({_kind(info.st_mode)})")
        if info.st_size > limit:
            raise UserFileError(_too_large(info.st_size, limit))
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(descriptor, _CHUNK):
            size += len(chunk)
            if size > limit:  # it grew while being read
                raise UserFileError(_too_large(size, limit))
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as error:
        raise UserFileError(_unreadable(error)) from None
    finally:
        os.close(descriptor)


def read_text(path: Path, *, limit: int) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark dropped), read as :func:`read_bytes` does.

    Raises:
        UserFileError: as :func:`read_bytes`, or the bytes are not UTF-8.
    """
    try:
        return read_bytes(path, limit=limit).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserFileError("not UTF-8 text") from None


_SKIPPED = {
    # Strings and comments hold brackets that are not nesting. An unclosed one runs to the end.
    "json": re.compile(r'"(?:[^"\\]++|\\[\s\S])*+"?|//[^\n]*+|/\*(?:[^*]++|\*(?!/))*+(?:\*/)?'),
    "toml": re.compile(
        r"'''(?:[^']++|'(?!''))*+(?:''')?"
        r'|"""(?:[^"\\]++|\\[\s\S]|"(?!""))*+(?:""")?'
        r'|"(?:[^"\\\n]++|\\[\s\S])*+"?'
        r"|'[^'\n]*+'?"
        r"|#[^\n]*+"
    ),
}
_TOKENS = {syntax: re.compile(rf"{pattern.pattern}|(?P<bracket>[\[\]{{}}])") for syntax, pattern in _SKIPPED.items()}
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def too_deep(text: str, syntax: Literal["json", "toml"]) -> int | None:
    """Where ``text`` opens its first object or array nested deeper than :data:`MAX_DEPTH`, or None.

    JSON comments (``//``, ``/* */``) are skipped like strings, so JSONC is covered too. The
    common case runs in C (regular expressions, ``accumulate``); only a text that is too deep
    is scanned again, token by token, to find where.
    """
    skipped = _SKIPPED[syntax]
    brackets = _NOT_BRACKET.sub("", skipped.sub("", text))
    if next(filter(MAX_DEPTH.__lt__, accumulate(map(_STEP.__getitem__, brackets))), None) is None:
        return None
    depth = 0
    for match in _TOKENS[syntax].finditer(text):
        if match.lastgroup == "bracket":
            depth += _STEP[match.group()]
            if depth > MAX_DEPTH:
                return match.start()
    return len(text)  # pragma: no cover - the count above found it, so this walk does too


def line_of(text: str, at: int) -> int:
    """The 1-based line number of position ``at``."""
    return text.count("\n", 0, at) + 1


def _unreadable(error: OSError) -> str:
    return f"cannot read it: {error.strerror or error}"


def _too_large(size: int, limit: int) -> str:
    shown = f"{limit // MIB} MB" if limit % MIB == 0 else f"{limit:,} bytes"
    return f"too large ({size:,} bytes; the limit is {shown})"


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")
