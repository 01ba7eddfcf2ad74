"""Fixtures of the fault-injection suite, and the rule that keeps soak tests out of ordinary runs.

Soak tests (``@pytest.mark.soak``) run only when asked for: ``pytest -m soak`` (any
``-m`` expression naming soak), ``RUN_SOAK_TESTS=1``, or the test named on the command
line. Otherwise they are deselected, not skipped, so a default run stays quick and
reports them as deselected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.wire import RawConnector

SOAK_ENV = "RUN_SOAK_TESTS"


def _soak_requested(config: pytest.Config, item: pytest.Item) -> bool:
    if "soak" in (config.getoption("markexpr", "") or "") or os.environ.get(SOAK_ENV) == "1":
        return True
    name = item.name.partition("[")[0]
    return any(name in arg.split("::")[1:] for arg in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects soak tests unless they were asked for."""
    unwanted = [item for item in items if item.get_closest_marker("soak") and not _soak_requested(config, item)]
    if unwanted:
        config.hook.pytest_deselected(items=unwanted)
        items[:] = [item for item in items if item not in unwanted]


@pytest.fixture
def raw_guard(tmp_path: Path, process_marker: str) -> Iterator[RawConnector]:
    """Starts guards driven line by line; their stderr is shown when the test fails."""
    connector = RawConnector(tmp_path, process_marker)
    yield connector
    connector.report()


@pytest.fixture
def line_log(tmp_path: Path) -> Path:
    """The file where a line-server fixture logs every message it receives."""
    return tmp_path / "line-server.jsonl"
