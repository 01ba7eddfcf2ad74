"""Every loop family live through the HTTP guard, stateful and keyed, and its event log replayed to the same verdicts.

One guard serves all the scenarios that share its session-wide settings (mode, abort
threshold): each scenario gets a server of its own in the guard's config (so what reached
it is its own) and a session of its own (stateful) or a key of its own (``--stateless``
with ``X-Loop-Guard-Key``). A setting a server may carry itself (scrubbing) goes into that
server's ``loopGuard`` section, with the scenario's own rules (one tool's, or the server's
thresholds). At the end ``replay`` judges the whole event log again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tests.families import (
    FAMILIES,
    LOG_FORMS,
    OVERRIDES,
    LogForm,
    Scenario,
    Seen,
    Upstream,
    check_logged,
    check_model,
    check_reached,
    check_replayed,
    event_lines,
    log_settings,
    play,
    replay,
    upstream,
)
from tests.http_harness import KEY_HEADER, Rig, ServerProcess, open_http_session, raw_call

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PER_SERVER = {"LOOP_GUARD_SCRUB": "scrub"}
"""Settings a scenario gives its own server (as this ``loopGuard`` key) rather than the whole guard."""


def _guard_settings(scenario: Scenario) -> dict[str, str]:
    return {key: value for key, value in scenario.settings.items() if key not in PER_SERVER}


def _server_rules(scenario: Scenario) -> dict[str, Any]:
    own = {PER_SERVER[key]: value for key, value in scenario.settings.items() if key in PER_SERVER}
    return {**scenario.rules, **own}


def _groups() -> list[tuple[str, tuple[Scenario, ...]]]:
    """The scenarios by the guard-wide settings they need; each group is named after its settings."""
    found: dict[tuple[tuple[str, str], ...], list[Scenario]] = {}
    for scenario in (*FAMILIES, *OVERRIDES):
        found.setdefault(tuple(sorted(_guard_settings(scenario).items())), []).append(scenario)
    named = []
    for settings, scenarios in found.items():
        name = "+".join(f"{key.removeprefix('LOOP_GUARD_').lower()}-{value}" for key, value in settings)
        named.append((name or "defaults", tuple(scenarios)))
    return named


GROUPS = _groups()


async def _check_closed(
    guard: ServerProcess, session: ClientSession, scenario: Scenario, prefix: str, key: str | None
) -> None:
    """After an abort the session answers no more (stateful), or the key is refused with 429 (keyed)."""
    last = scenario.calls[-1]
    if key is None:
        with anyio.fail_after(10), pytest.raises(MCPError):
            await session.call_tool(prefix + last.tool, dict(last.arguments))
        return
    with anyio.fail_after(10):
        refused = await raw_call(guard.mcp_url, prefix + last.tool, last.arguments, {KEY_HEADER: key})
    assert refused.status_code == 429, refused.text


def _check_scenario(
    scenario: Scenario, seen: list[Seen], source: Upstream, lines: list[dict[str, Any]], *, prefix: str, form: LogForm
) -> None:
    """One scenario's part: what its model saw, what reached its server, its lines in the event log."""
    check_model(scenario, seen, prefix)
    check_reached(scenario, source.reached())
    assert len({line["session"] for line in lines}) == 1, "one session (or key), one agent"
    assert len({line.get("server") for line in lines}) == 1  # every line names its server
    assert not prefix or {line["server"] for line in lines} == {source.name}
    check_logged(scenario, lines, form)


def _runs() -> list[Any]:
    """Each group stateful and keyed, in one log form each (the other form for the other), forms in turn."""
    runs = []
    for index, (name, scenarios) in enumerate(GROUPS):
        for offset, keyed in enumerate((False, True)):
            form = LOG_FORMS[(index + offset) % len(LOG_FORMS)]
            runs.append(pytest.param(scenarios, keyed, form, id=f"{name}-{'keyed' if keyed else 'stateful'}-{form}"))
    return runs


@pytest.mark.parametrize(("scenarios", "keyed", "form"), _runs())
async def test_families_over_http(
    scenarios: tuple[Scenario, ...], keyed: bool, form: LogForm, rig: Rig, tmp_path: Path
) -> None:
    """Over HTTP each session (or key) sees every family's verdicts, and replay agrees with the event log.

    Each group runs stateful and keyed, each in one log form: both forms, both ways, for every group.

    The scenarios sharing the guard are all played and checked, and the log replayed, before
    the test fails with everything that went wrong, so one scenario's failure hides no other's.
    """
    sources = [upstream(tmp_path, scenario.name, scenario.server) for scenario in scenarios]
    config = rig.config(
        {
            source.name: source.entry(_server_rules(scenario))
            for source, scenario in zip(sources, scenarios, strict=True)
        }
    )
    events = tmp_path / "events.jsonl"
    settings = _guard_settings(scenarios[0])
    args = ["--config", str(config), *(["--stateless"] if keyed else [])]
    failures: list[str] = []
    async with rig.guard(args, env=settings | log_settings(events, form)) as guard:
        for scenario, source in zip(scenarios, sources, strict=True):
            start = len(event_lines(events))
            prefix = f"{source.name}__" if len(scenarios) > 1 else ""
            key = f"agent-{scenario.name}" if keyed else None
            async with open_http_session(guard.mcp_url, headers={KEY_HEADER: key} if key else None) as client:
                seen = await play(client.session, scenario, prefix)
                if scenario.aborts:
                    await _check_closed(guard, client.session, scenario, prefix, key)
            try:
                _check_scenario(scenario, seen, source, event_lines(events)[start:], prefix=prefix, form=form)
            except AssertionError as error:
                failures.append(f"{scenario.name}: {error}")
    replayed = await replay(events, settings, config=config, directory=tmp_path)
    try:
        check_replayed(event_lines(events), replayed, scenarios, form)
    except AssertionError as error:
        failures.append(f"replay: {error}")
    assert not failures, "\n\n".join(failures)
