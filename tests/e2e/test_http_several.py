"""An HTTP guard in front of several servers relays each session's messages through a router: tasks cross it;
2026-07-28 clients hear of the servers' changes on subscriptions/listen, translated through the SDK for servers of
the handshake era, relayed as messages when every server speaks 2026-07-28.

server-everything's ``simulate-research-query`` only runs as a task; behind an HTTP guard of
two servers its task handle, ``tasks/list``, ``tasks/get`` and ``tasks/result`` reach the
client under the tool's exported name, each task's requests routed to the server whose call
created it. The client speaks the wire with bare POSTs, as a task-aware client does.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError

from tests.harness import fixture_command, tapped, texts, wiretap_command
from tests.http_harness import (
    HANDSHAKE_VERSION,
    KEY_HEADER,
    MODERN_VERSION,
    SESSION_HEADER,
    Rig,
    everything_stdio_entry,
    http_get,
    http_post,
    http_streams,
    imported,
    mcp_http_client,
    open_http_session,
    open_sse_session,
    payload_for,
    poll,
    raw_call,
    sdk_modules,
    time_entry,
)
from tests.proxy.http_inproc import serving_cli
from tests.reliability.wire import result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TOOL = "everything__simulate-research-query"
SDK_PATH = "mcp_loop_guard.proxy.downstream.http.sessionless"
"""The SDK path's module: imported by a guard when the first request that needs its era translated comes."""


