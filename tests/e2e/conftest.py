"""Fixtures shared by the HTTP end-to-end modules."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.http_harness import ServerProcess


@pytest.fixture
def guard_log(guard: ServerProcess) -> Iterator[None]:
    """Shows what a module's shared guard wrote to stderr during the test, for when it fails.

    Modules with one guard for all their tests (a ``guard`` fixture) opt in with
    ``pytestmark = [..., pytest.mark.usefixtures("guard_log")]``.
    """
    start = len(guard.stderr_text())
    yield
    print(f"--- guard stderr during the test ---\n{guard.stderr_text()[start:]}", file=sys.stderr)
