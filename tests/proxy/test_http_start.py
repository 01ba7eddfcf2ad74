"""An HTTP guard whose upstream is slow to start: health pages answer at once, MCP requests wait for it.

A liveness probe or a load balancer's health check must not hang while a server downloads
itself (``npx -y ...``) or warms up; a client's first request must still meet the server
started. The upstream here starts only once the test opens a gate (a file appearing), so
nothing depends on how long a start takes. The guard is served in the test's own event
loop (:mod:`tests.proxy.http_inproc`); its child is a real process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_loop_guard.config import StdioServer
from mcp_loop_guard.core import replies
from mcp_loop_guard.proxy.downstream.http.middleware import RETRY_AFTER_BUSY
from tests.harness import FIXTURES_DIR, texts
from tests.http_harness import http_client, http_post, initialize_body, open_http_session, open_sse_session
from tests.proxy.http_inproc import serving_guard

pytestmark = pytest.mark.anyio

GATE_WAIT = 'while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"'
"""A shell that waits for the file named by its first argument, then becomes the command after it."""


def gated_counting_server(gate: Path) -> StdioServer:
    """The counting fixture server, started only once ``gate`` exists."""
    return StdioServer(
        "counter", "sh", ("-c", GATE_WAIT, str(gate), sys.executable, str(FIXTURES_DIR / "counting_server.py"))
    )


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_health_pages_answer_while_the_upstream_starts_and_a_first_call_waits_for_it(
    tmp_path: Path, transport: str
) -> None:
    """/healthz 200 ``starting`` and /readyz 503 ``starting`` before the server runs; a session opened meanwhile
    is answered once it does; then /readyz 200 and /healthz ``ok``."""
    gate = tmp_path / "gate"
    open_session = open_http_session if transport == "http" else open_sse_session
    async with (
        serving_guard([gated_counting_server(gate)], transport=transport) as guard,
        http_client(timeout=5) as client,
    ):
        with anyio.fail_after(10):
            alive = await client.get(guard.at("/healthz"))
            starting = await client.get(guard.at("/readyz"))
        assert (alive.status_code, alive.json()) == (200, {"status": "starting"})
        assert starting.status_code == 503
        assert starting.json()["upstreams"]["counter"]["status"] == "starting"
        called: list[str] = []

        async def first_call() -> None:
            async with open_session(guard.url) as opened:
                called.extend(texts(await opened.session.call_tool("echo", {"text": "first"})))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first_call)
                await anyio.sleep(0.5)  # the session's requests are in the guard, waiting
                assert called == []
                assert (await client.get(guard.at("/healthz"))).status_code == 200
                gate.touch()
        assert called == ["first"]
        assert (await client.get(guard.at("/readyz"))).status_code == 200
        assert (await client.get(guard.at("/healthz"))).json() == {"status": "ok"}


async def test_a_stop_before_the_upstream_started_answers_the_waiting_request(tmp_path: Path) -> None:
    """The first stop signal comes while a client's initialize waits for the upstream's start: the client is
    answered 503 saying so (with when to try again), not left hanging or cut off."""
    gate = tmp_path / "gate"
    async with serving_guard([gated_counting_server(gate)]) as guard:
        answers: list[httpx2.Response] = []

        async def initialize() -> None:
            answers.append(await http_post(guard.url, initialize_body()))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(initialize)
                await anyio.sleep(0.5)  # the request is in the guard, waiting for the upstream
                assert answers == []
                guard.stop.drain()  # what the first SIGTERM or SIGINT does
    [answer] = answers
    assert answer.status_code == 503, answer.text
    assert answer.headers["retry-after"] == str(RETRY_AFTER_BUSY)
    assert answer.json()["error"]["message"] == replies.STOPPING_AT_START
