"""Settings: LOOP_GUARD_* variables, CLI overrides, and clear errors for bad values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic.alias_generators import to_camel

from mcp_loop_guard.core import Policy
from mcp_loop_guard.policies import policy_for
from mcp_loop_guard.setting_checks import Secret
from mcp_loop_guard.settings import FileSettings, Settings, SettingsError, load_settings, setting_fields


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


def test_http_defaults_are_the_documented_ones() -> None:
    """With nothing set, the guard serves stdio and its HTTP settings are local and safe."""
    settings = load_settings()
    assert settings.transport == "stdio"
    assert (settings.host, settings.port, settings.stateless) == ("127.0.0.1", 8080, False)
    assert settings.auth_token is None
    assert settings.max_request_bytes == 4 * 1024 * 1024
    assert settings.session_idle_seconds == 1800
    assert settings.session_key_header == "X-Loop-Guard-Key"
    assert (settings.allowed_hosts, settings.allowed_origins) == ((), ())
    assert settings.log_format == "text"


def test_every_http_variable_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each HTTP-related LOOP_GUARD_* variable sets its field; choices are case-insensitive."""
    for name, value in {
        "TRANSPORT": "HTTP",
        "HOST": "10.0.0.5",
        "PORT": "9000",
        "STATELESS": "true",
        "AUTH_TOKEN": "s3cr3t-t0ken",
        "MAX_REQUEST_BYTES": "1024",
        "SESSION_IDLE_SECONDS": "60",
        "SESSION_KEY_HEADER": "X-Agent-Id",
        "ALLOWED_HOSTS": "guard.internal:*, [::1]:9000,example.com",
        "ALLOWED_ORIGINS": "https://app.example.com/,http://localhost:*",
        "LOG_FORMAT": "JSON",
    }.items():
        monkeypatch.setenv(f"LOOP_GUARD_{name}", value)
    settings = load_settings()
    assert settings.transport == "http"
    assert (settings.host, settings.port, settings.stateless) == ("10.0.0.5", 9000, True)
    assert settings.auth_token is not None
    assert settings.auth_token.get_secret_value() == "s3cr3t-t0ken"
    assert (settings.max_request_bytes, settings.session_idle_seconds) == (1024, 60)
    assert settings.session_key_header == "X-Agent-Id"
    assert settings.allowed_hosts == ("guard.internal:*", "[::1]:9000", "example.com")
    assert settings.allowed_origins == ("https://app.example.com", "http://localhost:*")
    assert settings.log_format == "json"


def test_the_token_never_shows_in_reprs_or_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The auth token is a secret: not in repr(), str() or a validation error about another value."""
    monkeypatch.setenv("LOOP_GUARD_AUTH_TOKEN", "s3cr3t-t0ken")
    settings = load_settings()
    assert isinstance(settings.auth_token, Secret)
    assert settings.auth_token.get_secret_value() == "s3cr3t-t0ken"
    assert "s3cr3t" not in repr(settings)
    assert "s3cr3t" not in str(settings)
    assert "s3cr3t" not in repr(FileSettings({"auth_token": "s3cr3t-t0ken"}))
    monkeypatch.setenv("LOOP_GUARD_PORT", "x")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "s3cr3t" not in str(caught.value)


@pytest.mark.parametrize("token", ["", "two words", "tab\there"])
def test_an_empty_or_spaced_token_fails_closed(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    """A set but unusable token is an error that hides the value, never "no authentication"."""
    monkeypatch.setenv("LOOP_GUARD_AUTH_TOKEN", token)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "LOOP_GUARD_AUTH_TOKEN=<hidden> is not valid" in message
    assert "unset it to turn authentication off" in message
    if token:
        assert token not in message


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
        ("TRANSPORT", "websocket", "one of stdio, http, sse"),
        ("PORT", "0", "an integer from 1 to 65535"),
        ("PORT", "70000", "an integer from 1 to 65535"),
        ("MAX_REQUEST_BYTES", "0", "an integer > 0"),
        ("SESSION_IDLE_SECONDS", "-1", "a number > 0"),
        ("SESSION_KEY_HEADER", "X Key", "an HTTP header name"),
        ("HOST", "", "a host name or IP address"),
        ("ALLOWED_HOSTS", "https://example.com", "host:port values (port may be *)"),
        ("ALLOWED_ORIGINS", "example.com", "origins like https://app.example.com:*"),
        ("ALLOWED_ORIGINS", "https://app.example.com/mcp", "(no path)"),
        ("LOG_FORMAT", "xml", "one of text, json"),
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


def test_an_unknown_or_removed_variable_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """LOOP_GUARD_POLL_SECONDS says what took its place, a misspelt variable that it is no setting; both are ignored."""
    monkeypatch.setenv("LOOP_GUARD_POLL_SECONDS", "30")
    monkeypatch.setenv("LOOP_GUARD_WARN_TRESHOLD", "9")
    with caplog.at_level("WARNING", logger="mcp_loop_guard.settings"):
        settings = load_settings()
    assert settings.warn_threshold == 3
    assert "LOOP_GUARD_POLL_SECONDS is ignored: it was removed; a wall-clock wait no longer exempts" in caplog.text
    assert "LOOP_GUARD_WARN_TRESHOLD is ignored: it is not a setting" in caplog.text


def test_a_removed_setting_given_to_load_settings_says_what_took_its_place() -> None:
    """poll_seconds from a file section or a keyword is refused with what replaced it."""
    with pytest.raises(SettingsError, match="'poll_seconds' was removed: a wall-clock wait no longer exempts"):
        load_settings({"poll_seconds": 5})


def test_file_settings_hide_every_token() -> None:
    """The auth token, the named tokens and the admin token never show in a FileSettings repr."""
    section = FileSettings({"auth_token": "s3cr3t-a", "auth_tokens": "alice:s3cr3t-b", "admin_token": "s3cr3t-c"})
    assert "s3cr3t" not in repr(section)


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
    assert [f.name for f in fields] == list(Settings.fields)
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


FILE = "/etc/loop-guard/mcp.json"


def file_settings(**values: Any) -> FileSettings:
    """A loopGuard section as the config loader hands it over, with camelCase keys."""
    return FileSettings(values, {name: f"loopGuard.{to_camel(name)}" for name in values}, FILE)


def test_the_file_fills_in_below_the_environment_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Precedence is flags > environment > file > defaults, setting by setting."""
    monkeypatch.setenv("LOOP_GUARD_BLOCK_THRESHOLD", "8")
    monkeypatch.setenv("LOOP_GUARD_ABORT_THRESHOLD", "4")
    section = file_settings(warn_threshold=2, block_threshold=6, abort_threshold=2, ignore_tools=["a", "b"])
    settings = load_settings(section, abort_threshold="5")
    assert settings.warn_threshold == 2
    assert settings.block_threshold == 8
    assert settings.abort_threshold == 5
    assert settings.ignore_tools == ("a", "b")
    assert settings.reset_after_seconds == 120


