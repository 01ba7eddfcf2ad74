"""Broken upstreams behind the HTTP guard: one bad server must not take the others (or the guard) down.

Each test puts a good stdio server (mcp-server-time) next to one that fails in a
precise way: a URL nobody listens on, an HTTP server answering 401 or 500 to
everything, one that dies while the guard runs, a stdio server that exits before
answering ``initialize``, one that accepts TCP and never answers, a single stdio server
whose handshake with the guard fails (it exits, or never answers), and a tool that
answers ``tools/call`` with a JSON-RPC error. What the client and the operator see is
checked: ``/readyz``, ``/healthz``, the good server's tools, error codes, process ids.
Secrets that the config file expands from the environment never show in what the
guard tells anyone.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from tests.harness import Connector, eventually, fixture_command, texts
from tests.http_harness import (
    HttpSession,
    Rig,
    free_port,
    http_get,
    http_post,
    initialize_body,
    jsonrpc_payloads,
    open_http_session,
    poll,
    time_entry,
    tool_names,
)
from tests.proxy.http_inproc import InProcessGuard, serving_cli
from tests.reliability.wire import RawConnector

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

NOW = "time__get_current_time"
"""The good server's tool, as exported when the guard has several upstreams."""
SERVER_ERROR = -32000
FAILURE_MESSAGE = "disk quota exceeded on /var/data"
SECRET = "s3cr3t-value"  # noqa: S105 - a made-up secret whose leaks the test looks for


