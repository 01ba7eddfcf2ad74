"""Every setting is declared once, in the registry: Settings, Policy, the per-server and per-tool overrides,
the flags, RULE_SETTINGS, --help and docs/settings.md all agree with it."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from pathlib import Path
from typing import Any

import pytest

from mcp_loop_guard.cli import main
from mcp_loop_guard.cli_options import guard_parser
from mcp_loop_guard.config_file import load_config
from mcp_loop_guard.core import Mode, Policy, ScrubRules
from mcp_loop_guard.core.arguments import ArgumentRules
from mcp_loop_guard.core.registry import RULE
from mcp_loop_guard.core.setting import Scope, Setting
from mcp_loop_guard.overrides import THRESHOLDS, PolicySpec, ToolSpec
from mcp_loop_guard.plan import plan
from mcp_loop_guard.registry import GROUPS, RULE_SETTINGS, SETTINGS, global_settings
from mcp_loop_guard.settings import Settings, load_settings
from mcp_loop_guard.settings_doc import render

ROOT = Path(__file__).resolve().parents[2]
_EXAMPLES: dict[str, object] = {
    "scrub": ["timestamps"],
    "scrub_keys": ["$.meta.id"],
    "ignore_args": ["seed"],
    "budgets": [{"tools": "search_*", "maxCalls": 20}],
    "allowed_hosts": ["guard.example.com"],
    "allowed_origins": ["https://app.example.com"],
    "state": "memory",
    "host": "0.0.0.0",  # noqa: S104 - a value to parse, nothing listens
    "session_key_header": "X-Agent",
    "agent_key": "agent-1",
    "event_log": "events.jsonl",
    "auth_token": "tok-1",
    "auth_tokens": "alice:tok-a",
    "admin_token": "adm-1",
}
"""Values that pass a setting's own check, where its type alone cannot give one."""
_COMPOSED = {
    "scrub": lambda policy: policy.scrub.presets,
    "scrub_keys": lambda policy: policy.scrub.keys,
    "ignore_args": lambda policy: policy.arguments.ignore,
    "ordered_args": lambda policy: policy.arguments.ordered,
    "case_insensitive_args": lambda policy: policy.arguments.case_insensitive,
    "mode": lambda policy: policy.mode,
    "budgets": lambda policy: policy.budgets,
}
"""Where Policy holds the rule settings it keeps in another form."""


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no LOOP_GUARD_* variable set."""
    for name in list(os.environ):
        if name.upper().startswith("LOOP_GUARD_"):
            monkeypatch.delenv(name)


def _name(setting: Setting) -> str:
    return setting.name


def example(setting: Setting) -> Any:  # noqa: PLR0911 - one kind of value per kind of setting
    """A valid value other than the default, as a config file gives it (JSON types)."""
    if setting.name in _EXAMPLES:
        return _EXAMPLES[setting.name]
    if setting.choices is not None:
        return next(choice for choice in setting.choices if choice != setting.default)
    if setting.type is bool:
        return not setting.default
    if setting.is_list:
        return ["x"]
    if "warn" in setting.name:  # every pair of thresholds stays warn < block
        return 1 if setting.default == 2 else 2
    if "block" in setting.name:
        return 9
    if setting.default is None:
        return 5.0
    if setting.le is not None and setting.default + 1 > setting.le:
        return setting.default - 1
    return setting.default * 2 if isinstance(setting.default, float) else setting.default + 1


def in_policy(policy: Policy, name: str) -> Any:
    """What ``policy`` holds of the rule setting ``name``."""
    return _COMPOSED[name](policy) if name in _COMPOSED else getattr(policy, name)


def test_settings_has_one_typed_attribute_per_global_setting_as_declared() -> None:
    """Settings' attributes are the global settings, in order, with the registry's types; unset, each is its default."""
    hints = typing.get_type_hints(Settings)
    del hints["fields"]
    assert list(hints) == list(Settings.fields) == [setting.name for setting in global_settings()]
    defaults = Settings()
    for setting in global_settings():
        assert hints[setting.name] == setting.type, setting.name
        assert getattr(defaults, setting.name) == setting.default, setting.name


def test_policy_defaults_are_the_declared_ones() -> None:
    """Each loop rule's default is Policy's, as it is or in the form Policy keeps it; Settings() makes Policy()."""
    policy = Policy()
    for setting in RULE.values():
        if setting.name not in _COMPOSED:
            assert getattr(policy, setting.name) == setting.default, setting.name
    assert policy.scrub == ScrubRules(RULE["scrub"].default, RULE["scrub_keys"].default)
    assert policy.arguments == ArgumentRules(
        RULE["ignore_args"].default, RULE["ordered_args"].default, RULE["case_insensitive_args"].default
    )
    assert policy.mode == Mode(RULE["mode"].default)
    assert Settings().to_policy() == policy


@pytest.mark.parametrize("setting", [s for s in RULE.values() if (s.ge, s.gt, s.le) != (None, None, None)], ids=_name)
def test_policy_refuses_what_the_setting_does_not_accept(setting: Setting) -> None:
    """The edges of a rule's declared range make a Policy; one step outside raises, naming the setting."""
    low = setting.ge if setting.ge is not None else setting.gt
    assert low is not None
    outside = [low - 1 if setting.ge is not None else low] + ([setting.le + 1] if setting.le is not None else [])
    for value in outside:
        with pytest.raises(ValueError, match=rf"^{setting.name} must be {setting.accepted}"):
            Policy(**{setting.name: type(setting.default or 0)(value)})
    for edge in (setting.ge, setting.le):
        if edge is not None:
            assert getattr(Policy(**{setting.name: int(edge)}), setting.name) == edge