class Wire:
    """Bare JSON-RPC requests in one session of the guard."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self.url, self.headers = url, headers
        self.ids = iter(range(10, 10_000))

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        ident = next(self.ids)
        body = {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}
        response = await http_post(self.url, body, self.headers)
        assert response.status_code == 200, response.text
        return payload_for(response, ident)


@pytest.mark.parametrize("stateless", [False, True])
async def test_tasks_cross_an_http_guard_of_several_servers(tmp_path: Path, stateless: bool) -> None:
    """Over HTTP in front of several servers, tasks/* reach the server whose call created the task, in a session
    or (--stateless) one request at a time."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    config = rig.config({"everything": everything_stdio_entry(), "time": time_entry()})
    try:
        async with serving_cli(["--config", str(config), *(["--stateless"] if stateless else [])]) as guard:
            await guard.healthy()
            with anyio.fail_after(60):
                opened = await http_post(guard.mcp_url, _initialize())
                hello = payload_for(opened, 1)
                assert "call" in hello["result"]["capabilities"]["tasks"]["requests"]["tools"]
                assert hello["result"]["serverInfo"]["name"] == "mcp-loop-guard"
                session = {"Mcp-Protocol-Version": "2025-11-25"}
                if not stateless:
                    session[SESSION_HEADER] = opened.headers[SESSION_HEADER]
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await http_post(guard.mcp_url, initialized, session)).status_code == 202
                wire = Wire(guard.mcp_url, session)
                names = {tool["name"] for tool in (await wire.request("tools/list", {}))["result"]["tools"]}
                assert {TOOL, "time__get_current_time"} <= names

                params = {"name": TOOL, "arguments": {"topic": "routing"}, "task": {"ttl": 60000}}
                created = await wire.request("tools/call", params)
                assert "content" not in created["result"], created
                task_id = created["result"]["task"]["taskId"]
                tasks = await wire.request("tasks/list", {})
                assert task_id in [task["taskId"] for task in tasks["result"]["tasks"]]
                while True:
                    status = await wire.request("tasks/get", {"taskId": task_id})
                    if status["result"]["status"] != "working":
                        break
                    await anyio.sleep(0.25)  # a task's progress has no event to wait for: it is polled
                assert status["result"]["status"] == "completed", status
                report = await wire.request("tasks/result", {"taskId": task_id})
                unknown = await wire.request("tasks/get", {"taskId": "no-such-task"})
    finally:
        rig.report()
    (text,) = result_texts(report)
    assert text.startswith("# Research Report: routing")
    assert unknown["error"]["code"] == -32602


@pytest.mark.parametrize("stateless", [False, True])
async def test_legacy_sse_clients_of_several_servers_are_routed_sessions(tmp_path: Path, stateless: bool) -> None:
    """Legacy SSE connections in front of several servers are routed sessions (--stateless too): tasks are offered."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    config = rig.config({"everything": everything_stdio_entry(), "time": time_entry()})
    args = ["--config", str(config), *(["--stateless"] if stateless else [])]
    try:
        async with rig.guard(args, transport="sse") as guard, open_sse_session(guard.url("/sse")) as client:
            with anyio.fail_after(30):
                now = await client.session.call_tool("time__get_current_time", {"timezone": "UTC"})
                echoed = await client.session.call_tool("everything__echo", {"message": "routed"})
    finally:
        rig.report()
    assert client.initialize.capabilities.tasks is not None
    assert client.initialize.server_info.name == "mcp-loop-guard"
    assert not now.is_error, texts(now)
    assert texts(echoed) == ["Echo: routed"]


def _initialize() -> dict[str, Any]:
    """A task-aware client's initialize (2025-11-25)."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {}},
            "clientInfo": {"name": "task-client", "version": "0"},
        },
    }


@pytest.mark.parametrize("servers", ["one", "several"])
async def test_a_2026_client_listens_to_the_changes_of_the_servers_behind_the_sdk_path(
    tmp_path: Path, servers: str
) -> None:
    """2026-07-28 clients of handshake-era stdio servers are translated, and still hear on subscriptions/listen
    that a server's tool list changed."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    listen = fixture_command("listen_server")
    entries: dict[str, Any] = {"listen": {"command": listen[0], "args": listen[1:]}}
    if servers == "several":
        entries["time"] = time_entry()
    prefix = "listen__" if servers == "several" else ""
    config = rig.config(entries)
    try:
        async with serving_cli(["--config", str(config)]) as guard:
            await guard.healthy()
            async with Client(http_streams(guard.mcp_url), mode="auto") as client:
                assert client.protocol_version == "2026-07-28"
                with anyio.fail_after(60):
                    async with client.listen(tools_list_changed=True) as subscription:
                        await client.call_tool(f"{prefix}register_tool", {"name": "fresh"})
                        event = await anext(subscription)
                    names = {tool.name for tool in (await client.list_tools()).tools}
    finally:
        rig.report()
    assert event == ToolsListChanged()
    assert f"{prefix}fresh" in names


async def test_a_stateless_guard_of_several_servers_relays_each_request_without_the_sdk(tmp_path: Path) -> None:
    """--stateless in front of several servers relays each request on its own, over a share of one router,
    with the names a routed session gives the tools, the children shared; the SDK is never loaded."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    listen = fixture_command("listen_server")
    # The guard's imports are listed on its stderr; the children's (Python too) must not be.
    entry = {"command": "env", "args": ["-u", "PYTHONPROFILEIMPORTTIME", *listen]}
    config = rig.config({"one": entry, "two": entry})
    try:
        async with rig.guard(["--config", str(config), "--stateless"], env={"PYTHONPROFILEIMPORTTIME": "1"}) as guard:

            async def ready() -> int:
                return (await http_get(guard.url("/readyz"))).status_code

            with anyio.fail_after(30):
                await poll(ready, lambda status: status == 200, 0.1)
            async with open_http_session(guard.mcp_url) as client:
                with anyio.fail_after(30):
                    names = {tool.name for tool in (await client.session.list_tools()).tools}
                    answered = [await client.session.call_tool(f"{name}__asked", {}) for name in ("one", "two")]
            loaded = sdk_modules(guard)
    finally:
        rig.report()
    assert {"one__register_tool", "one__asked", "two__register_tool", "two__asked"} <= names
    assert [texts(result) for result in answered] == [["0"], ["0"]]
    assert loaded == set(), sorted(loaded)[:10]


async def test_stateless_calls_are_judged_by_what_earlier_requests_listed_without_listing_again(
    tmp_path: Path,
) -> None:
    """A --stateless call's own relay knows the tools' annotations from earlier requests: once the tools are
    known, further calls send the servers no list of the guard's own."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    taps = {name: tmp_path / f"{name}.jsonl" for name in ("one", "two")}
    entries = {}
    for name, tap in taps.items():
        argv = wiretap_command(tap, fixture_command("listen_server"))
        entries[name] = {"command": argv[0], "args": argv[1:]}

    def lists() -> list[int]:
        return [len(tapped(tap, "server", "tools/list")) for tap in taps.values()]

    try:
        async with serving_cli(["--config", str(rig.config(entries)), "--stateless"]) as guard:
            await guard.healthy()
            headers = {"Mcp-Protocol-Version": HANDSHAKE_VERSION, KEY_HEADER: "lists"}
            with anyio.fail_after(30):
                listed = await http_post(guard.mcp_url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers)
                answered = [await raw_call(guard.mcp_url, f"{name}__asked", {}, headers, 2) for name in ("one", "two")]
                known = lists()
                for name in ("one", "two") * 3:
                    answered.append(await raw_call(guard.mcp_url, f"{name}__asked", {}, headers, 2))
    finally:
        rig.report()
    names = {tool["name"] for tool in payload_for(listed, 1)["result"]["tools"]}
    assert {"one__asked", "two__asked"} <= names
    assert [payload_for(response, 2)["result"]["isError"] for response in answered] == [False] * 8
    assert lists() == known, f"six more calls, and lists from {known} to {lists()}"


@pytest.mark.parametrize("era", ["--stateless", "2026-07-28"])
async def test_a_server_among_several_is_served_again_after_its_child_crashed(tmp_path: Path, era: str) -> None:
    """Requests without a session in front of two servers (--stateless ones over the guard's shared router, 2026-07-28
    ones through the SDK path's router) reach a server's new child after the old one crashed; the other is untouched."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    counting = fixture_command("counting_server")
    entry = {
        "command": counting[0],
        "args": counting[1:],
        "env": {"COUNTING_SERVER_LOG": str(tmp_path / "calls.jsonl")},
    }
    config = rig.config({"a": entry, "b": entry})
    stateless = era == "--stateless"
    try:
        async with serving_cli(["--config", str(config), *(["--stateless"] if stateless else [])]) as guard:
            await guard.healthy()

            async def ready() -> int:
                return (await http_get(guard.at("/readyz"))).status_code

            async def call(tool: str, text: str = "") -> str:
                """The call's text, or the error it was answered with."""
                if stateless:
                    answer = payload_for(await raw_call(guard.mcp_url, tool, {"text": text}, {KEY_HEADER: "k"}), 1)
                    if "error" in answer:
                        return str(answer["error"]["message"])
                    return " ".join(part["text"] for part in answer["result"]["content"])
                async with (
                    mcp_http_client() as http,
                    Client(streamable_http_client(guard.mcp_url, http_client=http), mode=MODERN_VERSION) as client,
                ):
                    try:
                        return " ".join(texts(await client.call_tool(tool, {"text": text})))
                    except MCPError as error:
                        return error.error.message

            with anyio.fail_after(30):
                await poll(ready, lambda status: status == 200, 0.1)
                before = await call("b__echo", "b before")
                crashed = await call("a__crash")
                again = await poll(lambda: call("a__echo", "a again"), lambda said: said == "a again", 0.2)
                after = await call("b__echo", "b after")
    finally:
        rig.report()
    assert "exited with status 17" in crashed
    assert (before, again, after) == ("b before", "a again", "b after")


async def test_2026_clients_of_several_2026_servers_are_relayed_as_messages_without_the_sdk(tmp_path: Path) -> None:
    """In front of several servers that all speak 2026-07-28, that era's requests are relayed as messages, not
    translated: names, header-mirrored arguments, listen streams and the loop's refusal as a session's."""
    rig = Rig(tmp_path, uuid.uuid4().hex)
    try:
        async with rig.listen_http() as one, rig.listen_http() as two:
            entries = {name: {"type": "http", "url": server.mcp_url} for name, server in (("one", one), ("two", two))}
            config = rig.config(entries)
            env = {"PYTHONPROFILEIMPORTTIME": "1"}
            async with (
                rig.guard(["--config", str(config)], env=env) as guard,
                Client(http_streams(guard.mcp_url)) as client,
            ):
                assert client.protocol_version == "2026-07-28"
                with anyio.fail_after(60):
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    located = await client.call_tool("two__locate", {"region": "north"})  # Mcp-Param-Region mirrored
                    async with client.listen(tools_list_changed=True) as subscription:
                        await client.call_tool("one__register_tool", {"name": "fresh"})
                        event = await anext(subscription)
                    after = {tool.name for tool in (await client.list_tools()).tools}
                    loop = [await client.call_tool("one__ask", {"question": "again?"}) for _ in range(5)]
                    asked = await client.call_tool("one__asked", {})
                loaded = imported(guard)
    finally:
        rig.report()
    assert {"one__locate", "one__ask", "two__locate", "two__register_tool"} <= names
    assert texts(located) == ["in north"]
    assert event == ToolsListChanged()
    assert "one__fresh" in after
    assert [result.is_error for result in loop] == [False, False, False, False, True]
    assert texts(asked) == ["4"]  # the refused fifth never reached the server
    assert SDK_PATH not in loaded  # (the SDK's header encoders are loaded, for the calls' Mcp-Param-* headers)
