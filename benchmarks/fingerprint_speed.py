"""Scenario 3: how fast ``result_key`` fingerprints large tool results.

Every forwarded result is hashed once, so this bounds the guard's cost on big
results. XXH3-128, the fingerprint's hash, over the same bytes is measured beside it:
the floor any fingerprint built on it can reach on this CPU. SHA-256, the hash before
it, is measured too, for runs to compare with.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Callable
from functools import partial

import xxhash

from benchmarks.results import HASH_FLOOR, SHA256_ALONE, Row
from benchmarks.stats import summarize
from mcp_loop_guard.core.fingerprint import result_key

SCENARIO = "fingerprint"


_NOTES = {HASH_FLOOR: "floor: hashing the bytes, nothing else", SHA256_ALONE: "the hash before XXH3"}


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
            HASH_FLOOR: partial(xxhash.xxh3_128, encoded),
            SHA256_ALONE: partial(hashlib.sha256, encoded),
        }
        for via, times in _interleaved(runs, repeats).items():
            median = summarize(times).p50
            values: dict[str, float | int | str] = {
                "mb": size / 1e6,
                "p50_ms": median * 1e3,
                "best_ms": min(times) * 1e3,
                "gb_s": size / median / 1e9,
            }
            note = _NOTES.get(via, "")
            rows.append(Row(SCENARIO, case, via, values, note))
        advance(2)
    return rows
