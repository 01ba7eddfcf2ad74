"""Fixtures shared by the conformance tests."""

from __future__ import annotations

import pytest

from tests.conformance.run_suite import SuiteNotInstalledError, ensure_installed, list_server_scenarios


@pytest.fixture(scope="module")
def server_scenarios() -> list[str]:
    """Every server scenario the pinned suite knows, active and pending."""
    try:
        ensure_installed()
    except SuiteNotInstalledError as missing:
        pytest.fail(str(missing))
    return list_server_scenarios()
