"""Hypothesis profiles: "fast" by default, "deep" with HYPOTHESIS_PROFILE=deep."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("fast", max_examples=60, deadline=None)
settings.register_profile("deep", max_examples=2_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))
