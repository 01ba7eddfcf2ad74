"""A scripted stand-in for the Anthropic Messages API, for driving Claude Code without a model.

It serves ``POST /v1/messages`` (streamed as server-sent events, or as one JSON body when
the client does not ask for a stream), ``POST /v1/messages/count_tokens`` and the
``HEAD /`` that Claude Code sends to warm its connection, on 127.0.0.1 in a thread.

The main conversation is told apart from Claude Code's side requests (session titles,
tool-use summaries, command prefixes, all sent with a small model and no MCP tools) by
the tools it offers: only the main conversation offers the scripted MCP tool. Its turn
number is the number of assistant turns already in the conversation, so a retried
request gets the same answer. The script: ``calls`` turns each asking for the same
``tool_use``, then one final text turn. Every ``tool_result`` the client sends back for
those calls is kept, in call order, as the model saw it, less the ``<system-reminder>``
texts Claude Code itself appends to some of them.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOCALHOST = "127.0.0.1"
TOOL_USE_PREFIX = "toolu_loop_"
"""The prefix of the ids of the scripted tool calls."""
REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>", re.DOTALL)
"""Claude Code appends reminders of its own to tool results now and then (e.g. to use its todo tool)."""
SIDE_ANSWER = "Repeated tool calls"
"""What a side request (a title, a summary) gets when it asks for plain text."""


@dataclass(frozen=True)
class Script:
    """What the scripted model does: the same tool call ``calls`` times, then a final answer."""

    tool: str
    """The tool's name as the client offers it to the model, e.g. ``mcp__counting__constant``."""
    arguments: Mapping[str, Any]
    calls: int
    final_text: str = "I have what I need."


@dataclass(frozen=True)
class SeenResult:
    """One tool result as the model received it."""

    texts: tuple[str, ...]
    is_error: bool

    @property
    def text(self) -> str:
        """All the texts of the result, joined by newlines."""
        return "\n".join(self.texts)


@dataclass(frozen=True)
class Request:
    """One request the client made, for diagnostics."""

    method: str
    path: str
    kind: str
    """``main`` (the scripted conversation), ``side`` (another model request) or ``other``."""
    model: str | None = None


def _texts(content: Any) -> tuple[str, ...]:
    """The texts of a tool_result's content (a string or a list of blocks), without the client's reminders."""
    if isinstance(content, str):
        found = [content]
    elif isinstance(content, list):
        found = [block.get("text", "") for block in content if block.get("type") == "text"]
    else:
        found = []
    return tuple(text for text in map(_without_reminders, found) if text is not None)


def _without_reminders(text: str) -> str | None:
    """The text less Claude Code's reminders; None when there was nothing else."""
    if "<system-reminder>" not in text:
        return text
    return REMINDER.sub("", text).rstrip() or None


def _placeholder(schema: Mapping[str, Any]) -> Any:
    """A small value that satisfies a JSON schema, for side requests asking for JSON."""
    kind = schema.get("type")
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties", {})
        return {name: _placeholder(sub) for name, sub in properties.items()}
    if kind == "array":
        return []
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return 0
    if kind == "null":
        return None
    return SIDE_ANSWER


