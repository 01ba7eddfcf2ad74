"""OpenTelemetry end to end: spans at a real OTLP endpoint, verdict events, the client's trace continued upstream."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import Connector, CountingUpstream, tapped, wiretap_command
from tests.http_harness import (
    KEY_HEADER,
    MODERN_VERSION,
    Rig,
    ServerProcess,
    mcp_http_client,
    open_http_session,
    payload_for,
    raw_call,
    serve_guard,
)
from tests.otlp_receiver import ReceivedSpan, Receiver, otlp_receiver

pytestmark = pytest.mark.anyio

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
SERVER_KIND = 2
"""``SPAN_KIND_SERVER`` in the OTLP protobuf."""
ERROR = 2
"""``STATUS_CODE_ERROR``."""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with otlp_receiver() as found:
        yield found


def otel_env(receiver: Receiver) -> dict[str, str]:
    """What an operator sets: the endpoint (traces only), a short batch delay so spans come promptly."""
    return {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}


def guard_spans(receiver: Receiver) -> list[ReceivedSpan]:
    """The guard's own spans (the MCP SDK's spans, on the HTTP path, come too)."""
    return [span for span in receiver.received() if span.scope == "mcp-loop-guard"]


async def spans_of(receiver: Receiver, count: int) -> list[ReceivedSpan]:
    with anyio.fail_after(20):
        while len(guard_spans(receiver)) < count:  # noqa: ASYNC110 - another process sends them
            await anyio.sleep(0.05)
    return guard_spans(receiver)


async def test_the_stdio_relay_sends_a_span_per_call_with_verdict_events_and_continues_the_trace(
    connect: Connector, counting: CountingUpstream, receiver: Receiver, tmp_path: Path
) -> None:
    """Five identical calls with the client's traceparent: five spans in its trace, warn and block events, no args."""
    tap = tmp_path / "tap.jsonl"
    env = {**counting.env, **otel_env(receiver)}
    async with connect.guard_process(wiretap_command(tap, counting.command), env=env) as guard:
        with anyio.fail_after(30):
            for _ in range(5):
                await guard.session.call_tool("echo", {"text": "secret-argument"}, meta={"traceparent": TRACEPARENT})
        await guard.close_stdin()
        with anyio.fail_after(10):
            await guard.wait_exit()
    spans = await spans_of(receiver, 5)
    assert [span.name for span in spans] == ["tools/call echo"] * 5
    for span in spans:
        assert (span.trace_id, span.parent_span_id, span.kind) == (TRACE_ID, CLIENT_SPAN, SERVER_KIND)
        assert span.attributes["mcp.method.name"] == "tools/call"
        assert span.attributes["gen_ai.tool.name"] == "echo"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["mcp.session.id"]
        assert span.service == "mcp-loop-guard"
        assert "secret-argument" not in json.dumps([span.attributes, span.events])
    assert [span.attributes["mcp_loop_guard.verdict"] for span in spans] == ["allow", "allow", "warn", "warn", "block"]
    assert [[name for name, _ in span.events] for span in spans] == [
        [],
        [],
        ["mcp_loop_guard.warn"],
        ["mcp_loop_guard.warn"],
        ["mcp_loop_guard.block"],
    ]
    assert spans[4].events[0][1]["mcp_loop_guard.family"] == "identical"
    assert spans[4].events[0][1]["mcp_loop_guard.count"] == 5
    assert (spans[4].status_code, spans[4].attributes["error.type"]) == (ERROR, "mcp_loop_guard.refused")
    # The upstream got the guard's span as the parent of its own work, in the same trace.
    forwarded = tapped(tap, "server", "tools/call")
    assert len(forwarded) == 4
    for message, span in zip(forwarded, spans, strict=False):
        assert message["params"]["_meta"]["traceparent"] == f"00-{TRACE_ID}-{span.span_id}-01"


