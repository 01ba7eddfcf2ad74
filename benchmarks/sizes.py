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
    settle_seconds: float
    """How long a memory measurement waits for the server to finish what each session started."""


SMOKE = Size(
    name="smoke",
    echo_calls=6,
    echo_warmup=1,
    large_calls=2,
    large_warmup=1,
    large_bytes=100_000,
    http_sessions=2,
    http_calls=2,
    http_rounds=2,
    idle_sessions=3,
    text_bytes=100_000,
    image_bytes=50_000,
    fingerprint_repeats=2,
    detector_calls=200,
    detector_checkpoints=(10, 100, 200),
    profile_calls=10,
    startup_rounds=1,
    settle_seconds=0.1,
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
    settle_seconds=1.0,
)

SIZES = {size.name: size for size in (SMOKE, FULL)}