def test_a_plain_mapping_is_accepted_as_file_settings() -> None:
    """Any mapping of setting names works as the file layer; keyword-only calls still work."""
    assert load_settings({"transport": "sse", "port": 3000}).port == 3000
    assert load_settings(port="3001").port == 3001


def test_a_bad_file_value_names_the_file_key_and_the_file() -> None:
    """loopGuard.warnThreshold=0 is reported as written in the file, with its path."""
    with pytest.raises(SettingsError) as caught:
        load_settings(file_settings(warn_threshold=0, log_format="xml"))
    message = str(caught.value)
    assert f"loopGuard.warnThreshold=0 in {FILE} is not valid: expected an integer >= 1" in message
    assert f"loopGuard.logFormat='xml' in {FILE}" in message
    assert "LOOP_GUARD_WARN_THRESHOLD" not in message


def test_a_bad_file_value_under_a_good_variable_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file value the environment overrides is never used, so it is never judged."""
    monkeypatch.setenv("LOOP_GUARD_PORT", "9000")
    assert load_settings(file_settings(port="nope")).port == 9000


def test_an_error_names_the_layer_the_bad_value_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flag, variable and file key are each named for the value that was actually used."""
    monkeypatch.setenv("LOOP_GUARD_PORT", "99999")
    with pytest.raises(SettingsError) as caught:
        load_settings(file_settings(port=1, warn_threshold=0), block_threshold="x")
    message = str(caught.value)
    assert "LOOP_GUARD_BLOCK_THRESHOLD='x' (from --block-threshold)" in message
    assert "LOOP_GUARD_PORT='99999' is not valid" in message
    assert f"loopGuard.warnThreshold=0 in {FILE}" in message


def test_a_file_with_an_unknown_setting_is_rejected() -> None:
    """A key that is no setting fails, even when it comes from the file layer."""
    with pytest.raises(SettingsError, match="'warn_treshold' is not a setting"):
        load_settings({"warn_treshold": 2})


def test_policy_for_applies_a_servers_overrides() -> None:
    """Thresholds, enabled and ignore_errors replace the session's; camelCase and snake_case both work."""
    settings = load_settings(warn_threshold="2")
    policy = policy_for(settings, {"blockThreshold": 3, "ignore_errors": True, "enabled": False})
    assert policy == Policy(warn_threshold=2, block_threshold=3, ignore_errors=True, enabled=False)
    assert policy_for(settings, {}) == settings.to_policy()