async def test_a_tracestate_that_breaks_the_rules_is_neither_read_nor_passed_on(
    connect: Connector, counting: CountingUpstream, receiver: Receiver, tmp_path: Path
) -> None:
    """A valid traceparent with a tracestate of 40 members: the span continues the trace, the upstream gets no state."""
    tap = tmp_path / "tap.jsonl"
    env = {**counting.env, **otel_env(receiver)}
    tracestate = ",".join(f"k{n}=v" for n in range(40))
    async with connect.guard_process(wiretap_command(tap, counting.command), env=env) as guard:
        with anyio.fail_after(30):
            meta = {"traceparent": TRACEPARENT, "tracestate": tracestate}
            await guard.session.call_tool("echo", {"text": "x"}, meta=meta)
        await guard.close_stdin()
        with anyio.fail_after(10):
            await guard.wait_exit()
    (span,) = await spans_of(receiver, 1)
    (forwarded,) = tapped(tap, "server", "tools/call")
    assert (span.trace_id, span.parent_span_id) == (TRACE_ID, CLIENT_SPAN)
    assert forwarded["params"]["_meta"]["traceparent"] == f"00-{TRACE_ID}-{span.span_id}-01"
    assert "tracestate" not in forwarded["params"]["_meta"], forwarded["params"]["_meta"]


async def _traced_call(guard: ServerProcess, tool: str, receiver: Receiver) -> list[ReceivedSpan]:
    """One keyed sessionless call with the client's ``traceparent`` header; the guard's span of it."""
    with anyio.fail_after(30):
        headers = {KEY_HEADER: "traced", "traceparent": TRACEPARENT}
        response = await raw_call(guard.mcp_url, tool, {"text": "x"}, headers)
    assert payload_for(response, 1)["result"]["content"]
    return await spans_of(receiver, 1)


async def test_the_http_relay_continues_a_trace_from_the_request_headers(
    rig: Rig, counting: CountingUpstream, receiver: Receiver, tmp_path: Path
) -> None:
    """Over HTTP (the relay in front of one stdio server, a keyed sessionless request) ``traceparent`` is the parent.

    The upstream gets the guard's span as the parent of its own work, in ``_meta``.
    """
    tap = tmp_path / "tap.jsonl"
    env = {**counting.env, **otel_env(receiver), "LOOP_GUARD_STATE": "memory"}
    argv = ["--stateless", "--", *wiretap_command(tap, counting.command)]
    async with serve_guard(argv, marker=rig.marker, stderr=rig.log("guard"), env=env) as guard:
        spans = await _traced_call(guard, "echo", receiver)
    assert (spans[0].trace_id, spans[0].parent_span_id) == (TRACE_ID, CLIENT_SPAN)
    assert spans[0].attributes["mcp_loop_guard.server"]
    (forwarded,) = tapped(tap, "server", "tools/call")
    assert forwarded["params"]["_meta"]["traceparent"] == f"00-{TRACE_ID}-{spans[0].span_id}-01"


async def test_a_stateless_guard_of_several_servers_continues_a_trace_from_the_request_headers(
    rig: Rig, counting: CountingUpstream, receiver: Receiver, tmp_path: Path
) -> None:
    """--stateless over HTTP in front of two servers (each request over a share of one router): the header is the
    parent, and the server the call is routed to gets the guard's span as the parent of its own work."""
    tap = tmp_path / "tap.jsonl"
    env = {**counting.env, **otel_env(receiver), "LOOP_GUARD_STATE": "memory"}
    tapped_command = wiretap_command(tap, counting.command)
    config = rig.config(
        {
            "counting": {"command": tapped_command[0], "args": tapped_command[1:]},
            "other": {"command": counting.command[0], "args": counting.command[1:]},
        }
    )
    argv = ["--stateless", "--config", str(config)]
    async with serve_guard(argv, marker=rig.marker, stderr=rig.log("guard"), env=env) as guard:
        spans = await _traced_call(guard, "counting__echo", receiver)
    assert (spans[0].trace_id, spans[0].parent_span_id) == (TRACE_ID, CLIENT_SPAN)
    (forwarded,) = tapped(tap, "server", "tools/call")
    assert forwarded["params"]["_meta"]["traceparent"] == f"00-{TRACE_ID}-{spans[0].span_id}-01"


