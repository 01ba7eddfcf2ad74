"""Repeated log lines collapsed: a few lines of a kind per interval, and a count of those held back.

A misbehaving peer can make the guard log the same warning thousands of times a second (an
upstream flooding requests, a full descriptor table refusing every connection): megabytes
of stderr that bury everything else and cost the guard its time. Every record of the guard
goes through one filter on its stderr handler: the first :data:`BURST` records of a kind in
:data:`INTERVAL` seconds pass (a few refusals in a row are each worth a line), the next ones
are counted and dropped, and the first one after the interval passes with that count
appended. Counts still held when the guard exits are written then (:func:`report_held`). A
kind is the logger, the level and the message's template (its text with the arguments left
out); for a template that is only a placeholder, the text itself. Debug records and the
upstreams' own stderr lines always pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["BURST", "FILTER", "INTERVAL", "RepeatFilter", "report_held"]

INTERVAL = 10.0
"""Seconds over which the lines of one kind are counted."""
BURST = 10
"""Lines of one kind let through in each interval."""
KINDS = 1000
"""Kinds remembered at once (the oldest is forgotten first)."""
EXEMPT_LOGGERS = frozenset({"mcp_loop_guard.upstream"})
"""Loggers that pass everything: the upstreams' stderr, relayed line for line."""


@dataclass
class _Kind:
    since: float
    """When the interval of this kind began (with its first line)."""
    passed: int = 1
    held: int = 0
    last: logging.LogRecord | None = None
    """The last record held back, for the report at exit."""


class RepeatFilter(logging.Filter):
    """Lets ``burst`` records of a kind through per interval; the next one through says how many were held back."""

    def __init__(
        self, interval: float = INTERVAL, burst: int = BURST, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``clock``: seconds, monotonic (a test passes its own)."""
        super().__init__()
        self.interval = interval
        self.burst = burst
        self.clock = clock
        self._kinds: dict[tuple[str, int, str], _Kind] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """True for the first ``burst`` records of their kind in each interval."""
        if record.levelno <= logging.DEBUG or record.name in EXEMPT_LOGGERS or getattr(record, "held_report", False):
            return True
        template = record.msg if isinstance(record.msg, str) and record.msg.strip("%s ") else str(record.getMessage())
        key = (record.name, record.levelno, template[:200])
        now = self.clock()
        kind = self._kinds.get(key)
        if kind is not None and now - kind.since < self.interval:
            if kind.passed < self.burst:
                kind.passed += 1
                return True
            kind.held += 1
            kind.last = record
            return False
        self._kinds.pop(key, None)  # (re)inserted last: the dict is kept in order of use
        self._kinds[key] = _Kind(now)
        if len(self._kinds) > KINDS:
            del self._kinds[next(iter(self._kinds))]
        if kind is not None and kind.held:
            record.msg = f"{record.getMessage()} ({_more(kind.held)} in the last {now - kind.since:.0f}s)"
            record.args = None
        return True

    def held(self) -> list[tuple[logging.LogRecord, int]]:
        """The last record of every kind with lines held back, and how many; forgets them."""
        found = [(kind.last, kind.held) for kind in self._kinds.values() if kind.held and kind.last is not None]
        for kind in self._kinds.values():
            kind.held, kind.last = 0, None
        return found


FILTER = RepeatFilter()
"""The guard's one filter, on its stderr handler."""


def report_held() -> None:
    """Write what is still held back (at exit): the last line of each such kind, with its count."""
    for record, count in FILTER.held():
        text = f"{record.getMessage()} (the last of {count} lines like this held back)"
        logging.getLogger(record.name).log(record.levelno, "%s", text, extra={"held_report": True})


def _more(count: int) -> str:
    return f"{count} more like this not shown"
