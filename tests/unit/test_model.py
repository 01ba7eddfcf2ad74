"""Values the detector returns."""

from __future__ import annotations

import dataclasses

import pytest

from mcp_loop_guard.core import ALLOWED, Action, Verdict


def test_actions_escalate_in_order() -> None:
    """ALLOW < WARN < BLOCK < ABORT, so the stronger of two actions is max()."""
    assert sorted(Action) == [Action.ALLOW, Action.WARN, Action.BLOCK, Action.ABORT]
    assert max(Action.WARN, Action.BLOCK) is Action.BLOCK


def test_verdicts_are_frozen_values() -> None:
    """A verdict cannot be changed after the detector returns it."""
    verdict = Verdict(Action.WARN, "t", 3, "why", 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.streak = 4  # type: ignore[misc]
    assert ALLOWED.action is Action.ALLOW
    assert ALLOWED.reason is None
