"""A member that accepts connections and never answers holds a new session of several servers up no longer than
its call timeout, and not at all once its probe marks it down.

A session's ``notifications/initialized`` goes to the members that answered its handshake
(one down at the time is not asked, and is told on joining later); a streamable HTTP
member's channel lets the next message wait until the server took a notification, for
10 s at most, or for the member's ``callTimeoutSeconds`` when that is shorter.
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from mcp_loop_guard.config import HttpServer
from tests.http_harness import Rig, http_get, open_http_session, poll
from tests.proxy.http_inproc import fixture_stdio, serving_guard

pytestmark = pytest.mark.anyio

CALL_TIMEOUT = 1.0
"""The silent member's ``callTimeoutSeconds``."""
BOUND = 6.0
"""Seconds the session's first list may take: the call timeout and room for a loaded machine, short of the
10 s a notification may otherwise hold the silent member's next message up."""


async def test_a_silent_member_holds_a_new_session_up_no_longer_than_its_call_timeout(rig: Rig) -> None:
    """The other server's tools are listed within the silent member's call timeout (and room), not after 10 s."""
    parity = fixture_stdio("a", "parity_server", "a")
    async with rig.raw_http("silent") as silent:
        silent_member = HttpServer("r", silent.mcp_url, call_timeout=CALL_TIMEOUT)
        async with serving_guard([parity, silent_member]) as guard, open_http_session(guard.url) as opened:
            with anyio.fail_after(BOUND):
                listed = await opened.session.list_tools()
    assert sorted(tool.name for tool in listed.tools) == ["a__constant", "a__echo", "a__register_tool"]


async def test_a_hung_member_holds_no_new_session_up(rig: Rig, tmp_path: Path) -> None:
    """A server that hangs (stopped) while the guard serves: its probe marks it down, and a new session
    neither tells it the handshake's end nor waits for it (before, the session's first list waited 10 s)."""
    parity = fixture_stdio("a", "parity_server", "a")
    async with rig.counting_http(tmp_path / "calls.jsonl", fork=False) as counting:  # stopped below
        member = HttpServer("c", counting.mcp_url)
        async with serving_guard([parity, member], health_interval_seconds=0.5) as guard:
            readyz = guard.url.removesuffix("/mcp") + "/readyz"
            with anyio.fail_after(30):
                await poll(lambda: http_get(readyz), lambda answer: answer.status_code == 200)
            counting.process.send_signal(signal.SIGSTOP)
            try:
                with anyio.fail_after(30):
                    await poll(lambda: http_get(readyz), lambda answer: answer.status_code == 503)
                async with open_http_session(guard.url) as opened:
                    with anyio.fail_after(BOUND):
                        listed = await opened.session.list_tools()
            finally:
                counting.process.send_signal(signal.SIGCONT)
    assert sorted(tool.name for tool in listed.tools) == ["a__constant", "a__echo", "a__register_tool"]
