"""Hostile or broken input from the client: each gets the JSON-RPC error the spec prescribes,
the session goes on, and nothing malformed reaches the upstream.

The upstream is our counting server behind a wiretap, which records every message that
reaches it; the counting server's own log lists the tools/call it ran.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import MCPError

from tests.harness import Connector, CountingUpstream, read_json_lines, tapped, wiretap_command
from tests.reliability.wire import RawConnector, RawGuard, error_code, is_response, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602


@dataclass(frozen=True)
class Tapped:
    """The counting server behind a wiretap: what reached it, and which calls it ran."""

    command: list[str]
    env: dict[str, str]
    tap: Path
    counting: CountingUpstream

    def to_server(self, method: str | None = None) -> list[dict[str, Any]]:
        """Every message that reached the upstream, optionally of one method."""
        return tapped(self.tap, "server", method)

    def unparsed(self) -> list[dict[str, Any]]:
        """Lines that reached the upstream and were not JSON at all."""
        return [entry for entry in read_json_lines(self.tap) if "unparsed" in entry["message"]]

    def assert_all_valid(self) -> None:
        """Every message that reached the upstream is a well-formed JSON-RPC message."""
        assert self.unparsed() == []
        for message in self.to_server():
            types.jsonrpc_message_adapter.validate_python(message, by_name=False)


@pytest.fixture
def upstream(tmp_path: Path, counting: CountingUpstream) -> Tapped:
    """The counting server with a wiretap in front of it."""
    tap = tmp_path / "wiretap.jsonl"
    return Tapped(wiretap_command(tap, counting.command), counting.env, tap, counting)


@dataclass(frozen=True)
class Case:
    """One bad line and the error it must earn."""

    label: str
    line: bytes
    code: int
    request_id: object = None


async def _answer_to(guard: RawGuard, line: bytes) -> list[dict[str, Any]]:
    """Every message the guard writes in answer to one line.

    A ping follows the line: the guard answers a broken line as it reads it, before it
    reads the ping, so whatever it says about the line comes before the ping's answer.
    """
    start = len(guard.messages)
    await guard.send_line(line)
    barrier = guard.new_id()
    await guard.send({"jsonrpc": "2.0", "id": barrier, "method": "ping"})
    await guard.response(barrier, start=start)
    return [message for message in guard.messages[start:] if not is_response(message, barrier)]


def _mismatch(case: Case, answers: list[dict[str, Any]]) -> str | None:
    if len(answers) != 1:
        return f"{case.label}: expected one error {case.code}, got {answers}"
    answer = answers[0]
    if answer.get("jsonrpc") != "2.0" or error_code(answer) != case.code or "result" in answer:
        return f"{case.label}: expected error {case.code}, got {answer}"
    if answer.get("id") != case.request_id or type(answer.get("id")) is not type(case.request_id):
        return f"{case.label}: expected id {case.request_id!r}, got {answer}"
    return None


async def _check_cases(guard: RawGuard, cases: list[Case]) -> list[str]:
    mismatches: list[str] = []
    for case in cases:
        with anyio.fail_after(10):
            found = _mismatch(case, await _answer_to(guard, case.line))
        if found is not None:
            mismatches.append(found)
    return mismatches


def _line(message: object) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


BROKEN_LINES = [
    Case("truncated JSON", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {', PARSE_ERROR),
    Case("binary bytes", b"\xff\xfe\x00\x01\x80garbage", PARSE_ERROR),
    Case("JSON followed by junk", b'{"jsonrpc":"2.0","id":2,"method":"ping"} junk', PARSE_ERROR),
    Case("single quotes", b"{'jsonrpc': '2.0', 'id': 3, 'method': 'ping'}", PARSE_ERROR),
    Case("a number", b"42", INVALID_REQUEST),
    Case("a string", b'"tools/call"', INVALID_REQUEST),
    Case("null", b"null", INVALID_REQUEST),
    Case("an empty batch", b"[]", INVALID_REQUEST),
    Case(
        "a batch (not in MCP since 2025-06-18)", _line([{"jsonrpc": "2.0", "id": 4, "method": "ping"}]), INVALID_REQUEST
    ),
    Case("an object that is no message", _line({"hello": "world"}), INVALID_REQUEST),
    Case("no jsonrpc member", _line({"id": 5, "method": "ping"}), INVALID_REQUEST, 5),
    Case("jsonrpc 1.0", _line({"jsonrpc": "1.0", "id": "six", "method": "ping"}), INVALID_REQUEST, "six"),
    Case("a method that is a number", _line({"jsonrpc": "2.0", "id": 7, "method": 7}), INVALID_REQUEST, 7),
    # MCP: "Requests MUST include a string or integer ID ... the ID MUST NOT be null."
    Case("a null id", _line({"jsonrpc": "2.0", "id": None, "method": "ping"}), INVALID_REQUEST),
    Case("a boolean id", _line({"jsonrpc": "2.0", "id": True, "method": "ping"}), INVALID_REQUEST),
    Case("an object id", _line({"jsonrpc": "2.0", "id": {"n": 8}, "method": "ping"}), INVALID_REQUEST),
]


async def test_broken_lines_get_parse_or_invalid_request_errors(raw_guard: RawConnector, upstream: Tapped) -> None:
    """Invalid JSON gets -32700 and JSON that is no JSON-RPC message gets -32600 (with its id), each once."""
    async with raw_guard(upstream.command, env=upstream.env) as guard:
        mismatches = await _check_cases(guard, BROKEN_LINES)
        with anyio.fail_after(10):
            await guard.assert_serving()

    assert mismatches == [], "\n".join(mismatches)
    upstream.assert_all_valid()
    # The guard numbers its own requests upstream, so count: one relayed ping per serving check, none broken.
    assert len(upstream.to_server("ping")) == len(BROKEN_LINES), "a broken ping reached the upstream"
    assert [call["tool"] for call in upstream.counting.calls()] == ["echo"]


def _call(request_id: str, params: object) -> bytes:
    return _line({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


BAD_REQUESTS = [
    Case("unknown method", _line({"jsonrpc": "2.0", "id": "m1", "method": "tools/destroy"}), METHOD_NOT_FOUND, "m1"),
    Case(
        "unknown method, with params",
        _line({"jsonrpc": "2.0", "id": "m2", "method": "sampling/createMessage", "params": {}}),
        METHOD_NOT_FOUND,
        "m2",
    ),
    Case("tool name a number", _call("p1", {"name": 5, "arguments": {}}), INVALID_PARAMS, "p1"),
    Case("tool name missing", _call("p2", {"arguments": {"text": "x"}}), INVALID_PARAMS, "p2"),
    Case(
        "cursor a number",
        _line({"jsonrpc": "2.0", "id": "p4", "method": "tools/list", "params": {"cursor": 5}}),
        INVALID_PARAMS,
        "p4",
    ),
    Case("arguments a list", _call("a1", {"name": "echo", "arguments": ["text", "x"]}), INVALID_PARAMS, "a1"),
    Case("arguments a string", _call("a2", {"name": "echo", "arguments": '{"text": "x"}'}), INVALID_PARAMS, "a2"),
    Case("arguments a number", _call("a3", {"name": "echo", "arguments": 3}), INVALID_PARAMS, "a3"),
]


async def test_bad_requests_get_method_or_params_errors(raw_guard: RawConnector, upstream: Tapped) -> None:
    """An unknown method gets the upstream's own -32601 (the relay passes every method on, as a pipe
    would); a tools/call the guard cannot judge (a name that is no string, arguments not an object) -32602."""
    async with raw_guard(upstream.command, env=upstream.env) as guard:
        mismatches = await _check_cases(guard, BAD_REQUESTS)
        # JSON-RPC allows positional params and no scalar ones, MCP only an object: either error code is right.
        unstructured = {"array": [1, 2], "string": "echo", "number": 7}
        answers: dict[str, dict[str, Any]] = {}
        for label, params in unstructured.items():
            start = len(guard.messages)
            await guard.send_line(_call(label, params))
            with anyio.fail_after(10):
                answers[label] = await guard.response(label, start=start)
        with anyio.fail_after(10):
            await guard.assert_serving()

    assert mismatches == [], "\n".join(mismatches)
    for label, answer in answers.items():
        assert error_code(answer) in {INVALID_REQUEST, INVALID_PARAMS}, (label, answer)
    upstream.assert_all_valid()
    assert [message["params"]["name"] for message in upstream.to_server("tools/call")] == ["echo"]
    assert [message["id"] for message in upstream.to_server("tools/destroy")] == ["m1"]
    assert [call["tool"] for call in upstream.counting.calls()] == ["echo"]


async def test_unknown_tool_gets_the_upstreams_own_answer(
    raw_guard: RawConnector, connect: Connector, upstream: Tapped
) -> None:
    """A call to a tool the upstream lacks gets the error the upstream itself gives, and the session goes on."""
    async with raw_guard(upstream.command, env=upstream.env) as guard:
        with anyio.fail_after(10):
            through_guard = await guard.call_tool("no_such_tool", {"x": 1})
            await guard.assert_serving()
    async with connect(upstream.counting.command, mode="direct", env=upstream.counting.env) as direct:
        with anyio.fail_after(10), pytest.raises(MCPError) as raised:
            await direct.session.call_tool("no_such_tool", {"x": 1})

    assert through_guard["error"] == raised.value.error.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert error_code(through_guard) == INVALID_PARAMS, through_guard
    upstream.assert_all_valid()


async def test_request_reusing_an_id_in_flight_is_refused(raw_guard: RawConnector, upstream: Tapped) -> None:
    """A request reusing the id of one still in flight gets -32600 at once; the first goes on; the id is free after."""
    async with raw_guard(upstream.command, env=upstream.env) as guard:
        start = len(guard.messages)
        await guard.send_line(_call("same", {"name": "slow", "arguments": {"seconds": 1.5}}))
        await guard.send_line(_call("same", {"name": "echo", "arguments": {"text": "second"}}))
        with anyio.fail_after(5):
            refused = await guard.response("same", start=start)
        with anyio.fail_after(10):
            first = await guard.wait_for(lambda message: is_response(message, "same") and "result" in message)
        answered = len(guard.messages)
        await guard.send_line(_call("same", {"name": "echo", "arguments": {"text": "third"}}))
        with anyio.fail_after(10):
            reused = await guard.response("same", start=answered)

    assert error_code(refused) == INVALID_REQUEST, refused
    assert "still in flight" in refused["error"]["message"]
    assert result_texts(first) == ["slept 1.5 seconds"], first
    assert result_texts(reused) == ["third"], reused
    assert [call["tool"] for call in upstream.counting.calls()] == ["slow", "echo"]
    assert [call["arguments"] for call in upstream.counting.calls("echo")] == [{"text": "third"}]


async def test_oversized_client_message_refused_naming_the_limit(raw_guard: RawConnector, upstream: Tapped) -> None:
    """A message over LOOP_GUARD_MAX_MESSAGE_BYTES gets -32600 naming the limit (with its id); smaller ones pass."""
    limit = 64 * 1024
    env = {**upstream.env, "LOOP_GUARD_MAX_MESSAGE_BYTES": str(limit)}
    big = "b" * (limit + 10)
    python_order = _line({"jsonrpc": "2.0", "id": "first", "method": "tools/call", "params": _echo(big)})
    typescript_order = _line({"method": "tools/call", "params": _echo(big), "jsonrpc": "2.0", "id": "last"})
    cases = [
        Case("id first (Python SDK order)", python_order, INVALID_REQUEST, "first"),
        Case("id last (TypeScript SDK order)", typescript_order, INVALID_REQUEST, "last"),
        Case("not even JSON", b"{" * (limit * 3), INVALID_REQUEST),
    ]
    async with raw_guard(upstream.command, env=env) as guard:
        answers: list[dict[str, Any]] = []
        mismatches: list[str] = []
        for case in cases:
            with anyio.fail_after(10):
                answered = await _answer_to(guard, case.line)
            answers.extend(answered)
            if (found := _mismatch(case, answered)) is not None:
                mismatches.append(found)
        with anyio.fail_after(10):
            fits = await guard.call_tool("echo", {"text": "f" * (limit - 200)})
            await guard.assert_serving()

    assert mismatches == [], "\n".join(mismatches)
    for answer in answers:
        assert str(limit) in answer["error"]["message"], answer
        assert "LOOP_GUARD_MAX_MESSAGE_BYTES" in answer["error"]["message"], answer
    assert result_texts(fits) == ["f" * (limit - 200)]
    upstream.assert_all_valid()
    calls = upstream.counting.calls()
    assert len(calls) == 2, "an oversized call reached the upstream"
    assert len(calls[0]["arguments"]["text"]) == limit - 200


def _echo(text: str) -> dict[str, Any]:
    return {"name": "echo", "arguments": {"text": text}}


async def test_fifty_megabyte_message_relayed_at_default_limits(
    raw_guard: RawConnector, counting: CountingUpstream
) -> None:
    """With the default limit (64 MiB) a 50 MB tools/call goes through and its 50 MB result comes back."""
    text = "z" * 50_000_000
    async with raw_guard(counting.command, env=counting.env) as guard:
        answer = await guard.call_tool("echo", {"text": text}, within=90)
        with anyio.fail_after(10):
            await guard.assert_serving()

    assert result_texts(answer) == [text]
    assert answer["result"].get("isError") is not True
    assert len(counting.calls()[0]["arguments"]["text"]) == len(text)
