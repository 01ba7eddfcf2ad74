"""The in-process harness itself: guards served one after another in one event loop each serve.

A test may serve several guards in turn (a restart, a reload, several configurations); each
must answer as a guard process would, whatever the guards before it left behind.
"""

from __future__ import annotations

import sys

import anyio
import pytest

from mcp_loop_guard.config import HttpServer, ServerSpec
from tests.harness import FIXTURES_DIR, texts
from tests.http_harness import open_http_session
from tests.proxy.http_inproc import fixture_stdio, serving_app, serving_guard

pytestmark = pytest.mark.anyio

sys.path.insert(0, str(FIXTURES_DIR))
from parity_server import build  # noqa: E402 - a fixture module, beside the fixture servers


@pytest.mark.parametrize("kind", ["stdio", "http"])
async def test_guards_served_one_after_another_in_one_event_loop_each_answer(kind: str) -> None:
    """Three guards in turn, in front of a child or of an HTTP server: each answers a call (none inherits a dead
    listening socket's watch from the one before)."""
    async with serving_app(build("a").streamable_http_app()) as origin:
        spec: ServerSpec = (
            HttpServer("a", origin + "/mcp") if kind == "http" else fixture_stdio("a", "parity_server", "a")
        )
        answers = []
        for turn in range(3):
            async with serving_guard([spec]) as guard, open_http_session(guard.url) as client:
                with anyio.fail_after(20):
                    answers.append(texts(await client.session.call_tool("echo", {"text": f"turn {turn}"})))
    assert answers == [["turn 0"], ["turn 1"], ["turn 2"]]
