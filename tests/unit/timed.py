"""An agent driving the detector at a pace of its own: each call begins some seconds of thinking after the last."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcp_loop_guard.core import Action, LoopDetector, Policy, Verdict

ALLOW, WARN, BLOCK, ABORT = Action.ALLOW, Action.WARN, Action.BLOCK, Action.ABORT


def text(value: str, *, error: bool = False) -> dict[str, Any]:
    """A tools/call result in wire form with one text item."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": value}]}
    if error:
        result["isError"] = True
    return result


class Timed:
    """One agent whose calls begin ``think`` seconds after the previous one ended (plus any ``wait``)."""

    def __init__(
        self, policy: Policy | None = None, *, think: float = 1.0, policy_for: Callable[[str], Policy] | None = None
    ) -> None:
        self.detector = LoopDetector(policy or Policy(), policy_for)
        self.think = think
        self.now = 0.0
        self.reached = 0

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        result: Mapping[str, Any] | None = None,
        *,
        wait: float = 0.0,
        think: float | None = None,
        annotations: Mapping[str, Any] | None = None,
    ) -> Verdict:
        """One call after ``think`` (default: the agent's pace) plus ``wait`` seconds; its verdict."""
        self.now += (self.think if think is None else think) + wait
        ticket, verdict = self.detector.begin(tool, arguments, self.now, annotations=annotations)
        if ticket is None:
            return verdict
        self.reached += 1
        return self.detector.finish(ticket, result if result is not None else text(f"{tool} done"), self.now)

    def batch(self, calls: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> list[Verdict]:
        """Calls of one model response: all begun, then all answered in order."""
        self.now += self.think
        begun = [(self.detector.begin(tool, arguments, self.now), result) for tool, arguments, result in calls]
        verdicts = []
        for (ticket, verdict), result in begun:
            if ticket is None:
                verdicts.append(verdict)
                continue
            self.reached += 1
            verdicts.append(self.detector.finish(ticket, result, self.now))
        return verdicts


def actions(verdicts: Sequence[Verdict]) -> list[Action]:
    """The actions of a run of verdicts."""
    return [verdict.action for verdict in verdicts]


def first(verdicts: Sequence[Verdict], *wanted: Action) -> int | None:
    """1-based number of the first verdict with one of ``wanted``; None when there is none."""
    return next((i + 1 for i, v in enumerate(verdicts) if v.action in wanted), None)
