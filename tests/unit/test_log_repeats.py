"""Repeated log lines: one of a kind per interval, the count of those held back told with the next one."""

from __future__ import annotations

import logging

import pytest

from mcp_loop_guard.log_repeats import RepeatFilter


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record(
    template: str, *args: object, level: int = logging.WARNING, name: str = "mcp_loop_guard.x"
) -> logging.LogRecord:
    """A log record as a logger call makes it."""
    return logging.LogRecord(name, level, __file__, 1, template, args, None)


def passed(repeats: RepeatFilter, *records: logging.LogRecord) -> list[str]:
    """The messages of the records the filter lets through."""
    return [item.getMessage() for item in records if repeats.filter(item)]


def test_a_burst_of_a_kind_per_interval_then_the_count() -> None:
    """1,000 warnings of one template in the interval: the first 3 pass; the next after it says 997 were held."""
    clock = Clock()
    repeats = RepeatFilter(interval=10, burst=3, clock=clock)
    first = passed(repeats, *(record("upstream %s has %d requests waiting", "x", n) for n in range(1000)))
    clock.now = 10.5
    later = passed(repeats, record("upstream %s has %d requests waiting", "x", 1000))

    assert first == [f"upstream x has {n} requests waiting" for n in range(3)]
    assert later == ["upstream x has 1000 requests waiting (997 more like this not shown in the last 10s)"]


def test_kinds_are_counted_apart() -> None:
    """Two templates, two levels, two loggers: each is a kind of its own."""
    repeats = RepeatFilter(interval=10, burst=1, clock=Clock())
    lines = passed(
        repeats,
        record("a %s", 1),
        record("b %s", 1),
        record("a %s", 1, level=logging.ERROR),
        record("a %s", 1, name="mcp_loop_guard.y"),
        record("a %s", 2),
    )
    assert lines == ["a 1", "b 1", "a 1", "a 1"]


def test_a_bare_placeholder_is_keyed_by_its_text() -> None:
    """``logger.error("%s", text)``: different texts are different kinds; the same text repeated is held."""
    repeats = RepeatFilter(interval=10, burst=1, clock=Clock())
    lines = passed(repeats, record("%s", "one"), record("%s", "two"), record("%s", "one"))
    assert lines == ["one", "two"]


@pytest.mark.parametrize(
    "item",
    [record("%s", "relayed", name="mcp_loop_guard.upstream", level=logging.INFO), record("x", level=logging.DEBUG)],
)
def test_debug_lines_and_the_upstreams_own_lines_always_pass(item: logging.LogRecord) -> None:
    """What the user asked for at debug level, and an upstream's stderr relayed as logs, are never held."""
    repeats = RepeatFilter(interval=10, burst=1, clock=Clock())
    assert all(repeats.filter(item) for _ in range(5))


def test_what_is_still_held_is_reported_once() -> None:
    """At exit the last held line of each kind is given with its count, and then forgotten."""
    repeats = RepeatFilter(interval=10, burst=1, clock=Clock())
    passed(repeats, *(record("again %d", n) for n in range(5)))

    held = [(item.getMessage(), count) for item, count in repeats.held()]
    assert held == [("again 4", 4)]
    assert repeats.held() == []