def test_the_override_specs_take_the_settings_of_their_scope() -> None:
    """ToolSpec is every per-tool setting, PolicySpec every per-server one, in the registry's order."""
    assert list(ToolSpec.model_fields) == [s.name for s in SETTINGS if "tool" in s.scopes]
    assert list(PolicySpec.model_fields) == [
        *ToolSpec.model_fields,
        *(s.name for s in SETTINGS if "server" in s.scopes and "tool" not in s.scopes),
    ]


def _config(tmp_path: Path, scope: Scope, key: str, value: object) -> Path:
    """A config of one server `srv` with ``key`` set at ``scope`` (per tool: for the tools `search_*`)."""
    server: dict[str, Any] = {"command": "srv"}
    document: dict[str, Any] = {"mcpServers": {"srv": server}}
    if scope == "global":
        document["loopGuard"] = {key: value}
    elif scope == "server":
        server["loopGuard"] = {key: value}
    else:
        server["loopGuard"] = {"tools": {"search_*": {key: value}}}
    path = tmp_path / f"{scope}-{key}.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize("setting", SETTINGS, ids=_name)
def test_each_setting_is_taken_where_declared_and_judges_there(setting: Setting, tmp_path: Path) -> None:
    """A key in a scope it is declared for is read (either spelling) and reaches the settings or the route's
    policy; in another scope it is refused, naming the key and saying where it may be set."""
    default = plan(load_config(_config(tmp_path, "global", "enabled", True)), load_settings())
    for scope in typing.get_args(Scope):
        for key in (setting.key, setting.name):
            path = _config(tmp_path, scope, key, example(setting))
            if scope not in setting.scopes:
                with pytest.raises(Exception, match=rf"{key}: (applies to|not a)") as caught:
                    load_config(path)
                assert str(path) in str(caught.value)
                continue
            config = load_config(path)
            settings = load_settings(config.settings)
            if scope == "global":
                assert getattr(settings, setting.name) != setting.default, key
            if setting.rule:
                judged = plan(config, settings).policies("srv", "search_docs")
                before = default.policies("srv", "search_docs")
                assert in_policy(judged, setting.name) != in_policy(before, setting.name), key


