"""Every loop family live through a stdio guard process, and its event log replayed to the same verdicts.

Each scenario of tests/families.py runs through a real guard process in front of real
fixture servers, driven by the official SDK client, through the SDK path (a config of two
servers, tools exported as ``server__tool``), each in one of the event log's two forms in
turn; config overrides run through the message relay and the SDK path in both. What the
model saw, what reached the server, what the event log says and what ``replay`` makes of it
must agree. Every family through the message relay in both forms runs in process, in
tests/proxy/test_families_relay.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from tests.families import (
    ALLOW,
    CONSTANT,
    FAMILIES,
    LOG_FORMS,
    OVERRIDES,
    SEND_EMAIL_RULE,
    SERVER_OVERRIDE,
    SERVER_RULES,
    TOOL_OVERRIDE,
    LogForm,
    Scenario,
    Upstream,
    alternating_forms,
    check_logged,
    check_model,
    check_reached,
    check_replayed,
    event_lines,
    log_settings,
    play,
    repeat,
    replay,
    upstream,
)
from tests.harness import ABORT_EXIT_CODE, Connector
from tests.http_harness import write_config

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

UNTOUCHED = Scenario(
    "untouched", "counting", repeat(CONSTANT, 3), (ALLOW, ALLOW, ("warn", "identical", 3)), {"constant": 3}
)
"""The other server's tools keep the session's thresholds."""


def _ids(scenario: Scenario) -> str:
    return scenario.name


async def _run(
    connect: Connector,
    directory: Path,
    scenarios: Sequence[tuple[Scenario, Upstream, str]],
    form: LogForm,
    *,
    command: Sequence[str] = (),
    config: Path | None = None,
) -> None:
    """Plays the scenarios in one stdio session (scenario, its upstream, its tool prefix), then checks it all.

    The guard runs in front of ``command``, or of the servers in ``config``; the settings are the first scenario's.
    """
    events = directory / "events.jsonl"
    settings = dict(scenarios[0][0].settings)
    guard_args = ["--config", str(config)] if config is not None else []
    async with connect.guard_process(
        command, guard_args=guard_args, env=settings | log_settings(events, form)
    ) as guard:
        seen = [await play(guard.session, scenario, prefix) for scenario, _, prefix in scenarios]
        if scenarios[-1][0].aborts:
            await guard.close_stdin()  # as a client does once the guard has closed its stdout
            with anyio.fail_after(10):
                assert await guard.wait_exit() == ABORT_EXIT_CODE
    lines = event_lines(events)
    start = 0
    for (scenario, source, prefix), got in zip(scenarios, seen, strict=True):
        check_model(scenario, got, prefix)
        check_reached(scenario, source.reached())
        mine = lines[start : start + len(scenario.calls)]
        start += len(scenario.calls)
        check_logged(scenario, mine, form)
        assert {line["tool"] for line in mine} == {prefix + call.tool for call in scenario.calls}
        assert len({line.get("server") for line in mine}) == 1  # every line names its server
        assert not prefix or {line["server"] for line in mine} == {source.name}
    assert start == len(lines)
    replayed = await replay(events, settings, config=config, directory=directory)
    check_replayed(lines, replayed, [scenario for scenario, _, _ in scenarios], form)


def _other(server: str) -> str:
    return "tracker" if server == "counting" else "counting"


@pytest.mark.parametrize(("scenario", "form"), alternating_forms([(family.name, family) for family in FAMILIES]))
async def test_family_through_two_server_config(
    scenario: Scenario, form: LogForm, connect: Connector, tmp_path: Path
) -> None:
    """Over stdio with a config of two servers (the SDK path) each family is judged alike, by exported names.

    Each family in one log form (the forms in turn): the message relay runs every family in both.
    """
    source = upstream(tmp_path, scenario.server, scenario.server)
    other = upstream(tmp_path, _other(scenario.server), _other(scenario.server))
    config = write_config(tmp_path / "mcp.json", {source.name: source.entry(), other.name: other.entry()})
    await _run(connect, tmp_path, [(scenario, source, f"{source.name}__")], form, config=config)
    assert other.reached() == {}


@pytest.mark.parametrize("form", LOG_FORMS)
@pytest.mark.parametrize("scenario", OVERRIDES, ids=_ids)
async def test_overrides_through_message_relay(
    scenario: Scenario, form: LogForm, connect: Connector, tmp_path: Path
) -> None:
    """A config's top-level rule for send_email and its one server's thresholds apply live and in replay."""
    source = upstream(tmp_path, "tracker", "tracker")
    config = write_config(
        tmp_path / "mcp.json", {source.name: source.entry(SERVER_RULES)}, {"tools": {"send_email": SEND_EMAIL_RULE}}
    )
    await _run(connect, tmp_path, [(scenario, source, "")], form, config=config)


@pytest.mark.parametrize(("scenario", "form"), alternating_forms([(override.name, override) for override in OVERRIDES]))
async def test_overrides_through_two_server_config(
    scenario: Scenario, form: LogForm, connect: Connector, tmp_path: Path
) -> None:
    """With two servers, a server's own tools section and thresholds apply to its tools and not to the other's."""
    source = upstream(tmp_path, "tracker", "tracker")
    other = upstream(tmp_path, "counting", "counting")
    rules = {**TOOL_OVERRIDE.rules, **SERVER_OVERRIDE.rules}
    config = write_config(tmp_path / "mcp.json", {source.name: source.entry(rules), other.name: other.entry()})
    played = [(scenario, source, "tracker__"), (UNTOUCHED, other, "counting__")]
    await _run(connect, tmp_path, played, form, config=config)