def stdio_entry(name: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The config entry of one of our fixture servers over stdio."""
    command = fixture_command(name, *args)
    entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
    if env:
        entry["env"] = env
    return entry


async def readyz(guard: InProcessGuard) -> httpx2.Response:
    """One GET /readyz once the guard's upstreams have had their first start; fails, saying whether the guard
    stopped serving, when nothing answers."""
    try:
        await guard.healthy()
        return await http_get(guard.at("/readyz"))
    except httpx2.TransportError as exc:
        pytest.fail(f"/readyz: {exc!r}; the guard's serving ended: {guard.ended.is_set()}")


def upstream_status(response: httpx2.Response, name: str) -> str:
    """The status /readyz gives one upstream."""
    return str(response.json()["upstreams"][name]["status"])


async def assert_good_server_serves(guard: InProcessGuard) -> None:
    """A new client session lists the time server's tools and calls one; fails with what went wrong."""
    with anyio.fail_after(20):
        health = await http_get(guard.at("/healthz"))
        async with open_http_session(guard.mcp_url) as client:
            listed = tool_names(await client.session.list_tools())
            now = await client.session.call_tool(NOW, {"timezone": "UTC"})
    assert health.status_code == 200, health.text
    assert NOW in listed, listed
    assert not now.is_error, texts(now)


@asynccontextmanager
async def broken_upstream(rig: Rig, kind: str) -> AsyncIterator[dict[str, Any]]:
    """The config entry of an HTTP upstream that is down (closed port) or answers 401 or 500 to everything."""
    if kind == "closed port":
        yield {"type": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"}
        return
    async with rig.raw_http(f"status:{kind}") as server:
        yield {"type": "http", "url": server.mcp_url}


@pytest.mark.parametrize("kind", ["closed port", "401", "500"])
async def test_broken_http_upstream_leaves_the_others_serving(rig: Rig, kind: str) -> None:
    """An HTTP upstream down at start-up, or answering 401/500: the guard runs, /readyz 503 names it, time works."""
    async with broken_upstream(rig, kind) as entry:
        config = rig.config({"time": time_entry(), "r": entry})
        async with serving_cli(["--config", str(config)], state=None) as guard:
            with anyio.fail_after(10):
                ready = await readyz(guard)
            await assert_good_server_serves(guard)
            await guard.stays_up(0.5)

    assert ready.status_code == 503, ready.text
    assert ready.json()["ready"] is False
    assert upstream_status(ready, "r") != "ready", ready.text
    assert upstream_status(ready, "time") == "ready", ready.text


async def test_http_upstream_dying_while_the_guard_runs(rig: Rig) -> None:
    """server-everything over HTTP is killed: the guard stays up, /readyz turns 503 for it, time keeps working."""
    async with rig.everything_http() as everything:
        config = rig.config({"time": time_entry(), "r": {"type": "http", "url": everything.mcp_url}})
        async with serving_cli(["--config", str(config), "--health-interval-seconds", "1"], state=None) as guard:
            with anyio.fail_after(10):
                before = await readyz(guard)
            everything.process.send_signal(signal.SIGKILL)
            with anyio.fail_after(30):
                after = await poll(lambda: readyz(guard), lambda response: response.status_code == 503, 0.2)
            await assert_good_server_serves(guard)
            await guard.stays_up(0.5)

    assert before.status_code == 200, before.text
    assert upstream_status(after, "r") != "ready", after.text
    assert upstream_status(after, "time") == "ready", after.text


async def test_stdio_upstream_exiting_before_initialize(rig: Rig, tmp_path: Path) -> None:
    """A stdio server that exits before answering initialize, at start and at every restart: the others serve."""
    starts = tmp_path / "early-exit-starts.txt"
    bad = stdio_entry("early_exit_server", env={"EARLY_EXIT_SERVER_STARTS": str(starts)})
    config = rig.config({"time": time_entry(), "bad": bad})
    async with serving_cli(["--config", str(config)], state=None) as guard:
        with anyio.fail_after(10):
            ready = await readyz(guard)
        await assert_good_server_serves(guard)
        with anyio.fail_after(20):
            await eventually(lambda: starts.exists() and len(starts.read_text().splitlines()) >= 2)
        with anyio.fail_after(10):
            later = await readyz(guard)
        await assert_good_server_serves(guard)
        await guard.stays_up(0.5)

    assert ready.status_code == 503, ready.text
    assert upstream_status(ready, "bad") != "ready", ready.text
    assert upstream_status(ready, "time") == "ready", ready.text
    assert later.status_code == 503, later.text
    assert upstream_status(later, "bad") != "ready", later.text


async def test_a_command_that_cannot_start_is_reported_not_fatal(rig: Rig, tmp_path: Path) -> None:
    """``-- COMMAND`` over HTTP with no such program: the guard serves, /readyz says why, and it keeps trying."""
    missing = str(tmp_path / "no-such-server")
    async with serving_cli(["--", missing], state=None) as guard:
        with anyio.fail_after(10):
            ready = await readyz(guard)
        health = await http_get(guard.at("/healthz"))
        await guard.stays_up(0.5)
    assert health.status_code == 200
    assert ready.status_code == 503, ready.text
    (upstream,) = ready.json()["upstreams"].values()
    assert upstream["status"] == "down", ready.text
    assert upstream["reason"] == "cannot start its command", ready.text
    assert missing not in ready.text, "the command line stays out of what clients see"


@pytest.mark.parametrize(
    ("server", "options", "reason"),
    [
        ("early_exit_server", [], "exited with status 3"),
        ("silent_server", ["--call-timeout-seconds", "1"], "did not answer initialize"),
    ],
)
async def test_one_stdio_server_whose_handshake_fails_is_reported_retried_and_answered(
    rig: Rig, tmp_path: Path, server: str, options: list[str], reason: str
) -> None:
    """``-- COMMAND`` over HTTP, the guard's own ``initialize`` to the child failing: the guard serves on.

    ``/readyz`` says why (a server that exits, one that never answers within the call timeout),
    the child is started again with backoff, and a client's ``initialize`` gets an error at
    once rather than a hang.
    """
    async with serving_cli([*options, "--", *fixture_command(server)], state=None) as guard:
        with anyio.fail_after(20):
            down = await poll(
                lambda: readyz(guard),
                lambda response: [u["restarts"] for u in response.json()["upstreams"].values()] >= [1],
                0.2,
            )
        with anyio.fail_after(20):
            answer = await http_post(
                guard.mcp_url,
                initialize_body(),
                {"accept": "application/json, text/event-stream", "content-type": "application/json"},
            )
        await guard.stays_up(0.5)
    assert down.status_code == 503, down.text
    (upstream,) = down.json()["upstreams"].values()
    assert upstream["status"] != "ready", down.text
    assert upstream["reason"] == reason, down.text
    (payload,) = jsonrpc_payloads(answer)
    assert "result" not in payload, payload
    assert payload["error"]["message"], payload


async def test_silent_http_upstream_does_not_hold_up_new_sessions(rig: Rig) -> None:
    """An HTTP upstream that accepts TCP and never answers: a new session's initialize is answered within 20 s.

    The silent server's handshake is given up after its ``callTimeoutSeconds`` (2 s here, the default 15 s
    otherwise), at start-up and at every reconnection; new sessions must not wait for any of them.
    """
    async with rig.raw_http("silent") as silent:
        entry = {"type": "http", "url": silent.mcp_url, "callTimeoutSeconds": 2}
        config = rig.config({"time": time_entry(), "r": entry})
        async with serving_cli(["--config", str(config)], state=None) as guard:
            try:
                with anyio.fail_after(20):
                    async with open_http_session(guard.mcp_url) as client:
                        listed = tool_names(await client.session.list_tools())
                        now = await client.session.call_tool(NOW, {"timezone": "UTC"})
            except TimeoutError:
                pytest.fail("a new session was not served within 20 s while an upstream never answers")
            await guard.stays_up(0.5)

    assert NOW in listed, listed
    assert not now.is_error, texts(now)


# --- a tool answering with a JSON-RPC error --------------------------------------------------


def pid_of(result: Any) -> int:
    """The process id the erroring server's ``pid`` tool answered."""
    return int(texts(result)[0])


async def failing_call(session: ClientSession) -> MCPError:
    """Calls the tool that answers with a JSON-RPC error; the error the client got (fails if it got a result)."""
    try:
        result = await session.call_tool("fail", {"message": FAILURE_MESSAGE})
    except MCPError as exc:
        return exc
    pytest.fail(f"the upstream's JSON-RPC error reached the client as a result: {texts(result)}")


async def test_jsonrpc_error_from_a_tool_over_stdio(connect: Connector) -> None:
    """Over stdio, a tool's JSON-RPC error -32000 reaches the client as is; the same upstream process goes on."""
    async with connect.guard_process(fixture_command("erroring_server")) as guard:
        with anyio.fail_after(20):
            before = pid_of(await guard.session.call_tool("pid", {}))
            failed = await failing_call(guard.session)
            after = pid_of(await guard.session.call_tool("pid", {}))
            echoed = await guard.session.call_tool("echo", {"text": "still here"})
        upstream = guard.upstream().pid

    assert failed.error.code == SERVER_ERROR, failed.error
    assert FAILURE_MESSAGE in failed.error.message, failed.error
    assert before == after == upstream, "the upstream was restarted after answering with an error"
    assert texts(echoed) == ["still here"]


async def test_jsonrpc_error_from_a_shared_upstream_over_http(rig: Rig) -> None:
    """Over HTTP, the -32000 error reaches its session as is; the shared upstream lives on and other sessions work."""
    async with (
        rig.guard(["--", *fixture_command("erroring_server")]) as guard,
        open_http_session(guard.mcp_url) as first,
        open_http_session(guard.mcp_url) as second,
    ):
        with anyio.fail_after(20):
            before = pid_of(await first.session.call_tool("pid", {}))
            failed = await failing_call(first.session)
            other = await second.session.call_tool("echo", {"text": "other session"})
            after = pid_of(await first.session.call_tool("pid", {}))
            again = await first.session.call_tool("echo", {"text": "same session"})
        upstream = guard.child("erroring_server.py").pid

    assert failed.error.code == SERVER_ERROR, failed.error
    assert FAILURE_MESSAGE in failed.error.message, failed.error
    assert before == after == upstream, "the shared upstream was restarted after answering with an error"
    assert texts(other) == ["other session"]
    assert texts(again) == ["same session"]


# --- secrets from the environment ------------------------------------------------------------


async def error_texts(client: HttpSession, tool: str) -> list[str]:
    """What a session is told when it calls a tool of a broken upstream: error result texts or the error message."""
    try:
        with anyio.fail_after(20):
            result = await client.session.call_tool(tool, {})
    except MCPError as exc:
        return [exc.error.message, json.dumps(exc.error.data)]
    return texts(result)


async def test_expanded_secret_in_a_crashing_servers_args_never_shown(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stdio server started with ``--token ${SECRET_TOKEN}`` crashes: /readyz and the errors never show the value."""
    crashing = stdio_entry("crashing_server", "--token", "${SECRET_TOKEN}")
    config = rig.config({"time": time_entry(), "crashing": crashing})
    monkeypatch.setenv("SECRET_TOKEN", SECRET)
    async with serving_cli(["--config", str(config)], state=None) as guard:
        with anyio.fail_after(20):
            async with open_http_session(guard.mcp_url) as client:
                told = await error_texts(client, "crashing__crash")
                down = await poll(lambda: readyz(guard), lambda response: response.status_code == 503, 0.1)
                told += await error_texts(client, "crashing__echo")
                listed = tool_names(await client.session.list_tools())

    assert upstream_status(down, "crashing") != "ready", down.text
    assert upstream_status(down, "time") == "ready", down.text
    assert SECRET not in down.text, down.text
    assert told, "the calls to the crashed upstream told the client nothing"
    assert not [text for text in told if SECRET in text], told
    assert NOW in listed


async def test_expanded_secret_in_an_http_upstreams_url_and_header_never_shown(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP upstream answering 401, ${SECRET_TOKEN} in its URL path, query and header: not in /readyz or errors."""
    async with rig.raw_http("status:401") as refusing:
        remote = {
            "type": "http",
            "url": f"{refusing.base_url}/${{SECRET_TOKEN}}/mcp?token=${{SECRET_TOKEN}}",
            "headers": {"Authorization": "Bearer ${SECRET_TOKEN}"},
        }
        config = rig.config({"time": time_entry(), "remote": remote})
        monkeypatch.setenv("SECRET_TOKEN", SECRET)
        async with serving_cli(["--config", str(config)], state=None) as guard:
            with anyio.fail_after(20):
                ready = await readyz(guard)
                async with open_http_session(guard.mcp_url) as client:
                    told = await error_texts(client, "remote__anything")
                    listed = tool_names(await client.session.list_tools())

    assert ready.status_code == 503, ready.text
    assert set(ready.json()["upstreams"]) == {"time", "remote"}, ready.text
    assert upstream_status(ready, "remote") != "ready", ready.text
    assert SECRET not in ready.text, ready.text
    assert told, "the call to the refusing upstream told the client nothing"
    assert not [text for text in told if SECRET in text], told
    assert NOW in listed


@pytest.mark.parametrize("path", ["/mcp", "/sse"], ids=["streamable HTTP", "legacy SSE"])
async def test_a_key_in_an_upstream_urls_path_or_query_never_shown(
    rig: Rig, raw_guard: RawConnector, path: str
) -> None:
    """``--upstream`` with a key in the URL's path and query, answering 401: the client's error names no key."""
    async with rig.raw_http("status:401") as refusing:
        url = f"{refusing.base_url}/{SECRET}{path}?key={SECRET}"
        args = ["--upstream", url, "--call-timeout-seconds", "5"]
        async with raw_guard([], guard_args=args, initialize=False) as guard:
            params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "0"}}
            answer = await guard.request("initialize", params, within=20)

    assert "error" in answer, answer
    assert "`127-0-0-1`" in answer["error"]["message"], answer
    assert SECRET not in json.dumps(answer), answer
