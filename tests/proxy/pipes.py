"""A pipe for the wire tests: one end as the guard's :class:`Fd`, the other raw, as a peer process has it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Literal

from mcp_loop_guard.proxy.wire.fd import Fd


@asynccontextmanager
async def pipe(ours: Literal["read", "write"]) -> AsyncIterator[tuple[Fd, int]]:
    """The ``ours`` end as an Fd and the other end raw (blocking); both closed at the end."""
    read_end, write_end = os.pipe()
    fd, raw = (Fd(read_end), write_end) if ours == "read" else (Fd(write_end), read_end)
    try:
        yield fd, raw
    finally:
        fd.close()
        with suppress(OSError):
            os.close(raw)
