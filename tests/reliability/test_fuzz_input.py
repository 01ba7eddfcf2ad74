"""Property-based fuzzing of the guard's JSON-RPC input path, through one real guard process.

Hypothesis writes lines to the guard's stdin: random bytes, random JSON values, objects
that are nearly JSON-RPC messages, truncated messages, deeply nested and oversized lines,
odd Unicode. Whatever comes in, every line gets at most one reply, every reply is a
well-formed JSON-RPC message, every well-formed request gets exactly one, the guard never
dies, and a normal call works afterwards. (The loop detector is fuzzed on its own in
tests/unit; here it is switched off so that repeated fuzz calls are never refused.)
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import types
from pydantic import ValidationError

from tests.harness import CountingUpstream
from tests.reliability.wire import Message, RawConnector, RawGuard

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

LIMIT = 32 * 1024
"""LOOP_GUARD_MAX_MESSAGE_BYTES for the fuzzed guard: low, so oversized lines are cheap to make."""
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

# --- strategies ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=16),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
ids = st.one_of(
    st.integers(),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
methods = st.sampled_from(
    [
        "ping",
        "initialize",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/read",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "server/discover",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/roots/list_changed",
        "sampling/createMessage",
        "",
    ]
) | st.text(max_size=12)
# The counting server's `crash` and `slow` would end or stall the run: never called.
tool_names = st.sampled_from(["echo", "constant", "ticker", "image", "cwd", "no_such_tool"]) | st.text(
    max_size=8
).filter(lambda name: name not in {"crash", "slow"})
params = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "name": tool_names | json_values,
            "arguments": st.dictionaries(st.sampled_from(["text", "caption", "seed", "x"]), json_values) | json_values,
            "cursor": json_values,
            "_meta": st.fixed_dictionaries({}, optional={"progressToken": ids}) | json_values,
            "requestId": ids,
            "level": st.sampled_from(["debug", "info", "emergency", "loud"]),
            "uri": st.text(max_size=12),
            "protocolVersion": st.sampled_from(["2025-11-25", "2025-06-18", "1999-01-01"]),
            "capabilities": json_values,
            "clientInfo": json_values,
        },
    ),
    json_values,
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2]),
        "id": ids,
        "method": methods,
        "params": params,
        "result": json_values,
        "error": json_values,
    },
)

requests = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "id": st.integers() | st.text(max_size=8), "method": methods},
    optional={"params": params},
)
"""Well-formed JSON-RPC requests, their methods and parameters right or wrong."""
calls = st.fixed_dictionaries(
    {
        "jsonrpc": st.just("2.0"),
        "id": st.integers(),
        "method": st.just("tools/call"),
        "params": st.fixed_dictionaries(
            {"name": tool_names},
            optional={"arguments": st.dictionaries(st.sampled_from(["text", "caption", "seed"]), json_values)},
        ),
    }
)
"""tools/call requests, with arguments of any type for the counting server's tools."""


def _dump(value: object, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _nested(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    inner = b'{"a":' * depth + b"1" + b"}" * depth
    return b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":' + inner + b"}}"


def _oversized(size: int, request: bool) -> bytes:
    if not request:
        return b"x" * size
    return _dump(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "t" * size}},
        },
        True,
    )


lines = st.one_of(
    st.builds(_dump, requests, st.booleans()),
    st.builds(_dump, calls, st.booleans()),
    st.builds(_dump, messages, st.booleans()),
    st.builds(_dump, json_values, st.booleans()),
    st.builds(lambda message, cut: _dump(message, True)[:cut], messages, st.integers(0, 60)),
    st.binary(max_size=200),
    st.text(max_size=60).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.builds(_nested, st.integers(1, 5000), st.sampled_from(["list", "object"])),
    st.builds(_oversized, st.integers(LIMIT - 200, LIMIT + 2000), st.booleans()),
).map(lambda line: line.replace(b"\n", b" "))


# --- the oracle ------------------------------------------------------------------------------


@dataclass
class Sent:
    """One fuzzed line as sent, and what it may or must get back."""

    line: bytes
    request_id: str | None
    """The unique id put in the line's ``id``, when it had a string or integer one."""
    must_answer: bool
    """A JSON-RPC request the guard could read: exactly one response is owed."""
    replies: list[Message] = field(default_factory=list)