@pytest.mark.parametrize("setting", global_settings(), ids=_name)
def test_each_flag_sets_its_setting_and_only_rule_settings_change_the_policy(setting: Setting) -> None:
    """A flag's text reaches Settings; the policy changes exactly for the settings in RULE_SETTINGS."""
    value = example(setting)
    if setting.type is bool:
        argv = [setting.flag if value else "--no-" + setting.flag[2:]]
    elif setting.name == "budgets":
        argv = [setting.flag, "search_*=20"]
    else:
        argv = [setting.flag, ",".join(value) if isinstance(value, list) else str(value)]
    args = guard_parser(global_settings()).parse_args([*argv, "--", "srv"])
    settings = load_settings(None, **{s.name: getattr(args, s.name) for s in global_settings()})
    assert getattr(settings, setting.name) != setting.default
    assert (settings.to_policy() != Settings().to_policy()) is (setting.name in RULE_SETTINGS), setting.name


def test_rule_settings_are_the_global_rules() -> None:
    """RULE_SETTINGS (what replay takes and a reload applies) is every global setting declared as a rule."""
    assert {s.name for s in global_settings() if s.rule} == RULE_SETTINGS
    assert {s.name for s in RULE.values() if "global" in s.scopes} <= RULE_SETTINGS


def test_help_lists_the_subcommands_then_every_setting_by_group(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--help: the commands first, then each group's title followed by its flags, each with default and variable."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    commands = text.index("commands:")
    assert all(f"\n  {name} " in text[commands : text.index("options:")] for name in ("wrap", "unwrap", "replay"))
    assert all(f"\n  {name} " in text[commands : text.index("options:")] for name in ("state", "demo"))
    places = [text.index(f"\n{title}:\n") for title, _ in GROUPS.values()]
    assert places == sorted(places)
    assert commands < places[0]
    for setting in global_settings():
        where = text.index(f"  {setting.flag}")
        group = list(GROUPS).index(setting.group)
        assert places[group] < where < (places[group + 1] if group + 1 < len(places) else len(text)), setting.name
        entry = re.split(r"\n  -|\n\n", text[where + 3 :])[0]  # the flag and its help, on one or two lines
        assert f"default: {setting.shown_default}" in entry, setting.name
        assert setting.env in entry, setting.name


def test_replay_takes_a_flag_for_each_rule_setting_and_no_other(capsys: pytest.CaptureFixture[str]) -> None:
    """replay's setting flags are RULE_SETTINGS."""
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = capsys.readouterr().out
    for setting in global_settings():
        assert (f"  {setting.flag}" in text) is (setting.name in RULE_SETTINGS), setting.name


def test_docs_settings_md_is_made_from_the_registry() -> None:
    """docs/settings.md is what the registry renders: a contributor who changes a setting regenerates it."""
    written = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert written == render(), "out of date: run python -m mcp_loop_guard.settings_doc > docs/settings.md"
    for setting in SETTINGS:
        assert f"| `{setting.key}`" in written


def test_declarations_are_well_formed() -> None:
    """Names are unique snake_case, groups known, texts one sentence or more, flags clear of the fixed options."""
    names = [setting.name for setting in SETTINGS]
    assert len(names) == len(set(names))
    assert all(name.replace("_", "").isalnum() and name == name.lower() for name in names)
    assert all(setting.group in GROUPS and setting.description.endswith(".") for setting in SETTINGS)
    assert all(setting.scopes and setting.scopes <= set(typing.get_args(Scope)) for setting in SETTINGS)
    fixed = {"--config", "--upstream", "--header", "--cwd", "--version", "--help"}
    assert not fixed & {setting.flag for setting in SETTINGS}
    assert all(dataclasses.is_dataclass(setting) for setting in SETTINGS)
    assert all(block in names for _, block in THRESHOLDS)
