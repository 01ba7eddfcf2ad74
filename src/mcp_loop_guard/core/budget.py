"""Call budgets: caps on how many calls one agent makes, loops or not.

A budget counts an agent's calls to the tools it covers (which ones is decided outside the
core: the policy of a call carries the budgets that count it) in windows of ``per_seconds``
starting at the first counted call, or, without a window, for as long as the agent's state
lives. The call that would exceed ``max_calls`` is refused with a text naming the budget and
when it resets. Refused calls are not counted, and a budget's refusals are not loops: they
never count toward closing a session.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_BUDGETS", "Budget", "BudgetUse", "charge", "over_budget", "wording"]

MAX_BUDGETS = 32
"""Budgets whose use one state keeps (the least recently charged forgotten first)."""


@dataclass(frozen=True, slots=True)
class Budget:
    """At most ``max_calls`` calls to the tools ``pattern`` names, per ``per_seconds`` (None: ever)."""

    pattern: str
    """The tools it covers as the operator wrote them (``*``: every tool), for texts and keys."""
    max_calls: int
    per_seconds: float | None = None
    scope: str = ""
    """The server whose tools it covers by their own names; "" for names the client sees."""

    def __post_init__(self) -> None:
        """Reject what no setting could mean.

        Raises:
            ValueError: a cap below 1 or a window that is not positive.
        """
        if self.max_calls < 1:
            msg = f"maxCalls must be at least 1, got {self.max_calls!r}"
            raise ValueError(msg)
        if self.per_seconds is not None and not self.per_seconds > 0:
            msg = f"perSeconds must be positive, got {self.per_seconds!r}"
            raise ValueError(msg)

    @property
    def key(self) -> str:
        """Where its use is kept in the state: a new cap on reload keeps the calls already counted."""
        window = "session" if self.per_seconds is None else f"{self.per_seconds:g}s"
        return f"{self.scope}:{self.pattern}:{window}"

    @property
    def name(self) -> str:
        """How texts and operators name it."""
        tools = "any tool" if self.pattern == "*" else f"`{self.pattern}`"
        server = f" on server `{self.scope}`" if self.scope else ""
        window = "per session" if self.per_seconds is None else f"per {_duration(self.per_seconds, unit=True)}"
        return f"{self.max_calls} calls to {tools}{server} {window}"


BudgetUse = dict[str, tuple[float, int]]
"""Budget key -> (window start, calls counted in it)."""


def _used(use: BudgetUse, budget: Budget, now: float) -> tuple[float, int]:
    """(window start, calls counted) of the window ``now`` falls in."""
    start, count = use.get(budget.key, (now, 0))
    if budget.per_seconds is not None and now - start >= budget.per_seconds:
        return now, 0
    return start, count


def over_budget(use: BudgetUse, budgets: tuple[Budget, ...], now: float) -> tuple[Budget, int, float | None] | None:
    """The first budget one more call would exceed: (budget, calls counted, seconds until it resets or None)."""
    for budget in budgets:
        start, count = _used(use, budget, now)
        if count >= budget.max_calls:
            resets = None if budget.per_seconds is None else max(0.0, start + budget.per_seconds - now)
            return budget, count, resets
    return None


def charge(use: BudgetUse, budgets: tuple[Budget, ...], now: float) -> None:
    """Count one call against every budget given."""
    for budget in budgets:
        start, count = _used(use, budget, now)
        use.pop(budget.key, None)
        use[budget.key] = (start, count + 1)  # most recently charged last
    while len(use) > MAX_BUDGETS:
        del use[next(iter(use))]


def wording(budget: Budget, resets_in: float | None, *, held_back: bool = False) -> str:
    """The refusal's text (or, in warn mode, the warning's): which budget ran out, and when it resets."""
    when = (
        "it does not reset during this session"
        if resets_in is None
        else f"it resets in {_duration(max(resets_in, 1.0))}"
    )
    if held_back:
        return (
            f"This call is over this agent's budget of {budget.name} ({when}); "
            "in enforce mode it would have been refused. Finish with what you have."
        )
    return (
        f"Refused by the loop guard: this agent's budget of {budget.name} is used up; {when}. "
        "This is a limit set by the operator, not an error in your call: do not retry it. "
        "Finish with what you have, or tell the user the budget ran out."
    )


def _duration(seconds: float, *, unit: bool = False) -> str:
    """``3600`` as "hour" (a unit, after "per") or "1 hour"; minutes and seconds alike."""
    for size, name in ((3600, "hour"), (60, "minute"), (1, "second")):
        if seconds >= size:
            count = round(seconds / size) if size > 1 and seconds % size else int(seconds // size)
            if size > 1 and seconds % size and seconds < 2 * size:
                continue  # 90 s reads better as 90 seconds than as 2 minutes
            if count == 1:
                return name if unit else f"1 {name}"
            return f"{count} {name}s"
    return "second" if unit else "1 second"  # under a second: say a second
