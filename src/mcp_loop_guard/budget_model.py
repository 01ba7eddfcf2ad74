"""Budgets as given, read and checked by a pydantic model: loaded at the first budget, never by a guard without one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from mcp_loop_guard.budgets import BudgetSpec

__all__ = ["BudgetModel", "read_budgets"]


class BudgetModel(BaseModel):
    """One budget as a config file writes it (camelCase or snake_case keys, nothing else)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, validate_by_name=True, validate_by_alias=True
    )

    tools: str = Field(default="*", min_length=1)
    max_calls: int = Field(ge=1)
    per_seconds: float | None = Field(default=None, gt=0)

    def spec(self) -> BudgetSpec:
        """The budget as settings keep it."""
        return BudgetSpec(max_calls=self.max_calls, tools=self.tools, per_seconds=self.per_seconds)


Problem = tuple[tuple[str | int, ...], object, str, str]
"""Where in the list (index, then key), what was given there, the kind of problem, its words."""


def read_budgets(value: object) -> tuple[tuple[BudgetSpec, ...], list[Problem]]:
    """Budgets from a list of objects (or of budgets already read), or what is wrong with each."""
    if not isinstance(value, tuple | list):
        return (), [((), value, "tuple_type", "Input should be a valid tuple")]
    specs: list[BudgetSpec] = []
    problems: list[Problem] = []
    for index, item in enumerate(value):
        if isinstance(item, BudgetSpec):
            specs.append(item)
            continue
        try:
            specs.append(BudgetModel.model_validate(item).spec())
        except ValidationError as error:
            problems += [_problem(index, issue) for issue in error.errors(include_url=False)]
    return tuple(specs), problems


def _problem(index: int, issue: Any) -> Problem:
    return (index, *issue["loc"]), issue["input"], issue["type"], issue["msg"]
