"""Scenario 3: how fast ``result_key`` fingerprints large tool results.

Every forwarded result is hashed once, so this bounds the guard's cost on big
results. SHA-256 over the same bytes is measured beside it: that is the floor
any SHA-256-based fingerprint can reach on this CPU.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Callable
from functools import partial

from benchmarks.results import SHA256_FLOOR, Row
from benchmarks.stats import summarize
from mcp_loop_guard.core.fingerprint import result_key

SCENARIO = "fingerprint"


def _text(size: int) -> str:
    return ("lorem ipsum dolor sit amet " * (size // 27 + 1))[:size]


def _base64(size: int) -> str:
    return base64.b64encode(os.urandom(size * 3 // 4 + 3)).decode()[:size]


def _interleaved(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Seconds per run of each callable, taken in turn (A B, B A, ...) so noise hits both alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs.items())
    for i in range(repeats):
        for name, run in order if i % 2 == 0 else reversed(order):
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    return times


def measure(text_bytes: int, image_bytes: int, repeats: int, advance: Callable[[int], None]) -> list[Row]:
    """GB/s of ``result_key`` (median of ``repeats``) on one text and one image result."""
    rows = []
    text, image = _text(text_bytes), _base64(image_bytes)
    for case, result, payload in (
        (f"text {text_bytes / 1e6:g} MB", {"content": [{"type": "text", "text": text}]}, text),
        (
            f"image {image_bytes / 1e6:g} MB (base64)",
            {"content": [{"type": "image", "data": image, "mimeType": "image/png"}]},
            image,
        ),
    ):
        encoded = payload.encode()
        size = len(encoded)
        runs: dict[str, Callable[[], object]] = {
            "result_key": partial(result_key, result),
            SHA256_FLOOR: partial(hashlib.sha256, encoded),
        }
        for via, times in _interleaved(runs, repeats).items():
            median = summarize(times).p50
            values: dict[str, float | int | str] = {
                "mb": size / 1e6,
                "p50_ms": median * 1e3,
                "best_ms": min(times) * 1e3,
                "gb_s": size / median / 1e9,
            }
            note = "floor: hashing the bytes, nothing else" if via == SHA256_FLOOR else ""
            rows.append(Row(SCENARIO, case, via, values, note))
        advance(2)
    return rows
