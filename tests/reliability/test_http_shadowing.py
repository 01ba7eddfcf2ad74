"""Several upstreams behind one HTTP guard must not shadow each other's tools and resources.

Two catalog fixture servers, ``alpha`` and ``beta``, offer exactly the tools, resources
and resource templates a test needs (``tests/fixtures/catalog_server.py``); each logs
what it receives, so a test sees which server a request reached.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from tests.harness import fixture_command, texts
from tests.http_harness import (
    HttpSession,
    Rig,
    ServerProcess,
    http_get,
    http_post,
    jsonrpc_payloads,
    open_http_session,
    poll,
    raw_session,
    tool_call_body,
)
from tests.reliability.wire import received

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@dataclass
class Catalog:
    """One catalog server of the test: its spec file (read at every start) and its log of received messages."""

    name: str
    spec: Path
    log: Path

    def write(self, **spec: Any) -> None:
        """What the server offers from its next start on."""
        self.spec.write_text(json.dumps({"name": self.name, **spec}), encoding="utf-8")

    def entry(self) -> dict[str, Any]:
        """Its config entry."""
        command = fixture_command("catalog_server", str(self.spec))
        return {"command": command[0], "args": command[1:], "env": {"LINE_SERVER_LOG": str(self.log)}}

    def calls(self) -> list[str]:
        """The names of the tools/call requests it received."""
        return [m["params"]["name"] for m in received(self.log) if m.get("method") == "tools/call"]


def catalog(tmp_path: Path, name: str, **spec: Any) -> Catalog:
    """A catalog server named ``name`` offering spec."""
    found = Catalog(name, tmp_path / f"{name}-spec.json", tmp_path / f"{name}.jsonl")
    found.write(**spec)
    return found


def guard_args(rig: Rig, *catalogs: Catalog) -> list[str]:
    """``--config F`` for a config holding the catalog servers."""
    return ["--config", str(rig.config({found.name: found.entry() for found in catalogs}))]


async def read_text(client: HttpSession, uri: str) -> str:
    """The text of a resource, as the client reads it."""
    with anyio.fail_after(20):
        result = await client.session.read_resource(uri)
    content = result.contents[0]
    assert isinstance(content, types.TextResourceContents), content
    return content.text


async def test_same_resource_uri_on_two_servers_is_ambiguous(rig: Rig, tmp_path: Path) -> None:
    """alpha and beta both list a URI: reading it is a JSON-RPC error naming both, whether listed first or not."""
    uri = "file:///shared/notes.txt"
    alpha = catalog(tmp_path, "alpha", resources=[uri])
    beta = catalog(tmp_path, "beta", resources=[uri])
    outcomes: list[str] = []
    async with rig.guard(guard_args(rig, alpha, beta)) as guard:
        for list_first in (False, True):
            async with open_http_session(guard.mcp_url) as client:
                if list_first:
                    with anyio.fail_after(20):
                        await client.session.list_resources()
                try:
                    outcomes.append(f"read: {await read_text(client, uri)}")
                except MCPError as exc:
                    outcomes.append(f"error: {exc.error.message}")

    for outcome in outcomes:
        assert outcome.startswith("error: "), f"{uri} listed by two servers was read from one: {outcomes}"
        assert "ambiguous" in outcome.lower(), outcome
        assert "alpha" in outcome, outcome
        assert "beta" in outcome, outcome


async def test_listed_uri_wins_over_another_servers_template(rig: Rig, tmp_path: Path) -> None:
    """A URI alpha lists is read from alpha even though beta's template matches it; other URIs go to beta's template."""
    listed, other = "file:///docs/readme.txt", "file:///docs/other.txt"
    alpha = catalog(tmp_path, "alpha", resources=[listed])
    beta = catalog(tmp_path, "beta", templates=["file:///docs/{name}"])
    seen: dict[str, tuple[str, str]] = {}
    async with rig.guard(guard_args(rig, alpha, beta)) as guard:
        for listing in ("nothing", "templates only", "resources and templates"):
            async with open_http_session(guard.mcp_url) as client:
                with anyio.fail_after(20):
                    if listing != "nothing":
                        await client.session.list_resource_templates()
                    if listing == "resources and templates":
                        await client.session.list_resources()
                seen[listing] = (await read_text(client, listed), await read_text(client, other))

    for listing, (from_listed, from_other) in seen.items():
        assert from_listed == f"served by alpha: {listed}", f"after listing {listing}: {from_listed}"
        assert from_other == f"served by beta: {other}", f"after listing {listing}: {from_other}"


async def test_unlisted_prefixed_name_never_reaches_a_hidden_tool(rig: Rig, tmp_path: Path) -> None:
    """Without a tools/list, ``alpha__beta__same`` must not reach alpha's unlisted ``beta__same``; listed tools work."""
    alpha = catalog(tmp_path, "alpha", tools=["visible"], hidden_tools=["beta__same"])
    beta = catalog(tmp_path, "beta", tools=["same"])
    async with rig.guard(guard_args(rig, alpha, beta)) as guard:
        with anyio.fail_after(20):
            headers = await raw_session(guard.mcp_url)
            shadowed = await http_post(guard.mcp_url, tool_call_body("alpha__beta__same", {}, 2), headers)
            listed = await http_post(guard.mcp_url, tool_call_body("beta__same", {}, 3), headers)
            visible = await http_post(guard.mcp_url, tool_call_body("alpha__visible", {}, 4), headers)

    answer = jsonrpc_payloads(shadowed)[0]
    assert "beta__same" not in alpha.calls(), f"alpha's unlisted tool was reached: {answer}"
    assert "error" in answer or answer["result"].get("isError") is True, answer
    assert jsonrpc_payloads(listed)[0]["result"]["content"][0]["text"] == "beta ran same"
    assert jsonrpc_payloads(visible)[0]["result"]["content"][0]["text"] == "alpha ran visible"


