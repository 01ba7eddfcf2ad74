"""A read buffer kept across reads of one descriptor, resident only while large messages come.

``os.read(fd, 1 MB)`` allocates the whole size afresh for every read: a fresh ``mmap``, shrunk
and unmapped again around a few hundred bytes, which cost more than the rest of a small
call's relaying. Reads go into anonymous memory instead, whose pages become resident only as
large messages fill them. Those pages stay while large reads follow one another (handing
them back after each cost a megabyte result 245 page faults, 0.15 ms of CPU) and go back to
the system once large reads stop, so a megabyte result does not stay resident in every idle
guard.
"""

from __future__ import annotations

import asyncio  # noqa: TID251 - the hand-back is a loop timer (call_later); anyio has no handle-based timers
import mmap
import os
import time
from contextlib import suppress

__all__ = ["RELEASE_AFTER", "ReadBuffer"]

LARGE = 1 << 18
"""A read this large makes the buffer's pages resident until large reads stop."""
RELEASE_AFTER = 2.0
"""Seconds without a large read after which the buffer's pages are handed back to the system."""


class ReadBuffer:
    """Anonymous memory that reads of one descriptor go into; None from :meth:`create` where ``readv`` is missing."""

    def __init__(self, size: int) -> None:
        """Map ``size`` bytes; no page is resident yet."""
        self._memory = mmap.mmap(-1, size)
        self.release_after = RELEASE_AFTER
        self._large_at = 0.0
        """When the buffer last took a large read (``time.monotonic``)."""
        self._release: asyncio.TimerHandle | None = None
        """The pending hand-back of the pages, while a large read's pages are resident."""
        self._closed = False

    @classmethod
    def create(cls, size: int) -> ReadBuffer | None:
        """A buffer, or None on a system without ``readv`` or ``madvise`` (reads then allocate)."""
        if not hasattr(os, "readv") or not hasattr(mmap, "MADV_DONTNEED"):
            return None
        return cls(size)

    def read(self, fd: int) -> bytes:
        """One ``readv`` of ``fd`` into the buffer, returned as bytes of its own.

        Raises:
            BlockingIOError: nothing to read now.
            OSError: the descriptor failed.
        """
        size = os.readv(fd, (self._memory,))
        with memoryview(self._memory) as view:
            chunk = bytes(view[:size])
        if size >= LARGE:
            self._large_at = time.monotonic()
            if self._release is None:
                self._hand_back_later(self.release_after)
        return chunk

    @property
    def holding(self) -> bool:
        """Whether a large read's pages are still kept (until :attr:`release_after` passes without one)."""
        return self._release is not None

    def close(self) -> None:
        """Unmap the memory and drop a pending hand-back."""
        self._closed = True
        if self._release is not None:
            self._release.cancel()
            self._release = None
        with suppress(BufferError):
            self._memory.close()

    def _hand_back_later(self, delay: float) -> None:
        """Hand the pages back ``delay`` seconds from now; at once with no loop to wait on."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # read outside a loop: nothing would hand the pages back later
            self._memory.madvise(mmap.MADV_DONTNEED)
            return
        self._release = loop.call_later(delay, self._hand_back)

    def _hand_back(self) -> None:
        self._release = None
        if self._closed:
            return
        idle = time.monotonic() - self._large_at
        if 0 <= idle < self.release_after:  # large reads went on: wait for the last one to age
            self._hand_back_later(self.release_after - idle)
            return
        self._memory.madvise(mmap.MADV_DONTNEED)
