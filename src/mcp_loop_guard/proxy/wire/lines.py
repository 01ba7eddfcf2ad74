"""Newline-delimited framing: split a byte stream into lines, never holding more than a limit of one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mcp_loop_guard import codec
from mcp_loop_guard.proxy.wire.messages import RequestId

__all__ = ["LineReader", "Oversized"]


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit: dropped, with what is needed to answer it."""

    size: int
    request_id: RequestId | None
    """The top-level ``id`` when it could be read from the line's ends."""


_ID_AT_START = re.compile(rb'^\s*\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_FIRST = re.compile(rb'^\s*\{\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_ID_AT_END = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')
_KEEP = 256


def _read_id(head: bytes, tail: bytes) -> RequestId | None:
    """The top-level id of a message too large to parse: SDKs write it near one end or the other."""
    match = _ID_AT_START.match(head) or _ID_FIRST.match(head) or _ID_AT_END.search(tail)
    if match is None:
        return None
    try:
        value = codec.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


class LineReader:
    """Split a byte stream into lines, never holding more than ``limit`` bytes of one line.

    The pieces of a line that spans reads are kept as they came and joined once, at its
    end: a large message is copied once to assemble. A line over the limit is counted and
    dropped as it streams by, keeping only its two ends.
    """

    def __init__(self, limit: int) -> None:
        """``limit``: the largest line kept, in bytes."""
        self.limit = limit
        self._pieces: list[bytes] = []
        self._held = 0
        """Bytes in ``_pieces``."""
        self._skipped = 0
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        """The lines (without newline) completed by ``chunk``."""
        lines: list[bytes | Oversized] = []
        start = 0
        if not self._pieces and not self._skipped:
            # The common case, a chunk of whole lines: slice them out without copying into the buffer.
            while (end := chunk.find(b"\n", start)) >= 0:
                if end - start > self.limit:
                    self._take(chunk[start:end])
                    lines.append(self._finish())
                else:
                    lines.append(chunk[start:end])
                start = end + 1
            if start < len(chunk):
                self._take(chunk[start:] if start else chunk)
            return lines
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(chunk[start:end])
            lines.append(self._finish())
            start = end + 1
        if start < len(chunk):
            self._take(chunk[start:] if start else chunk)
        return lines

    def _take(self, piece: bytes) -> None:
        if self._skipped:
            self._skipped += len(piece)
            self._tail = (self._tail + piece[-_KEEP:])[-_KEEP:]
            return
        self._pieces.append(piece)
        self._held += len(piece)
        if self._held > self.limit:  # keep the two ends only, without joining what is dropped
            pieces = self._pieces
            self._skipped, self._head, self._tail = self._held, _ends(pieces, 0), _ends(pieces[::-1], -1)
            pieces.clear()
            self._held = 0

    def _finish(self) -> bytes | Oversized:
        if self._skipped:
            found = Oversized(self._skipped, _read_id(self._head, self._tail))
            self._skipped, self._head, self._tail = 0, b"", b""
            return found
        pieces = self._pieces
        line = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self._held = 0
        return line


def _ends(pieces: list[bytes], end: int) -> bytes:
    """The first (``end`` 0) or last (-1) ``_KEEP`` bytes of ``pieces`` (given in that end's order)."""
    kept: list[bytes] = []
    size = 0
    for piece in pieces:
        part = piece[: _KEEP - size] if end == 0 else piece[-(_KEEP - size) :]
        kept.append(part)
        size += len(part)
        if size >= _KEEP:
            break
    return b"".join(kept if end == 0 else kept[::-1])