def test_policy_for_adds_the_servers_ignore_list_with_its_prefix() -> None:
    """A server's ignoreTools name its own tools; they join the session's list, prefixed."""
    settings = load_settings(ignore_tools="todo")
    policy = policy_for(settings, {"ignoreTools": "search, get_*"}, prefix="web__")
    assert policy.ignore_tools == ("todo", "web__search", "web__get_*")
    assert policy.ignores("web__get_page")
    assert not policy.ignores("docs__search")
    assert policy_for(settings, {"ignore_tools": ["search"]}).ignore_tools == ("todo", "search")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"abortThreshold": 1}, "abortThreshold: not a per-server setting"),
        ({"warnThreshold": 0}, "warnThreshold: Input should be greater than or equal to 1"),
        ({"enabled": "yes"}, "enabled: Input should be a valid boolean"),
    ],
)
def test_policy_for_rejects_bad_overrides_naming_the_key(overrides: dict[str, Any], expected: str) -> None:
    """Unknown keys, session-wide keys and bad values are SettingsErrors naming the key."""
    with pytest.raises(SettingsError, match=expected):
        policy_for(load_settings(), overrides)


def test_policy_for_rejects_a_server_warn_not_below_block() -> None:
    """A server whose thresholds cross is a start-up error naming where they were written."""
    where = {"block_threshold": "mcpServers.git.loopGuard.blockThreshold"}
    with pytest.raises(SettingsError) as caught:
        policy_for(load_settings(), FileSettings({"block_threshold": 3}, where, FILE))
    message = str(caught.value)
    assert f"mcpServers.git.loopGuard.blockThreshold in {FILE}" in message
    assert "warn threshold (3) must be below block threshold (3)" in message


def test_policy_for_keeps_a_session_misconfiguration_soft() -> None:
    """Without threshold overrides, a session with warn >= block stays self-disabled, not an error."""
    policy = policy_for(load_settings(warn_threshold="5"), {"ignoreErrors": True})
    assert policy.misconfiguration is not None


def test_setting_fields_say_what_the_http_settings_accept() -> None:
    """The CLI help and errors describe every new setting's values in words."""
    by_name = {f.name: f for f in setting_fields()}
    assert by_name["transport"].choices == ("stdio", "http", "sse")
    assert by_name["port"].accepted == "an integer from 1 to 65535"
    assert by_name["auth_token"].default is None
    assert by_name["allowed_hosts"].type == tuple[str, ...]
    assert "header" in by_name["session_key_header"].accepted
    assert by_name["stateless"].type is bool


def test_file_settings_is_a_read_only_mapping() -> None:
    """FileSettings compares like a dict and tells where each value was written."""
    section = file_settings(warn_threshold=2)
    assert section == {"warn_threshold": 2}
    assert section.where("warn_threshold") == f"loopGuard.warnThreshold in {FILE}"
    assert FileSettings({"port": 1}).where("port") == "port"
    assert Path(section.file).name == "mcp.json"


_MODELS_BUILT = """
import json, sys
from mcp_loop_guard.config import stdio_command_config
from mcp_loop_guard.plan import plan
from mcp_loop_guard.proxy.downstream.stdio import serve_pipe
from mcp_loop_guard.settings import load_settings

config = stdio_command_config(["server"], None)
plan(config, load_settings(config.settings))
print(json.dumps(sorted(name for name in sys.modules if name in ONLY_SOME)))
"""
ONLY_SOME = (
    "mcp_loop_guard.config_file",
    "mcp_loop_guard.overrides",
    "mcp_loop_guard.proxy.relay.events",
    "mcp_loop_guard.reload",
    "mcp_loop_guard.userfile",
    "mcp_loop_guard.budget_model",
    "pydantic",
    "pydantic_settings",
)
"""Modules only a guard given a config file, budgets, overrides or an event log uses (pydantic reads those)."""


def test_a_guard_given_a_command_alone_loads_nothing_it_does_not_use() -> None:
    """Every module loaded costs every guard memory: pydantic (budgets, config files, overrides), reloads and the
    event log wait for a first use."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("LOOP_GUARD_")}
    script = _MODELS_BUILT.replace("ONLY_SOME", repr(ONLY_SOME))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(result.stdout) == []


def test_the_health_interval_reaches_every_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOOP_GUARD_HEALTH_INTERVAL_SECONDS paces the HTTP and SSE probes (the SDK path relies on them too)."""
    from mcp_loop_guard.config import GuardConfig, HttpServer
    from mcp_loop_guard.plan import plan
    from mcp_loop_guard.proxy.downstream.http.probe import HttpProbe, SseProbe
    from mcp_loop_guard.proxy.upstream.exchange import HttpExchange

    monkeypatch.setenv("LOOP_GUARD_HEALTH_INTERVAL_SECONDS", "2.5")
    spec = HttpServer("r", "http://127.0.0.1:9/mcp")
    limits = plan(GuardConfig(None, (spec,), {}), load_settings()).limits
    assert limits.health_interval == 2.5
    assert HttpProbe(spec, limits, HttpExchange(spec)).interval == 2.5
    assert SseProbe(spec, limits).interval == 2.5
