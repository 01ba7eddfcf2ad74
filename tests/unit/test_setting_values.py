"""Values as given read into their settings' types: what a variable, flag or file may say, and what it may not."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_loop_guard.budgets import BudgetSpec
from mcp_loop_guard.registry import SETTING, SETTINGS
from mcp_loop_guard.setting_checks import Secret
from mcp_loop_guard.setting_values import read_setting


def test_every_setting_reads_its_own_default_back() -> None:
    """Every type a setting is declared with has a reader: a new type fails here, not at a user's first value."""
    for setting in SETTINGS:
        if setting.default is None:
            continue
        assert read_setting(setting, setting.default) == (setting.default, []), setting.name


@pytest.mark.parametrize(
    ("name", "given", "read"),
    [
        ("enabled", "no", False),
        ("enabled", " ON ", True),
        ("enabled", "1", True),
        ("enabled", 0, False),
        ("warn_threshold", " 4 ", 4),
        ("warn_threshold", "4.0", 4),
        ("warn_threshold", 4.0, 4),
        ("reset_after_seconds", "1e3", 1000.0),
        ("reset_after_seconds", 5, 5.0),
        ("mode", "Shadow", "shadow"),
        ("ignore_tools", " a ,, b", ("a", "b")),
        ("ignore_tools", ["a", "b"], ("a", "b")),
        ("call_timeout_seconds", None, None),
        ("budgets", "search_*=20/3600,5", (BudgetSpec(20, "search_*", 3600.0), BudgetSpec(5))),
        ("budgets", [{"tools": "x", "maxCalls": 2}], (BudgetSpec(2, "x"),)),
        ("auth_token", "tok-1", Secret("tok-1")),
    ],
)
def test_what_a_value_may_say(name: str, given: object, read: object) -> None:
    """Booleans as 1/0, yes/no, on/off; whole numbers as 4.0; choices in any case; lists as text or lists."""
    assert read_setting(SETTING[name], given) == (read, [])


@pytest.mark.parametrize(
    ("name", "given", "kind"),
    [
        ("enabled", "maybe", "bool_parsing"),
        ("enabled", 2, "bool_parsing"),
        ("warn_threshold", "4.5", "int_parsing"),
        ("warn_threshold", "1e3", "int_parsing"),
        ("warn_threshold", 0, "out_of_range"),
        ("port", 70_000, "out_of_range"),
        ("reset_after_seconds", "soon", "float_parsing"),
        ("host", 5, "string_type"),
        ("mode", "loud", "literal_error"),
        ("ignore_tools", 5, "tuple_type"),
        ("budgets", 5, "tuple_type"),
        ("budgets", [{"maxCalls": 0}], "greater_than_equal"),
        ("budgets", "x=y", "value_error"),
        ("session_key_header", "bad header", "value_error"),
    ],
)
def test_what_a_value_may_not_say(name: str, given: object, kind: str) -> None:
    """Each refusal names its kind; the value is not kept."""
    value, issues = read_setting(SETTING[name], given)
    assert [issue.type for issue in issues] == [kind]
    assert issues[0].loc[0] == name
    assert value is given


def test_a_budget_refused_names_its_place_in_the_list() -> None:
    """Budgets' problems say which entry and which key, as the error a user reads shows them."""
    _, issues = read_setting(SETTING["budgets"], [{"maxCalls": 1}, {"maxCalls": 2, "colour": "red"}])
    found: list[Any] = [(issue.loc, issue.type) for issue in issues]
    assert found == [(("budgets", 1, "colour"), "extra_forbidden")]


def test_a_secret_never_shows() -> None:
    """A token compares as its text and shows as stars."""
    secret = Secret("s3cr3t")
    assert secret == Secret("s3cr3t") != Secret("other")
    assert "s3cr3t" not in repr(secret) + str(secret) + repr((secret,))
    assert secret.get_secret_value() == "s3cr3t"