def _json_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a request wants its answer to follow, if it asks for structured output."""
    for holder in (body.get("output_format"), (body.get("output_config") or {}).get("format")):
        if isinstance(holder, Mapping) and holder.get("type") == "json_schema":
            schema = holder.get("schema")
            return schema if isinstance(schema, Mapping) else None
    return None


def _events(message: dict[str, Any]) -> bytes:
    """The message as the stream of server-sent events the Messages API sends."""
    start = dict(message, content=[], stop_reason=None, usage={"input_tokens": 100, "output_tokens": 1})
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return "".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n" for event in events).encode()


@dataclass
class FakeAnthropicAPI:
    """The scripted API and what it saw; start it with ``serving()``."""

    script: Script
    requests: list[Request] = field(default_factory=list)
    _results: dict[str, SeenResult] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        """The base URL to give the client as ``ANTHROPIC_BASE_URL``."""
        assert self._server is not None, "not serving"
        return f"http://{LOCALHOST}:{self._server.server_address[1]}"

    @contextmanager
    def serving(self) -> Iterator[FakeAnthropicAPI]:
        """Serves on a free port of 127.0.0.1 in a thread until the block ends."""
        api = self

        class Handler(_Handler):
            owner = api

        server = ThreadingHTTPServer((LOCALHOST, 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, name="fake-anthropic-api", daemon=True)
        self._server = server
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)

    def results(self) -> list[SeenResult]:
        """The results of the scripted calls that came back so far, in call order."""
        with self._lock:
            return [self._results[key] for key in sorted(self._results)]

    def main_requests(self) -> int:
        """How many requests of the main conversation arrived."""
        with self._lock:
            return sum(1 for request in self.requests if request.kind == "main")

    def describe(self) -> str:
        """Every request so far, one per line, for assertion messages."""
        with self._lock:
            return "\n".join(f"{r.method} {r.path} {r.kind} {r.model or ''}" for r in self.requests)

    # --- answering ------------------------------------------------------------------------

    def record(self, request: Request) -> None:
        """Keeps one request for diagnostics."""
        with self._lock:
            self.requests.append(request)

    def answer(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The assistant message answering one Messages API request."""
        offered = {tool.get("name") for tool in body.get("tools") or []}
        model = str(body.get("model", "claude-sonnet-4-6"))
        if self.script.tool not in offered:
            self.record(Request("POST", "/v1/messages", "side", model))
            schema = _json_schema(body)
            text = SIDE_ANSWER if schema is None else json.dumps(_placeholder(schema))
            return _message(model, len(self.requests), [{"type": "text", "text": text}], "end_turn")
        messages: list[dict[str, Any]] = list(body.get("messages") or [])
        self._keep_results(messages)
        turn = sum(1 for message in messages if message.get("role") == "assistant")
        self.record(Request("POST", "/v1/messages", "main", model))
        if turn < self.script.calls:
            call = {
                "type": "tool_use",
                "id": f"{TOOL_USE_PREFIX}{turn + 1:04d}",
                "name": self.script.tool,
                "input": dict(self.script.arguments),
            }
            return _message(model, turn, [call], "tool_use")
        return _message(model, turn, [{"type": "text", "text": self.script.final_text}], "end_turn")

    def _keep_results(self, messages: list[dict[str, Any]]) -> None:
        """Keeps each scripted call's result the first time it is seen (later requests may trim it)."""
        with self._lock:
            for message in messages:
                content = message.get("content")
                if message.get("role") != "user" or not isinstance(content, list):
                    continue
                for block in content:
                    key = block.get("tool_use_id", "")
                    if block.get("type") == "tool_result" and key.startswith(TOOL_USE_PREFIX):
                        seen = SeenResult(_texts(block.get("content")), bool(block.get("is_error", False)))
                        self._results.setdefault(key, seen)


def _message(model: str, number: int, content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{number:04d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


class _Handler(BaseHTTPRequestHandler):
    """Answers one connection's requests for the FakeAnthropicAPI in ``owner``."""

    owner: FakeAnthropicAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Stays quiet: requests are recorded instead."""

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", "req_fake")
        self.end_headers()
        self.wfile.write(body)

    def _not_found(self) -> None:
        error = {"type": "error", "error": {"type": "not_found_error", "message": f"no {self.path} here"}}
        self._send(404, json.dumps(error).encode())

    def do_HEAD(self) -> None:
        """Claude Code's connection warm-up."""
        self.owner.record(Request("HEAD", self.path, "other"))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        """Nothing is served by GET; recorded so a test can see what was asked."""
        self.owner.record(Request("GET", self.path, "other"))
        self._not_found()

    def do_POST(self) -> None:
        """Messages, token counting; anything else is recorded and answered 404."""
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path.split("?", 1)[0]
        if path == "/v1/messages/count_tokens":
            self.owner.record(Request("POST", path, "other", body.get("model")))
            self._send(200, json.dumps({"input_tokens": 100}).encode())
        elif path == "/v1/messages":
            message = self.owner.answer(body)
            if body.get("stream"):
                self._send(200, _events(message), "text/event-stream")
            else:
                self._send(200, json.dumps(message).encode())
        else:
            self.owner.record(Request("POST", path, "other", body.get("model")))
            self._not_found()
