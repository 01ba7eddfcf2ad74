"""Every loop family through the production message relay, in process, and its event log replayed to the same verdicts.

The scenarios of tests/families.py, played by the SDK client through ``Pipe`` (the judge, the
detector, the event log writer) to the same fixture servers the end-to-end tests start as
processes (``counting``, ``tracker``, ``ops``), here running in this event loop. What the model saw,
what reached the server, what the event log says and what ``replay`` makes of it must agree.
The SDK path and config overrides run as real processes in tests/e2e/test_families_live.py.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.families import (
    FAMILIES,
    LOG_FORMS,
    LogForm,
    Scenario,
    check_logged,
    check_model,
    check_reached,
    check_replayed,
    event_lines,
    log_settings,
    play,
    replay,
)
from tests.harness import FIXTURES_DIR
from tests.proxy.inproc import GuardedTransport

pytestmark = pytest.mark.anyio

MODULES = {"counting": "counting_server", "tracker": "tracker_server", "ops": "ops_server"}
"""The fixture script behind each scenario's server name."""


def _server(name: str) -> Any:
    """A fresh SDK server of the fixture script (its ``build()``), importable beside its helpers."""
    if str(FIXTURES_DIR) not in sys.path:
        sys.path.append(str(FIXTURES_DIR))
    return importlib.import_module(MODULES[name]).build()


@pytest.mark.parametrize("form", LOG_FORMS)
@pytest.mark.parametrize("scenario", FAMILIES, ids=lambda scenario: scenario.name)
async def test_family_through_the_relay(
    scenario: Scenario, form: LogForm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model sees each family's verdicts, only the calls let through reach the server, and replay agrees."""
    events = tmp_path / "events.jsonl"
    settings = dict(scenario.settings)
    for key, value in (settings | log_settings(events, form)).items():
        monkeypatch.setenv(key, value)
    transport = GuardedTransport(_server(scenario.server))
    with anyio.fail_after(60):
        async with Client(transport, mode="legacy") as client:
            seen = await play(client.session, scenario)
    assert transport.session is not None
    assert transport.session.aborted.is_set() == scenario.aborts
    check_model(scenario, seen)
    check_reached(scenario, transport.session.child.to_child.called)
    lines = event_lines(events)
    assert len(lines) == len(scenario.calls)
    check_logged(scenario, lines, form)
    assert {line["tool"] for line in lines} == {call.tool for call in scenario.calls}
    assert len({line.get("server") for line in lines}) == 1  # every line names its server
    replayed = await replay(events, settings, config=None, directory=tmp_path)
    check_replayed(lines, replayed, [scenario], form)
