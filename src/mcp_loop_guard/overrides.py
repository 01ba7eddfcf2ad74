"""What a server's or a tool's ``loopGuard`` section may override: models made from the registry's scopes.

``ToolSpec`` takes every setting that may be set per tool, ``PolicySpec`` every one that may be
set per server (its ``tools`` section is read pattern by pattern, as ``ToolSpec``). Keys are
camelCase or snake_case; values are strict (a file's ``"2"`` is not the number 2) but lists may
be comma-separated text, as in the environment. Values are read and checked as the registry
says, as in ``Settings``.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator
from pydantic.alias_generators import to_camel

from mcp_loop_guard.budget_model import BudgetModel
from mcp_loop_guard.core.setting import Scope, Setting
from mcp_loop_guard.registry import SETTING, check_value, parse_value, settable

__all__ = ["PER_SERVER", "THRESHOLDS", "PolicySpec", "Spec", "ToolSpec", "settable"]


class Spec(BaseModel):
    """The overrides of one scope as given; the fields are made from the registry (see :func:`_spec`)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        defer_build=True,  # built at the first override given: a guard without one never pays for it
    )

    @field_validator("*", mode="before")
    @classmethod
    def _parse(cls, value: object, info: ValidationInfo) -> object:
        """Text as each setting reads it: lists split on commas, budgets' short form."""
        setting = SETTING.get(str(info.field_name))
        return value if setting is None else parse_value(setting, value)

    @field_validator("*")
    @classmethod
    def _check(cls, value: Any, info: ValidationInfo) -> Any:
        """Each setting's own check (scrub presets, JSON paths...)."""
        setting = SETTING.get(str(info.field_name))
        return value if setting is None else check_value(setting, value)


THRESHOLDS: Final = tuple(
    (setting.name, setting.name.removesuffix("warn_threshold") + "block_threshold")
    for setting in settable("tool")
    if setting.name.endswith("warn_threshold")
)
"""Each family's (warn, block) pair: one given alone must still leave warn below block."""


def _model_type(setting: Setting) -> Any:
    """The type pydantic reads ``setting`` as: a budget is read by its own model (kept as a spec in Settings)."""
    return tuple[BudgetModel, ...] if setting.name == "budgets" else setting.type


def _spec(name: str, scope: Scope, base: type[Spec]) -> type[Spec]:
    """A model of the settings of ``scope`` that ``base`` does not have yet; None means "not given"."""
    fields: dict[str, Any] = {
        setting.name: (_model_type(setting) | None, Field(default=None, ge=setting.ge, gt=setting.gt, le=setting.le))
        for setting in settable(scope)
        if setting.name not in base.model_fields
    }
    return create_model(name, __base__=base, __module__=__name__, **fields)


ToolSpec: Final = _spec("ToolSpec", "tool", Spec)
"""The settings one tool (or pattern of tools) may override."""
PolicySpec: Final = _spec("PolicySpec", "server", ToolSpec)
"""What one server may override: everything a tool may, its own ignore list and budgets (its ``tools``
section is read pattern by pattern, as :data:`ToolSpec`)."""

PER_SERVER: Final = "per-server settings: " + ", ".join([*map(to_camel, PolicySpec.model_fields), "tools"])
