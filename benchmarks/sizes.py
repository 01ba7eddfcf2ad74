"""How much each scenario does, per ``--size``.

``full`` is the issue's workload; ``smoke`` only proves every scenario still runs
(in seconds, in CI) and its numbers mean nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Size:
    """Workload of every scenario."""

    name: str
    echo_calls: int
    echo_warmup: int
    large_calls: int
    large_warmup: int
    large_bytes: int
    http_sessions: int
    http_calls: int
    """Sequential calls per session in one burst."""
    http_rounds: int
    idle_sessions: int
    text_bytes: int
    image_bytes: int
    fingerprint_repeats: int
    detector_calls: int
    detector_checkpoints: tuple[int, ...]
    profile_calls: int
    startup_rounds: int


SMOKE = Size(
    name="smoke",
    echo_calls=30,
    echo_warmup=5,
    large_calls=4,
    large_warmup=1,
    large_bytes=100_000,
    http_sessions=4,
    http_calls=3,
    http_rounds=2,
    idle_sessions=20,
    text_bytes=1_000_000,
    image_bytes=500_000,
    fingerprint_repeats=3,
    detector_calls=2_000,
    detector_checkpoints=(10, 1_000, 2_000),
    profile_calls=50,
    startup_rounds=2,
)

FULL = Size(
    name="full",
    echo_calls=1_000,
    echo_warmup=100,
    large_calls=200,
    large_warmup=20,
    large_bytes=1_000_000,
    http_sessions=32,
    http_calls=20,
    http_rounds=6,
    idle_sessions=1_000,
    text_bytes=10_000_000,
    image_bytes=5_000_000,
    fingerprint_repeats=15,
    detector_calls=1_000_000,
    detector_checkpoints=(10, 1_000, 10_000, 100_000, 1_000_000),
    profile_calls=3_000,
    startup_rounds=15,
)

SIZES = {size.name: size for size in (SMOKE, FULL)}
