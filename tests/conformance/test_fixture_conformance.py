"""The fixture server passes every server scenario of the official MCP conformance suite on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.run_suite import (
    run_conformance,
    serving_fixture,
)

pytestmark = pytest.mark.e2e


def test_fixture_passes_every_server_scenario(server_scenarios: list[str], tmp_path: Path) -> None:
    """Over streamable HTTP, the fixture passes all server scenarios, active and pending."""
    with serving_fixture() as url:
        report = run_conformance(url, "all", out_dir=tmp_path / "results", timeout=90)
    print(report.summary())
    assert not report.timed_out, report.output
    assert sorted(report.announced) == sorted(server_scenarios), report.summary()
    assert report.failed_scenarios == [], report.summary()
    assert report.exit_code == 0, report.output
