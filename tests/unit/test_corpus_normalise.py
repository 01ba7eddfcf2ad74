"""The corpus normaliser: volatile values replaced so that equal stays equal and different stays different."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.corpus.normalise import Normaliser
from tests.corpus.workspace import SHOWN_ROOT

ROOT = Path("/var/folders/corpus-abc123/shop")
STARTED = datetime.now(UTC)


def line(at: float, text: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """A trace line whose result is one text."""
    return {
        "session": "s1",
        "tool": "t",
        "arguments": arguments or {},
        "at": at,
        "result": {"content": [{"type": "text", "text": text}], "isError": False},
    }


def shown(normaliser: Normaliser, at: float, text: str) -> str:
    """The normalised text of a one-text line."""
    result: str = normaliser.line(line(at, text))["result"]["content"][0]["text"]
    return result


def iso(moment: datetime) -> str:
    """A timestamp as a monitoring API writes it."""
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def test_project_path_is_replaced_everywhere() -> None:
    """The temporary project path becomes the shown root in arguments and results."""
    normaliser = Normaliser("t", ROOT, STARTED)
    out = normaliser.line(line(0, f"wrote {ROOT}/a.py", {"path": f"{ROOT}/a.py"}))
    assert out["arguments"] == {"path": f"{SHOWN_ROOT}/a.py"}
    assert out["result"]["content"][0]["text"] == f"wrote {SHOWN_ROOT}/a.py"


def test_clock_readings_follow_the_trace_clock_in_their_own_format() -> None:
    """A reading becomes 09:00 plus the line's at, keeping precision and time zone; its weekday follows."""
    normaliser = Normaliser("t", ROOT, STARTED)
    utc = STARTED.replace(microsecond=0).isoformat()
    tokyo = STARTED.replace(microsecond=0).astimezone(timezone(timedelta(hours=9)))
    assert shown(normaliser, 30, f'"datetime": "{utc}"') == '"datetime": "2026-11-30T09:00:30+00:00"'
    assert shown(normaliser, 31, f'"datetime": "{tokyo.isoformat()}"') == '"datetime": "2026-11-30T18:00:31+09:00"'
    assert shown(normaliser, 45, f'"fetched_at": "{iso(STARTED)}"') == '"fetched_at": "2026-11-30T09:00:45.000000Z"'
    assert shown(normaliser, 45, '"day_of_week": "Friday"') == '"day_of_week": "Monday"'


def test_equal_readings_stay_equal_and_different_ones_stay_different() -> None:
    """Two different readings in one batch (same at) stay different; a repeated reading stays the same."""
    normaliser = Normaliser("t", ROOT, STARTED)
    first, second = iso(STARTED), iso(STARTED + timedelta(microseconds=7))
    a, b, again = shown(normaliser, 5, first), shown(normaliser, 5, second), shown(normaliser, 9, first)
    assert a != b
    assert again == a


def test_data_timestamps_are_left_alone() -> None:
    """A timestamp from outside the recording (data, not a clock reading) is kept as it is."""
    normaliser = Normaliser("t", ROOT, STARTED)
    assert shown(normaliser, 3, '"opened_at": "2026-11-29T07:42:00Z"') == '"opened_at": "2026-11-29T07:42:00Z"'


def test_uuids_are_replaced_consistently() -> None:
    """Each distinct UUID gets its own stable replacement, the same one wherever it appears."""
    ids = ["0b6a4f5e-2b1c-4d3e-8f70-1a2b3c4d5e6f", "9c1d2e3f-4a5b-4c6d-9e7f-8a9b0c1d2e3f"]
    one, two = Normaliser("t", ROOT, STARTED), Normaliser("t", ROOT, STARTED)
    shown_one = [shown(one, 0, ids[0]), shown(one, 1, ids[1]), shown(one, 2, ids[0])]
    assert shown_one[0] == shown_one[2] != shown_one[1]
    assert ids[0] not in shown_one
    assert shown(two, 0, ids[0]) == shown_one[0]


@given(st.lists(st.integers(min_value=0, max_value=50_000_000), min_size=2, max_size=30, unique=True))
def test_distinct_readings_never_merge(offsets: list[int]) -> None:
    """However close together, distinct clock readings normalise to distinct values."""
    normaliser = Normaliser("t", ROOT, STARTED)
    readings = [iso(STARTED + timedelta(microseconds=offset)) for offset in offsets]
    outs = [shown(normaliser, 1.0, reading) for reading in readings]
    assert len(set(outs)) == len(outs)
