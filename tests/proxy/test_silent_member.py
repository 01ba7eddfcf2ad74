"""A member that accepts connections and never answers holds a session of several servers up only for its call timeout.

Before the client's first request, its ``notifications/initialized`` goes to every member; a
streamable HTTP member's channel lets the next message wait until the server took it, for
10 s at most, or for the member's ``callTimeoutSeconds`` when that is shorter.
"""

from __future__ import annotations

import sys

import anyio
import pytest

from mcp_loop_guard.config import HttpServer, StdioServer
from tests.harness import FIXTURES_DIR
from tests.http_harness import Rig, open_http_session
from tests.proxy.http_inproc import serving_guard

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 1.0
"""The silent member's ``callTimeoutSeconds``."""
BOUND = 6.0
"""Seconds the session's first list may take: the call timeout and room for a loaded machine, short of the
10 s a notification may otherwise hold the silent member's next message up."""


async def test_a_silent_member_holds_a_new_session_up_no_longer_than_its_call_timeout(rig: Rig) -> None:
    """The other server's tools are listed within the silent member's call timeout (and room), not after 10 s."""
    parity = StdioServer("a", sys.executable, (str(FIXTURES_DIR / "parity_server.py"), "a"))
    async with rig.raw_http("silent") as silent:
        silent_member = HttpServer("r", silent.mcp_url, call_timeout=CALL_TIMEOUT)
        async with serving_guard([parity, silent_member]) as guard, open_http_session(guard.url) as opened:
            with anyio.fail_after(BOUND):
                listed = await opened.session.list_tools()
    assert sorted(tool.name for tool in listed.tools) == ["a__constant", "a__echo", "a__register_tool"]
