"""Settings: LOOP_GUARD_* variables, CLI overrides, and clear errors for bad values."""

from __future__ import annotations

import os

import pytest

from mcp_loop_guard.core import Policy
from mcp_loop_guard.settings import Settings, SettingsError, load_settings, setting_fields


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no LOOP_GUARD_* variable set."""
    for name in list(os.environ):
        if name.upper().startswith("LOOP_GUARD_"):
            monkeypatch.delenv(name)


def test_defaults_are_the_documented_ones() -> None:
    """With nothing set, the settings are the reference design's defaults."""
    settings = load_settings()
    assert settings.enabled is True
    assert (settings.warn_threshold, settings.block_threshold, settings.abort_threshold) == (3, 5, 3)
    assert settings.ignore_tools == ()
    assert settings.ignore_errors is False
    assert settings.use_terminate is False
    assert settings.reset_after_seconds == 120
    assert settings.log_level == "info"
    assert settings.to_policy() == Policy()


def test_every_variable_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each LOOP_GUARD_* variable sets its field and reaches the policy."""
    for name, value in {
        "ENABLED": "false",
        "WARN_THRESHOLD": "2",
        "BLOCK_THRESHOLD": "4",
        "ABORT_THRESHOLD": "1",
        "IGNORE_TOOLS": "todo,github__*",
        "IGNORE_ERRORS": "true",
        "USE_TERMINATE": "yes",
        "RESET_AFTER_SECONDS": "30.5",
        "LOG_LEVEL": "WARNING",
    }.items():
        monkeypatch.setenv(f"LOOP_GUARD_{name}", value)
    settings = load_settings()
    assert settings.log_level == "warning"
    assert settings.to_policy() == Policy(
        enabled=False,
        warn_threshold=2,
        block_threshold=4,
        abort_threshold=1,
        ignore_tools=("todo", "github__*"),
        ignore_errors=True,
        use_terminate=True,
        reset_after_seconds=30.5,
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("todo,github__*", ("todo", "github__*")),
        (" todo , github__* ,, ", ("todo", "github__*")),
        ("", ()),
        ('["todo"]', ('["todo"]',)),
    ],
)
def test_ignore_tools_is_a_plain_comma_separated_list(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: tuple[str, ...]
) -> None:
    """Names are split on commas and trimmed, empties dropped; the value is never JSON-decoded."""
    monkeypatch.setenv("LOOP_GUARD_IGNORE_TOOLS", raw)
    assert load_settings().ignore_tools == expected


def test_overrides_win_over_the_environment_and_none_means_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI values replace environment values; a None override leaves the environment's."""
    monkeypatch.setenv("LOOP_GUARD_WARN_THRESHOLD", "2")
    monkeypatch.setenv("LOOP_GUARD_BLOCK_THRESHOLD", "9")
    settings = load_settings(warn_threshold="4", block_threshold=None, ignore_tools=["a", " b "])
    assert settings.warn_threshold == 4
    assert settings.block_threshold == 9
    assert settings.ignore_tools == ("a", "b")


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("WARN_THRESHOLD", "abc", "an integer >= 1"),
        ("WARN_THRESHOLD", "0", "an integer >= 1"),
        ("BLOCK_THRESHOLD", "-2", "an integer >= 1"),
        ("ABORT_THRESHOLD", "1.5", "an integer >= 1"),
        ("ENABLED", "maybe", "true or false"),
        ("IGNORE_ERRORS", "2", "true or false"),
        ("RESET_AFTER_SECONDS", "0", "a number > 0"),
        ("RESET_AFTER_SECONDS", "soon", "a number > 0"),
        ("LOG_LEVEL", "loud", "one of debug, info, warning, error"),
    ],
)
def test_unparsable_values_are_rejected_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, accepted: str
) -> None:
    """The error names the variable, repeats the bad value and says what is accepted."""
    monkeypatch.setenv(f"LOOP_GUARD_{name}", value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert f"LOOP_GUARD_{name}={value!r}" in message
    assert accepted in message
    assert "\n" not in message


def test_every_bad_value_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two bad variables give one message naming both."""
    monkeypatch.setenv("LOOP_GUARD_WARN_THRESHOLD", "abc")
    monkeypatch.setenv("LOOP_GUARD_ABORT_THRESHOLD", "0")
    with pytest.raises(SettingsError, match=r"LOOP_GUARD_WARN_THRESHOLD.*LOOP_GUARD_ABORT_THRESHOLD"):
        load_settings()


def test_a_bad_override_names_its_flag() -> None:
    """A bad CLI value is reported under its variable and its flag."""
    with pytest.raises(SettingsError, match=r"LOOP_GUARD_BLOCK_THRESHOLD='x' \(from --block-threshold\)"):
        load_settings(block_threshold="x")


def test_an_unknown_override_is_rejected() -> None:
    """A setting name that does not exist is an error, not silently ignored."""
    with pytest.raises(SettingsError, match="'warn_treshold' is not a setting"):
        load_settings(warn_treshold=2)


def test_warn_not_below_block_loads_but_disables_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """warn >= block is not a startup error: the guard switches itself off instead."""
    monkeypatch.setenv("LOOP_GUARD_WARN_THRESHOLD", "5")
    policy = load_settings().to_policy()
    assert policy.misconfiguration is not None
    assert not policy.active


def test_setting_fields_describe_every_setting() -> None:
    """One entry per field, with its variable, flag, type, default and a description."""
    fields = setting_fields()
    assert [f.name for f in fields] == list(Settings.model_fields)
    by_name = {f.name: f for f in fields}
    warn = by_name["warn_threshold"]
    assert (warn.env, warn.flag, warn.type, warn.default) == ("LOOP_GUARD_WARN_THRESHOLD", "--warn-threshold", int, 3)
    assert warn.accepted == "an integer >= 1"
    assert by_name["log_level"].choices == ("debug", "info", "warning", "error")
    assert by_name["ignore_tools"].type == tuple[str, ...]
    assert all(f.description for f in fields)


def test_settings_are_a_plain_model() -> None:
    """Settings can be built from keyword values, as a config file loader would."""
    settings = Settings(warn_threshold=2, ignore_tools="a,b")
    assert settings.warn_threshold == 2
    assert settings.ignore_tools == ("a", "b")