async def test_the_sdk_path_continues_a_trace_from_the_request_headers(
    rig: Rig, counting: CountingUpstream, receiver: Receiver
) -> None:
    """A 2026-07-28 client of a handshake-era server (translated by the SDK): the header is the parent, and the
    SDK's client span of the call upstream nests under the guard's."""
    env = {**counting.env, **otel_env(receiver), "LOOP_GUARD_STATE": "memory"}
    headers = {KEY_HEADER: "traced", "traceparent": TRACEPARENT}
    async with (
        serve_guard(["--", *counting.command], marker=rig.marker, stderr=rig.log("guard"), env=env) as guard,
        mcp_http_client(headers) as http,
        Client(streamable_http_client(guard.mcp_url, http_client=http), mode=MODERN_VERSION) as client,
    ):
        with anyio.fail_after(30):
            result = await client.call_tool("echo", {"text": "x"})
        spans = await spans_of(receiver, 1)
        with anyio.fail_after(20):
            while not [s for s in receiver.received() if s.parent_span_id == spans[0].span_id]:  # noqa: ASYNC110
                await anyio.sleep(0.05)
    assert not result.is_error, result
    assert (spans[0].trace_id, spans[0].parent_span_id) == (TRACE_ID, CLIENT_SPAN)
    (upstream_call,) = [span for span in receiver.received() if span.parent_span_id == spans[0].span_id]
    assert upstream_call.trace_id == TRACE_ID
    assert upstream_call.attributes["mcp.method.name"] == "tools/call"


@pytest.mark.parametrize("servers", [1, 2], ids=["the relay in front of one server", "a router of two"])
async def test_a_session_id_reaches_no_span_as_it_is(
    rig: Rig, counting: CountingUpstream, receiver: Receiver, servers: int
) -> None:
    """Without tokens the Mcp-Session-Id is a credential: spans carry a 16-digit digest of the agent key instead."""
    env = {**counting.env, **otel_env(receiver), "LOOP_GUARD_STATE": "memory"}
    entry = {"command": counting.command[0], "args": counting.command[1:]}
    config = rig.config({f"counting{n}": entry for n in range(servers)})
    tool = "echo" if servers == 1 else "counting0__echo"
    async with (
        serve_guard(["--config", str(config)], marker=rig.marker, stderr=rig.log("guard"), env=env) as guard,
        open_http_session(guard.mcp_url) as client,
    ):
        with anyio.fail_after(20):
            await client.session.call_tool(tool, {"text": "x"}, meta={"traceparent": TRACEPARENT})
        spans = await spans_of(receiver, 1)
        session_id = client.session_id
    everything = json.dumps([[span.attributes, span.events] for span in receiver.received()])
    assert session_id not in everything
    assert re.fullmatch(r"[0-9a-f]{16}", spans[0].attributes["mcp.session.id"]), spans[0].attributes


async def test_without_an_exporter_configured_nothing_is_traced_and_otel_is_not_loaded() -> None:
    """No OTEL_* variables: the guard does not even import OpenTelemetry."""
    probe = (
        "import sys, anyio\n"
        "from mcp_loop_guard import tracing\n"
        "with tracing.installed({}):\n"
        "    assert tracing.current() is None\n"
        "from mcp_loop_guard.proxy.relay import judge\n"
        "print(any(name.startswith('opentelemetry') for name in sys.modules))\n"
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    done = await anyio.run_process([sys.executable, "-c", probe], env=env)
    assert done.stdout.decode().strip() == "False"
