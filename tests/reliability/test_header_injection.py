"""Client text that would land in the guard's own HTTP requests to its upstream: no request smuggled through it.

Over HTTP a 2026-07-28 request's method and protocol version (from its ``_meta``) go in
headers (``Mcp-Method``, ``MCP-Protocol-Version``), beside ``Mcp-Name`` and ``Mcp-Param-*``.
A CR/LF in any of them would end the guard's request early and start others of the
client's choosing, each with the guard's own ``Authorization`` to the upstream, past every
budget and loop refusal. The upstream here is a raw HTTP server that writes down every
request it parses, so a smuggled one would show as a request of its own. Each way in is
tried through the stdio guard (``--upstream URL``) and through the HTTP guard serving
legacy SSE clients in front of the same server: the method and version are refused with
their JSON-RPC error, the tool name and header arguments go base64-wrapped, the refusals
hold, and the session goes on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc
import httpx2
import pytest

from tests.harness import read_json_lines
from tests.http_harness import Rig, http_client, payload_verdict
from tests.proxy.http_inproc import serving_cli
from tests.reliability.wire import Message, RawConnector, error_code, is_response, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

UP_TOKEN = "up-token-only-the-guard-holds"  # noqa: S105 - a made-up credential the test follows
MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
"""The ``_meta`` envelope of a 2026-07-28 request: its routing headers are built from the message."""
SMUGGLED_ID = 99
SMUGGLED_BODY = json.dumps(
    {"jsonrpc": "2.0", "id": SMUGGLED_ID, "method": "tools/call", "params": {"name": "once", "arguments": {}}}
)


def smuggling(start: str) -> str:
    """``start``, then what ends the header and the request, and two requests of the client's own."""
    return (
        f"{start}\r\ncontent-length: 0\r\n\r\n"
        "POST /mcp HTTP/1.1\r\nhost: smuggled\r\ncontent-type: application/json\r\n"
        f"content-length: {len(SMUGGLED_BODY)}\r\n\r\n{SMUGGLED_BODY}"
        "GET /smuggled HTTP/1.1\r\nhost: smuggled\r\nx-pad: "
    )


class Client(Protocol):
    """A client that can send anything: requests answered by id, and notifications."""

    async def request(self, method: str, params: Mapping[str, Any] | None = None, *, within: float = 10) -> Message:
        """Sends a request and returns its response."""
        ...

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Sends a notification."""
        ...


class SseClient:
    """A legacy SSE client in raw JSON: each message POSTed to the session's endpoint, answers read off the stream."""

    def __init__(self, http: httpx2.AsyncClient, endpoint: str) -> None:
        self.http = http
        self.endpoint = endpoint
        self.messages: list[Message] = []
        self._changed = anyio.Event()
        self._ids = 0

    async def read(self, lines: AsyncIterator[str]) -> None:
        """Keeps every message the stream carries."""
        async for line in lines:
            if line.startswith("data: "):
                self.messages.append(json.loads(line.removeprefix("data: ")))
                self._changed.set()
                self._changed = anyio.Event()

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """POSTs one notification (one the guard refuses gets 400: there is no id to answer it by)."""
        body: Message = {"jsonrpc": "2.0", "method": method, **({"params": dict(params)} if params else {})}
        posted = await self.http.post(self.endpoint, json=body)
        assert posted.status_code in (202, 400), posted.text

    async def request(self, method: str, params: Mapping[str, Any] | None = None, *, within: float = 10) -> Message:
        """POSTs one request and waits for its answer on the stream."""
        self._ids += 1
        ident = f"sse-{self._ids}"
        body: Message = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            body["params"] = dict(params)
        posted = await self.http.post(self.endpoint, json=body)
        assert posted.status_code == 202, posted.text
        with anyio.fail_after(within):
            while not (found := [m for m in self.messages if is_response(m, ident)]):
                await self._changed.wait()
        return found[0]


@asynccontextmanager
async def sse_client(url: str) -> AsyncIterator[SseClient]:
    """A legacy SSE session with the guard at ``url``, initialized."""
    async with (
        http_client(timeout=20) as http,
        http.stream("GET", f"{url}/sse", headers={"accept": "text/event-stream"}) as stream,
        anyio.create_task_group() as tg,
    ):
        lines = stream.aiter_lines()
        with anyio.fail_after(20):
            assert await anext(lines) == "event: endpoint"
            endpoint = (await anext(lines)).removeprefix("data: ")
        client = SseClient(http, url + endpoint)
        tg.start_soon(client.read, lines)
        params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw-sse", "version": "0"},
        }
        opened = await client.request("initialize", params, within=20)
        assert "result" in opened, opened
        await client.notify("notifications/initialized")
        yield client
        tg.cancel_scope.cancel()


GUARD_OPTIONS = ["--header", f"Authorization: Bearer {UP_TOKEN}", "--budgets", "once=1"]


@asynccontextmanager
async def guarded(transport: str, raw_guard: RawConnector, upstream: str) -> AsyncIterator[Client]:
    """A client of the guard in front of ``upstream``: over stdio (its process), or as a legacy SSE client of the
    HTTP guard (served in this process)."""
    options = [*GUARD_OPTIONS, "--upstream", upstream]
    if transport == "stdio":
        async with raw_guard([], guard_args=options) as guard:
            yield guard
        return
    async with serving_cli(options, transport="sse") as guard, sse_client(guard.origin) as client:
        yield client


