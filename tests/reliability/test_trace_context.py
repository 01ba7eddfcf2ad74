"""A client's trace context that breaks the W3C rules never reaches the upstream.

``traceparent`` and ``tracestate`` come from clients (a request's ``_meta``, or its HTTP
headers) and went upstream as they were: 100 KB of ``tracestate``, control characters,
33 list members. The upstream here is the raw HTTP fixture that writes down every request
it parses, so what reached it is read off its record: through the stdio guard
(``--upstream URL``, the trace context in ``_meta``) and through the HTTP guard relaying
a client's requests (the trace context in headers), a valid context goes on, an invalid
``tracestate`` is dropped alone, and an invalid ``traceparent`` takes its ``tracestate``
with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.harness import read_json_lines
from tests.http_harness import (
    SESSION_HEADER,
    Rig,
    http_post,
    initialize_body,
    open_http_session,
    time_entry,
    tool_call_body,
)
from tests.proxy.http_inproc import serving_cli
from tests.reliability.wire import RawConnector, result_texts

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo@vendor=00f067aa0ba902b7"
HUGE = "a=" + "x" * 100_000
"""A ``tracestate`` of 100 KB: each value may have 256 characters, the list 32 members."""
CASES: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "valid": (
        {"traceparent": TRACEPARENT, "tracestate": TRACESTATE},
        {"traceparent": TRACEPARENT, "tracestate": TRACESTATE},
    ),
    "100 KB tracestate": ({"traceparent": TRACEPARENT, "tracestate": HUGE}, {"traceparent": TRACEPARENT}),
    "33 members": (
        {"traceparent": TRACEPARENT, "tracestate": ",".join(f"k{n}=v" for n in range(33))},
        {"traceparent": TRACEPARENT},
    ),
    "a value holding '='": ({"traceparent": TRACEPARENT, "tracestate": "k=a=b"}, {"traceparent": TRACEPARENT}),
    "upper-case traceparent": ({"traceparent": TRACEPARENT.upper(), "tracestate": TRACESTATE}, {}),
    "all-zero trace id": ({"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01", "tracestate": TRACESTATE}, {}),
}
META_ONLY: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "CR/LF in tracestate": (
        {"traceparent": TRACEPARENT, "tracestate": "k=v\r\nX-Other: y"},
        {"traceparent": TRACEPARENT},
    ),
    "CR/LF in traceparent": ({"traceparent": TRACEPARENT + "\r\nX-Other: y", "tracestate": TRACESTATE}, {}),
}
"""Control characters cannot come in HTTP headers (the guard's HTTP server refuses them), only in ``_meta``."""


def carried(entry: dict[str, Any]) -> dict[str, str]:
    """The trace context one recorded request carried: in its headers, else in its body's ``_meta``."""
    found = {key.lower(): value for key, value in entry["headers"] if key.lower() in ("traceparent", "tracestate")}
    if found:
        return found
    meta = ((entry.get("body") or {}).get("params") or {}).get("_meta") or {}
    return {key: value for key, value in meta.items() if key in ("traceparent", "tracestate")}


def calls(log: Path) -> dict[str, dict[str, Any]]:
    """The recorded tools/call requests, by the text they echo."""
    return {
        entry["body"]["params"]["arguments"]["text"]: entry
        for entry in read_json_lines(log)
        if (entry.get("body") or {}).get("method") == "tools/call"
    }


async def test_trace_context_in_meta_that_breaks_the_rules_is_dropped(
    rig: Rig, raw_guard: RawConnector, tmp_path: Path
) -> None:
    """stdio guard, tracing off: each call's _meta loses what fails the W3C rules, and keeps the rest (the
    progress token the guard adds for its call timeout included)."""
    log = tmp_path / "requests.jsonl"
    log.touch()
    cases = {**CASES, **META_ONLY}
    async with (
        rig.recording_http(log) as upstream,
        raw_guard([], guard_args=["--upstream", upstream.mcp_url, "--call-timeout-seconds", "30"]) as guard,
    ):
        for name, (sent, _) in cases.items():
            params = {"name": "echo", "arguments": {"text": name}, "_meta": sent}
            answer = await guard.request("tools/call", params)
            assert result_texts(answer) == [name], answer
    reached = {name: carried(entry) for name, entry in calls(log).items()}
    assert reached == {name: kept for name, (_, kept) in cases.items()}
    tokens = [entry["body"]["params"]["_meta"].get("progressToken", "") for entry in calls(log).values()]
    assert all(str(token).startswith("mcp-loop-guard-progress-") for token in tokens), tokens


async def test_trace_context_headers_that_break_the_rules_are_dropped(rig: Rig, tmp_path: Path) -> None:
    """HTTP guard relaying a client's requests: trace headers reach the upstream only when they follow the rules."""
    log = tmp_path / "requests.jsonl"
    log.touch()
    async with rig.recording_http(log) as upstream, serving_cli(["--upstream", upstream.mcp_url]) as guard:
        with anyio.fail_after(30):
            opened = await http_post(guard.url, initialize_body())
            session = {SESSION_HEADER: opened.headers[SESSION_HEADER], "Mcp-Protocol-Version": "2025-11-25"}
            for number, (name, (sent, _)) in enumerate(CASES.items(), start=2):
                answer = await http_post(guard.url, tool_call_body("echo", {"text": name}, number), session | sent)
                assert answer.status_code == 200, (name, answer.status_code, answer.text[:300])
    reached = {name: carried(entry) for name, entry in calls(log).items()}
    assert reached == {name: kept for name, (_, kept) in CASES.items()}


async def test_trace_context_in_meta_is_checked_through_a_router(rig: Rig, tmp_path: Path) -> None:
    """HTTP guard of two servers (a session's router): a call's _meta reaches the upstream without what fails the
    rules."""
    log = tmp_path / "requests.jsonl"
    log.touch()
    cases = {**CASES, **META_ONLY}
    async with rig.recording_http(log) as upstream:
        config = rig.config({"rec": {"type": "http", "url": upstream.mcp_url}, "time": time_entry()})
        async with serving_cli(["--config", str(config)]) as guard, open_http_session(guard.url) as client:
            with anyio.fail_after(30):
                for name, (sent, _) in cases.items():
                    result = await client.session.call_tool("rec__echo", {"text": name}, meta=sent)
                    assert not result.is_error, (name, result)
    reached = {name: carried(entry) for name, entry in calls(log).items()}
    assert reached == {name: kept for name, (_, kept) in cases.items()}
