"""Order statistics for latency samples.

Medians and 99th percentiles, never means alone: on a shared machine a few slow
samples drag a mean around, while the median of interleaved samples stays put.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Latency:
    """Summary of one target's per-call times, in seconds."""

    n: int
    p50: float
    p99: float
    mean: float


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of already sorted samples, by linear interpolation."""
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples: Sequence[float]) -> Latency:
    """Median, 99th percentile and mean of ``samples``."""
    ordered = sorted(samples)
    mean = sum(ordered) / len(ordered) if ordered else math.nan
    return Latency(len(ordered), percentile(ordered, 0.5), percentile(ordered, 0.99), mean)


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``, NaN when the baseline is missing or zero."""
    if not baseline or math.isnan(baseline):
        return math.nan
    return value / baseline
