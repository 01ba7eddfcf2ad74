"""Normalising a recorded trace so that recording it again gives the same file.

Only values that change at every recording while meaning nothing to the trace are replaced,
and always so that equal values stay equal and different values stay different:

- the project's temporary path becomes ``/home/agent/shop``;
- a timestamp read from the clock during the recording becomes the trace's own time of that
  call (``2026-11-30T09:00:00Z`` plus its ``at``), in the same format and time zone; two
  different readings never become one, so a clock's changing answer keeps changing;
- the weekday a clock reports becomes that date's weekday;
- each distinct random UUID becomes a UUID derived from the trace name and its order of
  appearance;
- a script may add replacements of its own (e.g. a test run's duration).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.corpus.workspace import SHOWN_ROOT

BASE = datetime(2026, 11, 30, 9, 0, 0, tzinfo=UTC)
"""The moment a trace begins, as its normalised clock readings tell it."""
MARGIN = timedelta(minutes=1)
"""Timestamps from the recording's start to its end, give or take this, are readings of the clock."""
TIMESTAMP = re.compile(r"\b(\d{4}-\d{2}-\d{2})([T ])(\d{2}:\d{2}:\d{2})(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})")
UUID4 = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\b")
WEEKDAY = re.compile(r'("day_of_week":\s*")(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)(")')
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class Normaliser:
    """Replaces a trace's volatile values consistently across all its lines."""

    def __init__(self, name: str, root: Path, started: datetime, extra: Sequence[tuple[str, str]] = ()) -> None:
        self.name = name
        self.root = str(root)
        self.extra = [(re.compile(pattern), replacement) for pattern, replacement in extra]
        self.recorded = (started - MARGIN, datetime.now(UTC) + MARGIN)
        self.times: dict[str, str] = {}
        self.ids: dict[str, str] = {}
        self.at = 0.0

    def line(self, line: dict[str, Any]) -> dict[str, Any]:
        """A copy of one trace line with its arguments, result and error normalised."""
        self.at = float(line["at"])
        return {
            key: self._value(value) if key in {"arguments", "result", "error"} else value for key, value in line.items()
        }

    def _value(self, value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {name: self._value(item, name) for name, item in value.items()}
        if isinstance(value, list):
            return [self._value(item) for item in value]
        if isinstance(value, str):
            if key == "day_of_week" and value in WEEKDAYS:
                return WEEKDAYS[self._shown_date().weekday()]
            return self._text(value)
        return value

    def _text(self, text: str) -> str:
        text = text.replace(self.root, SHOWN_ROOT)
        text = TIMESTAMP.sub(self._timestamp, text)
        text = WEEKDAY.sub(lambda match: match[1] + WEEKDAYS[self._shown_date().weekday()] + match[3], text)
        text = UUID4.sub(self._uuid, text)
        for pattern, replacement in self.extra:
            text = pattern.sub(replacement, text)
        return text

    def _shown_date(self) -> datetime:
        return BASE + timedelta(seconds=self.at)

    def _timestamp(self, match: re.Match[str]) -> str:
        real = match[0]
        if real in self.times:
            return self.times[real]
        date, separator, clock, fraction, zone = match.groups()
        parsed = datetime.fromisoformat(f"{date}T{clock}{fraction or ''}{'+00:00' if zone == 'Z' else zone}")
        if not self.recorded[0] <= parsed <= self.recorded[1]:
            return real
        digits = len(fraction) - 1 if fraction else 0
        step = timedelta(microseconds=10 ** (6 - digits))
        shown = (BASE + timedelta(seconds=self.at)).astimezone(parsed.tzinfo)
        shown -= timedelta(microseconds=shown.microsecond % (10 ** (6 - digits)))
        taken = set(self.times.values())
        while (text := _format(shown, separator, digits, zone)) in taken:
            shown += step
        self.times[real] = text
        return text

    def _uuid(self, match: re.Match[str]) -> str:
        real = match[0]
        if real not in self.ids:
            digest = hashlib.sha256(f"{self.name}/{len(self.ids)}".encode()).digest()
            self.ids[real] = str(uuid.UUID(bytes=digest[:16], version=4))
        return self.ids[real]


def _format(moment: datetime, separator: str, digits: int, zone: str) -> str:
    text = moment.strftime(f"%Y-%m-%d{separator}%H:%M:%S")
    if digits:
        text += f".{moment.microsecond:06d}"[: digits + 1]
    if zone == "Z":
        return text + "Z"
    offset = moment.strftime("%z")
    return f"{text}{offset[:3]}:{offset[3:]}"