async def restarted(guard: ServerProcess, name: str) -> None:
    """Waits until /readyz shows the upstream ready again after at least one restart."""

    def back(response: Any) -> bool:
        entry = response.json()["upstreams"][name]
        return bool(entry["status"] == "ready" and entry["restarts"] >= 1)

    with anyio.fail_after(30):
        await poll(lambda: http_get(guard.url("/readyz")), back, 0.1)


async def test_tool_renamed_into_a_collision_is_left_out(rig: Rig, tmp_path: Path) -> None:
    """alpha restarts listing ``beta__same``, colliding with ``alpha__beta``'s ``same``: lists work, it is left out."""
    alpha = catalog(tmp_path, "alpha", tools=["one"])
    other = catalog(tmp_path, "alpha__beta", tools=["same"])
    exported = "alpha__beta__same"
    async with (
        rig.guard(guard_args(rig, alpha, other)) as guard,
        open_http_session(guard.mcp_url) as before,
    ):
        with anyio.fail_after(20):
            first = [tool.name for tool in (await before.session.list_tools()).tools]
        alpha.write(tools=["one", "beta__same"])
        logged_before = len(guard.stderr_text().splitlines())
        guard.child(str(alpha.spec)).send_signal(signal.SIGKILL)
        await restarted(guard, "alpha")
        listings: dict[str, list[str]] = {}
        called: dict[str, list[str]] = {}
        failures: dict[str, str] = {}
        async with open_http_session(guard.mcp_url) as after:
            for label, client in (("session from before", before), ("new session", after)):
                try:
                    with anyio.fail_after(20):
                        listings[label] = [tool.name for tool in (await client.session.list_tools()).tools]
                        if exported in listings[label]:
                            called[label] = texts(await client.session.call_tool(exported, {}))
                except MCPError as exc:
                    failures[label] = exc.error.message
        logged = guard.stderr_text().splitlines()[logged_before:]

    assert failures == {}, failures

    assert sorted(first) == ["alpha__beta__same", "alpha__one"]
    for label, names in listings.items():
        assert len(names) == len(set(names)), f"{label}: a name listed twice: {names}"
        assert "alpha__one" in names, f"{label}: {names}"
    # The renamed tool is the one left out: where the name is listed, it still means alpha__beta's tool.
    assert all(answer == ["alpha__beta ran same"] for answer in called.values()), called
    assert "beta__same" not in alpha.calls()
    assert [line for line in logged if exported in line], f"no log line names the collision: {logged}"