def call(name: str, arguments: Mapping[str, Any], meta: Mapping[str, Any] = MODERN) -> dict[str, Any]:
    """A tools/call's params, with a 2026-07-28 envelope unless told otherwise."""
    return {"name": name, "arguments": dict(arguments), "_meta": dict(meta)}


async def tried(asking: Awaitable[Message]) -> Message:
    """The answer, or what became of the request when none came (so the upstream's record is still checked)."""
    try:
        return await asking
    except (AssertionError, TimeoutError, httpx2.HTTPError, anyio.BrokenResourceError) as exc:
        return {"no answer": repr(exc)[:300]}


async def attack(client: Client) -> dict[str, Message]:
    """A loop and a used-up budget, then each way in tried with smuggled requests; every answer by name."""

    async def ask(name: str, method: str, params: Mapping[str, Any]) -> None:
        answers[name] = await tried(client.request(method, params, within=5))

    answers: dict[str, Message] = {}
    await ask("listed", "tools/list", {"_meta": MODERN})
    for n in range(1, 6):
        await ask(f"loop {n}", "tools/call", call("echo", {"text": "same"}))
    smuggling_version = {"io.modelcontextprotocol/protocolVersion": smuggling("2026-07-28")}
    await ask("version", "tools/call", call("echo", {"text": "version"}, smuggling_version))
    await ask("loop after", "tools/call", call("echo", {"text": "same"}))
    await ask("once", "tools/call", call("once", {}))
    await ask("once again", "tools/call", call("once", {}))
    await ask("method", smuggling("tools/call"), call("once", {}))
    with suppress(anyio.BrokenResourceError, httpx2.HTTPError):
        await client.notify(smuggling("notifications/message"), {"_meta": MODERN})
    await ask("tool name", "tools/call", call(smuggling("echo"), {"text": "named"}))
    await ask("header argument", "tools/call", call("lookup", {"key": smuggling("k")}))
    await ask("resource uri", "resources/read", {"uri": smuggling("file:///notes"), "_meta": MODERN})
    await ask("prompt name", "prompts/get", {"name": smuggling("greeting"), "_meta": MODERN})
    await ask("once after", "tools/call", call("once", {}))
    await ask("fresh", "tools/call", call("echo", {"text": "fresh"}))
    return answers


def _named(entry: dict[str, Any]) -> object:
    """What a recorded request names (a tool or prompt, a resource's URI): what goes in its Mcp-Name header."""
    params = (entry.get("body") or {}).get("params") or {}
    return params.get("uri", params.get("name"))


def _header(entry: dict[str, Any], name: str) -> str:
    """One header of a recorded request, by lower-case name ("" when it has none)."""
    return next((value for key, value in entry["headers"] if key.lower() == name), "")


def requests_with(recorded: list[dict[str, Any]], header: str) -> list[str]:
    """The values of one header over every recorded request that carried it."""
    return [value for entry in recorded for key, value in entry.get("headers", []) if key.lower() == header]


@pytest.mark.parametrize("transport", ["stdio", "sse"])
async def test_no_request_is_smuggled_through_the_headers_built_from_a_message(
    transport: str, rig: Rig, raw_guard: RawConnector, tmp_path: Path
) -> None:
    """CR/LF in the method, _meta version, a tool/resource/prompt name, a header argument: no request smuggled."""
    log = tmp_path / "requests.jsonl"
    log.touch()
    async with rig.recording_http(log) as upstream, guarded(transport, raw_guard, upstream.mcp_url) as client:
        answers = await attack(client)
    recorded = read_json_lines(log)
    calls = [entry["body"] for entry in recorded if (entry.get("body") or {}).get("method") == "tools/call"]
    called = [(body["params"]["name"], body["params"].get("arguments")) for body in calls]

    assert [entry for entry in recorded if "bad" in entry or entry["path"] != "/mcp"] == []
    assert set(requests_with(recorded, "host")) == {f"127.0.0.1:{upstream.port}"}
    assert set(requests_with(recorded, "authorization")) == {f"Bearer {UP_TOKEN}"}
    assert SMUGGLED_ID not in [body.get("id") for body in calls]
    assert [payload_verdict(answers[f"loop {n}"]) for n in range(1, 6)] == [None, None, "warn", "warn", "block"]
    assert error_code(answers["version"]) == -32602, answers["version"]
    assert error_code(answers["method"]) == -32600, answers["method"]
    assert payload_verdict(answers["loop after"]) == "block"
    assert payload_verdict(answers["once again"]) == payload_verdict(answers["once after"]) == "block"
    assert called.count(("echo", {"text": "same"})) == 4, called
    assert called.count(("once", {})) == 1, called
    assert result_texts(answers["fresh"]) == ["fresh"]
    assert result_texts(answers["tool name"]) == ["named"]
    assert {value[:9] for value in requests_with(recorded, "mcp-param-key")} == {"=?base64?"}
    named = [entry for entry in recorded if "smuggled" in json.dumps(_named(entry))]
    assert sorted(entry["body"]["method"] for entry in named) == ["prompts/get", "resources/read", "tools/call"]
    assert [_header(entry, "mcp-name")[:9] for entry in named] == ["=?base64?"] * 3
    assert all("\r" not in value and "\n" not in value for entry in recorded for _, value in entry["headers"])
    mcp_names = requests_with(recorded, "mcp-name")
    assert any(value.startswith("=?base64?") for value in mcp_names), mcp_names
