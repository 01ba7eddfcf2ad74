"""A setting's value as given (text from a variable or flag, JSON from a file) read into its declared type.

What a variable may say is what it said when pydantic read it: ``1/0``, ``yes/no``, ``on/off``
for a boolean, ``5`` or ``5.0`` for an integer, choices in any case, lists as comma-separated
text. Budgets alone are read by a pydantic model (:mod:`mcp_loop_guard.budget_model`), loaded
only when some are given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import NoneType, UnionType
from typing import Any, Literal, get_args, get_origin

from mcp_loop_guard.budgets import BudgetSpec
from mcp_loop_guard.core.setting import Setting
from mcp_loop_guard.registry import check_value, parse_value
from mcp_loop_guard.setting_checks import Secret

__all__ = ["Issue", "read_setting"]

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


@dataclass(frozen=True, slots=True)
class Issue:
    """Why one value is not a setting: where (setting name, then list index and key), what was given, why."""

    loc: tuple[str | int, ...]
    input: object
    type: str
    """``value_error`` for a setting's own parse or check; else what kind of value was expected."""
    msg: str
    ctx: dict[str, Any] = field(default_factory=dict)
    """For ``value_error``: ``error``, the exception with the setting's own words."""


class _UnreadError(ValueError):
    def __init__(self, kind: str, msg: str) -> None:
        super().__init__(msg)
        self.kind = kind


def read_setting(setting: Setting, raw: object) -> tuple[Any, list[Issue]]:
    """``raw`` parsed, typed, bounded and checked as ``setting`` says; or the issues that stop it."""
    name = setting.name
    try:
        value = parse_value(setting, raw)
    except ValueError as error:
        return raw, [Issue((name,), raw, "value_error", str(error), {"error": error})]
    if _is_budgets(setting.type):
        from mcp_loop_guard.budget_model import read_budgets  # noqa: PLC0415 - pydantic, for budgets alone

        value, problems = read_budgets(value)
        if problems:
            return raw, [Issue((name, *loc), given, kind, msg) for loc, given, kind, msg in problems]
    else:
        try:
            value = _typed(setting.type, value)
        except _UnreadError as unread:
            return raw, [Issue((name,), raw, unread.kind, str(unread))]
    if (problem := setting.problem(value)) is not None:
        return raw, [Issue((name,), raw, "out_of_range", problem)]
    try:
        return check_value(setting, value), []
    except ValueError as error:
        return raw, [Issue((name,), raw, "value_error", str(error), {"error": error})]


def _is_budgets(kind: Any) -> bool:
    return bool(kind == tuple[BudgetSpec, ...])


def _typed(kind: Any, value: object) -> object:
    """``value`` as ``kind`` (the types settings are declared with), or _UnreadError."""
    if isinstance(kind, UnionType):
        if value is None and NoneType in get_args(kind):
            return None
        (kind,) = (arg for arg in get_args(kind) if arg is not NoneType)
    origin = get_origin(kind)
    if origin is Literal:
        if value in get_args(kind):
            return value
        raise _UnreadError("literal_error", "Input should be " + " or ".join(map(repr, get_args(kind))))
    if origin is tuple:
        if isinstance(value, tuple | list) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise _UnreadError("tuple_type", "Input should be a valid tuple of texts")
    return _READERS[kind](value)


def _boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and (word := value.strip().lower()) in _TRUE | _FALSE:
        return word in _TRUE
    raise _UnreadError("bool_parsing", "Input should be a valid boolean")


def _integer(value: object) -> int:
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        whole, dot, zeros = text.partition(".")
        try:
            return int(whole if dot and zeros.strip("0") == "" and whole.strip("+-") else text)
        except ValueError:
            pass
    raise _UnreadError("int_parsing", "Input should be a valid integer")


def _number(value: object) -> float:
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise _UnreadError("float_parsing", "Input should be a valid number")


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    raise _UnreadError("string_type", "Input should be a valid string")


def _secret(value: object) -> Secret:
    return value if isinstance(value, Secret) else Secret(_text(value))


_READERS: dict[Any, Callable[[object], object]] = {
    bool: _boolean,
    int: _integer,
    float: _number,
    str: _text,
    Secret: _secret,
}
