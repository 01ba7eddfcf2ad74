"""Policy: the frozen rules, their self-disable and their ignore patterns."""

from __future__ import annotations

import pytest

from mcp_loop_guard.core import Policy


def test_defaults_are_the_reference_design() -> None:
    """Warn at 3, block at 5, abort after 3 refusals, 120 s request window."""
    policy = Policy()
    assert (policy.warn_threshold, policy.block_threshold, policy.abort_threshold) == (3, 5, 3)
    assert policy.reset_after_seconds == 120
    assert policy.active


def test_warn_not_below_block_is_a_misconfiguration() -> None:
    """warn >= block switches the guard off with a reason naming both thresholds."""
    policy = Policy(warn_threshold=5, block_threshold=4)
    assert policy.misconfiguration is not None
    assert "warn threshold (5)" in policy.misconfiguration
    assert "block threshold (4)" in policy.misconfiguration
    assert not policy.active


def test_disabled_policy_is_inactive() -> None:
    """enabled=False turns the detector off without a misconfiguration."""
    policy = Policy(enabled=False)
    assert policy.misconfiguration is None
    assert not policy.active


@pytest.mark.parametrize(
    ("tool", "ignored"),
    [("todo", True), ("github__search", True), ("github__", True), ("github_x", False), ("TODO", False)],
)
def test_ignore_patterns_are_case_sensitive_shell_wildcards(tool: str, ignored: bool) -> None:
    """Exact names and fnmatch patterns match tool names case-sensitively."""
    assert Policy(ignore_tools=("todo", "github__*")).ignores(tool) is ignored


@pytest.mark.parametrize(
    "values",
    [{"warn_threshold": 0}, {"block_threshold": -1}, {"abort_threshold": 0}, {"reset_after_seconds": 0}],
)
def test_impossible_values_are_rejected(values: dict[str, float]) -> None:
    """Thresholds below 1 or a non-positive window raise ValueError."""
    with pytest.raises(ValueError, match="must be"):
        Policy(**values)  # type: ignore[arg-type]