class Exchange:
    """Sends fuzzed lines to one guard and checks what comes back."""

    def __init__(self, guard: RawGuard) -> None:
        self.guard = guard
        self.serial = 0
        self.lines = 0
        self.outcomes: Counter[str] = Counter()
        """How the lines were answered: by error code, "result", or "none"."""

    def _unique(self, line: bytes) -> Sent:
        """Gives the line a unique id (so replies can be told apart) and decides what it is owed."""
        request_id: str | None = None
        try:
            value: Any = json.loads(line)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict) and type(value.get("id")) in (str, int):
            self.serial += 1
            request_id = value["id"] = f"fz-{self.serial}"
            line = _dump(value, True)
        must_answer = False
        if len(line) <= LIMIT:
            try:
                parsed = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except (ValidationError, RecursionError):
                parsed = None
            must_answer = isinstance(parsed, types.JSONRPCRequest)
        return Sent(line, request_id, must_answer)

    async def run(self, batch: list[bytes]) -> None:
        sent: list[Sent] = []
        for raw in batch:
            item = self._unique(raw)
            start = len(self.guard.messages)
            await self.guard.send_line(item.line)
            barrier = f"barrier-{self.serial}-{len(sent)}"
            await self.guard.send({"jsonrpc": "2.0", "id": barrier, "method": "ping"})
            await self.guard.response(barrier, start=start)
            # Broken lines are answered as they are read, before the barrier is: anything with
            # no id before the barrier's answer is this line's.
            item.replies = [
                message
                for message in self.guard.messages[start:]
                if "method" not in message and message.get("id") is None
            ]
            sent.append(item)
        owed = [item.request_id for item in sent if item.must_answer]
        with anyio.fail_after(15):
            for request_id in owed:
                await self.guard.response(request_id)
        by_id = {item.request_id: item for item in sent if item.request_id is not None}
        for message in self.guard.messages:
            if "method" not in message and message.get("id") in by_id:
                by_id[message["id"]].replies.append(message)
        for message in self.guard.messages:
            _assert_well_formed(message)
        unattributed = [m for m in self.guard.messages if "method" not in m and m.get("id") is None]
        assert len(unattributed) == sum(len(item.replies) for item in sent if item.request_id is None) + sum(
            1 for item in sent if item.request_id is not None for reply in item.replies if reply.get("id") is None
        ), ("a reply with no id came late", unattributed)
        for item in sent:
            assert len(item.replies) <= 1, (item.line[:300], item.replies)
            if item.must_answer:
                assert len(item.replies) == 1, (item.line[:300], item.replies)
            if len(item.line) > LIMIT:
                assert [reply["error"]["code"] for reply in item.replies] == [INVALID_REQUEST], item.replies
        assert self.guard.process.returncode is None, "the guard died"
        self.lines += len(sent)
        self.outcomes.update(_outcome(item) for item in sent)
        self.guard.messages.clear()


def _outcome(item: Sent) -> str:
    if not item.replies:
        return "none"
    reply = item.replies[0]
    return "result" if "result" in reply else str(reply["error"]["code"])


def _assert_well_formed(message: Message) -> None:
    assert message.get("jsonrpc") == "2.0", message
    if "method" in message:
        assert isinstance(message["method"], str), message
        return
    assert "id" in message, message
    assert ("result" in message) != ("error" in message), message
    if "error" in message:
        error = message["error"]
        assert isinstance(error, dict), message
        assert type(error.get("code")) is int, message
        assert isinstance(error.get("message"), str), message
    else:
        assert isinstance(message["result"], dict), message


async def test_fuzzed_lines_get_at_most_one_well_formed_reply(
    raw_guard: RawConnector, counting: CountingUpstream
) -> None:
    """Hundreds of random lines: at most one well-formed reply each, one for every request, and the guard lives on."""
    env = {**counting.env, "LOOP_GUARD_ENABLED": "false", "LOOP_GUARD_MAX_MESSAGE_BYTES": str(LIMIT)}
    async with raw_guard(counting.command, env=env) as guard:
        exchange = Exchange(guard)

        def explore() -> None:
            @settings(
                max_examples=150,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            )
            @given(batch=st.lists(lines, min_size=1, max_size=6))
            def check(batch: list[bytes]) -> None:
                anyio.from_thread.run(exchange.run, batch)

            check()

        await anyio.to_thread.run_sync(explore)
        with anyio.fail_after(10):
            await guard.assert_serving()
        stderr = guard.stderr_text()

    print(f"fuzzed {exchange.lines} lines, answered: {dict(exchange.outcomes)}")
    assert exchange.lines >= 150
    # The upstream may print tracebacks for the odd arguments it gets; none may come from the guard's code.
    guard_frames = [line for line in stderr.splitlines() if "File " in line and "/mcp_loop_guard/" in line]
    assert guard_frames == [], stderr[-3000:]
    assert Counter(line.split(" ", 2)[1] for line in guard.guard_lines())["ERROR"] == 0, guard.guard_lines()
