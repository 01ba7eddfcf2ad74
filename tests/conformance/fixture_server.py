"""The server the MCP conformance suite (``@modelcontextprotocol/conformance``) tests.

The suite's server scenarios call fixed fixture names (``test_simple_text``,
``test://static-text``, ``test_simple_prompt``...). This server implements every one
of them on the SDK's low-level server, so the suite can check it directly and then
through the guard, where any difference is the guard's doing.

Run as::

    python tests/conformance/fixture_server.py --transport http --port 8931   # http://127.0.0.1:8931/mcp
    python tests/conformance/fixture_server.py --transport stdio

Both protocol eras work: on 2025-era connections sampling and elicitation are
server-to-client requests; on 2026-07-28 they are returned as ``input_required``
results that the client fulfils and retries.
"""

from __future__ import annotations

import argparse
import base64
import io
import itertools
import json
import re
import wave
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import anyio
import uvicorn
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel
from starlette.requests import Request

SERVER_NAME = "mcp-conformance-fixture"
LOGGER_NAME = "conformance-fixture"
HTTP_PATH = "/mcp"
RETRY_INTERVAL_MS = 500
"""The reconnection delay suggested in SSE priming events (used by ``test_reconnection``)."""
EVENT_STORE_LIMIT = 10_000
RESOURCE_NOT_FOUND_2025 = -32002
"""The 2025 protocols' code for an unknown resource; 2026-07-28 retired it for -32602."""

# A valid 1x1 red PNG.
PNG_BASE64: Final = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def _wav_base64() -> str:
    """A valid WAV file: 10 ms of 8 kHz, 16-bit mono silence."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(8000)
        wav.writeframes(b"\x00\x00" * 80)
    return base64.b64encode(buffer.getvalue()).decode()


WAV_BASE64: Final = _wav_base64()

LOG_LEVELS: Final[tuple[types.LoggingLevel, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

NO_ARGUMENTS: Final[dict[str, Any]] = {"type": "object", "properties": {}}

JSON_SCHEMA_2020_12: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}

ELICITATION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}

# SEP-1034: a default for every primitive type.
DEFAULTS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}

# SEP-1330: the five enum variants.
ENUMS_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "untitledSingle": {
            "type": "string",
            "description": "Select one option",
            "enum": ["option1", "option2", "option3"],
        },
        "titledSingle": {
            "type": "string",
            "description": "Select one option with titles",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "description": "Select one option (legacy)",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Select multiple options",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Select multiple options with titles",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}


def _tool(name: str, description: str, input_schema: dict[str, Any] = NO_ARGUMENTS) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=input_schema)


def _string_arguments(**descriptions: str) -> dict[str, Any]:
    """An input schema of required string arguments."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": text} for name, text in descriptions.items()},
        "required": list(descriptions),
    }


TOOLS: Final[list[types.Tool]] = [
    _tool("test_simple_text", "Returns simple text content."),
    _tool("test_image_content", "Returns image content (a PNG)."),
    _tool("test_audio_content", "Returns audio content (a WAV)."),
    _tool("test_embedded_resource", "Returns an embedded text resource."),
    _tool("test_multiple_content_types", "Returns text, image and embedded resource content together."),
    _tool("test_tool_with_logging", "Sends three info log notifications, 50 ms apart, while it runs."),
    _tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100, 50 ms apart, to a caller's token."),
    _tool("test_error_handling", "Always fails with an isError result."),
    _tool("test_reconnection", "Closes its SSE stream mid-call (when the client can resume) and then answers."),
    _tool(
        "test_sampling",
        "Asks the client to sample an LLM with the prompt and returns the answer.",
        _string_arguments(prompt="The prompt to send to the LLM"),
    ),
    _tool(
        "test_elicitation",
        "Asks the user for a username and email and returns the response.",
        _string_arguments(message="The message to show the user"),
    ),
    _tool("test_elicitation_sep1034_defaults", "Elicits a form with a default for every primitive type (SEP-1034)."),
    _tool("test_elicitation_sep1330_enums", "Elicits a form with the five enum schema variants (SEP-1330)."),
    _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", JSON_SCHEMA_2020_12),
]

STATIC_TEXT = "test://static-text"
STATIC_BINARY = "test://static-binary"
WATCHED = "test://watched-resource"
TEMPLATE = "test://template/{id}/data"
TEMPLATE_PATTERN = re.compile(r"test://template/(?P<id>[^/]+)/data")

RESOURCES: Final[list[types.Resource]] = [
    types.Resource(
        uri=STATIC_TEXT,
        name="static-text",
        title="Static Text Resource",
        description="A static text resource.",
        mime_type="text/plain",
    ),
    types.Resource(
        uri=STATIC_BINARY,
        name="static-binary",
        title="Static Binary Resource",
        description="A static binary resource (a PNG image).",
        mime_type="image/png",
    ),
    types.Resource(
        uri=WATCHED,
        name="watched-resource",
        title="Watched Resource",
        description="A resource clients may subscribe to.",
        mime_type="text/plain",
    ),
]

RESOURCE_TEMPLATES: Final[list[types.ResourceTemplate]] = [
    types.ResourceTemplate(
        uri_template=TEMPLATE,
        name="template",
        title="Resource Template",
        description="A resource template whose id is substituted into the content.",
        mime_type="application/json",
    )
]


def _argument(name: str, description: str) -> types.PromptArgument:
    return types.PromptArgument(name=name, description=description, required=True)


PROMPTS: Final[list[types.Prompt]] = [
    types.Prompt(name="test_simple_prompt", title="Simple Test Prompt", description="A prompt without arguments."),
    types.Prompt(
        name="test_prompt_with_arguments",
        title="Prompt With Arguments",
        description="A prompt with two required arguments.",
        arguments=[_argument("arg1", "First test argument"), _argument("arg2", "Second test argument")],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        title="Prompt With Embedded Resource",
        description="A prompt that embeds a resource.",
        arguments=[_argument("resourceUri", "URI of the resource to embed")],
    ),
    types.Prompt(
        name="test_prompt_with_image",
        title="Prompt With Image",
        description="A prompt that includes an image.",
    ),
]

COMPLETIONS: Final[dict[tuple[str, str], list[str]]] = {
    ("test_prompt_with_arguments", "arg1"): ["hello", "help", "test", "testValue1"],
    ("test_prompt_with_arguments", "arg2"): ["world", "word", "testValue2"],
    ("test_prompt_with_embedded_resource", "resourceUri"): [STATIC_TEXT, STATIC_BINARY, WATCHED],
    (TEMPLATE, "id"): ["1", "2", "3", "123"],
}
MAX_COMPLETIONS = 100
"""The spec's cap on completion values per response."""


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")


def _embedded(uri: str, mime_type: str, text: str) -> types.EmbeddedResource:
    return types.EmbeddedResource(
        type="resource", resource=types.TextResourceContents(uri=uri, mime_type=mime_type, text=text)
    )


def _is_modern(ctx: ServerRequestContext[Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _connection_key(ctx: ServerRequestContext[Any]) -> str:
    """Identifies the client connection: its HTTP session id, or the one stdio peer."""
    if isinstance(ctx.request, Request):
        return ctx.request.headers.get("mcp-session-id", "")
    return "stdio"


class MemoryEventStore(EventStore):
    """Keeps the latest SSE events so a client can resume a closed stream with Last-Event-ID.

    Without an event store the SDK neither sends priming events nor lets a handler
    close its stream, so ``test_reconnection`` could not exercise resumption.
    """

    def __init__(self, limit: int = EVENT_STORE_LIMIT) -> None:
        self._events: OrderedDict[EventId, tuple[StreamId, types.JSONRPCMessage | None]] = OrderedDict()
        self._ids = itertools.count(1)
        self._limit = limit

    async def store_event(self, stream_id: StreamId, message: types.JSONRPCMessage | None) -> EventId:
        """Stores one event (``None`` for a priming event) and returns its id."""
        event_id = str(next(self._ids))
        self._events[event_id] = (stream_id, message)
        while len(self._events) > self._limit:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Sends the events of last_event_id's stream that came after it."""
        if last_event_id not in self._events:
            return None
        stream_id = self._events[last_event_id][0]
        after = False
        for event_id, (event_stream, message) in list(self._events.items()):
            if after and event_stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream_id


ResultT = TypeVar("ResultT", bound=BaseModel)
ToolHandler = Callable[
    [ServerRequestContext[Any], types.CallToolRequestParams],
    Awaitable[types.CallToolResult | types.InputRequiredResult],
]

FIXED_RESULTS: Final[dict[str, types.CallToolResult]] = {
    "test_simple_text": types.CallToolResult(content=[_text("This is a simple text response for testing.")]),
    "test_image_content": types.CallToolResult(content=[_image()]),
    "test_audio_content": types.CallToolResult(
        content=[types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")]
    ),
    "test_embedded_resource": types.CallToolResult(
        content=[_embedded("test://embedded-resource", "text/plain", "This is an embedded resource content.")]
    ),
    "test_multiple_content_types": types.CallToolResult(
        content=[
            _text("Multiple content types test:"),
            _image(),
            _embedded("test://mixed-content-resource", "application/json", json.dumps({"test": "data", "value": 123})),
        ]
    ),
    "test_error_handling": types.CallToolResult(
        is_error=True, content=[_text("This tool intentionally returns an error for testing")]
    ),
}
"""The tools whose result never varies."""


class ConformanceFixture:
    """State and handlers: per-connection log levels and resource subscriptions."""

    def __init__(self) -> None:
        self.log_levels: dict[str, types.LoggingLevel] = {}
        self.subscriptions: dict[str, set[str]] = {}

    # Tools

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        """Lists every fixture tool."""
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Runs one fixture tool; an unknown name is a protocol error."""
        if (fixed := FIXED_RESULTS.get(params.name)) is not None:
            return fixed.model_copy(deep=True)  # a fresh result, whatever the SDK does with it afterwards
        handlers: dict[str, ToolHandler] = {
            "test_tool_with_logging": self._with_logging,
            "test_tool_with_progress": self._with_progress,
            "test_reconnection": self._reconnection,
            "test_sampling": self._sampling,
            "test_elicitation": self._elicitation,
            "test_elicitation_sep1034_defaults": self._elicitation_defaults,
            "test_elicitation_sep1330_enums": self._elicitation_enums,
            "json_schema_2020_12_tool": self._json_schema_2020_12,
        }
        handler = handlers.get(params.name)
        if handler is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        return await handler(ctx, params)

    async def _with_logging(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        await self._log(ctx, "info", "Tool execution started")
        await anyio.sleep(0.05)
        await self._log(ctx, "info", "Tool processing data")
        await anyio.sleep(0.05)
        await self._log(ctx, "info", "Tool execution completed")
        return types.CallToolResult(content=[_text("Tool with logging executed successfully")])

    async def _with_progress(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # report_progress is a no-op when the caller sent no progress token.
        for step, progress in enumerate((0, 50, 100)):
            if step:
                await anyio.sleep(0.05)
            await ctx.session.report_progress(progress, 100, f"Completed step {progress} of 100")
        return types.CallToolResult(content=[_text("Tool with progress executed successfully")])

    async def _reconnection(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The SDK offers close_sse_stream only over streamable HTTP with an event store
        # and a client of 2025-11-25 or later (one that got a priming event to resume from).
        closed = ctx.close_sse_stream is not None
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
        await anyio.sleep(0.1)
        how = "after closing the stream" if closed else "on the original stream"
        return types.CallToolResult(content=[_text(f"Reconnection test completed successfully ({how}).")])

    async def _sampling(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        prompt = str((params.arguments or {}).get("prompt", ""))
        if not ctx.session.check_client_capability(types.ClientCapabilities(sampling=types.SamplingCapability())):
            return types.CallToolResult(is_error=True, content=[_text("The client does not support sampling.")])
        request = types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[types.SamplingMessage(role="user", content=_text(prompt))], max_tokens=100
            )
        )
        answer = await self._ask_client(ctx, params, "sampling", request, types.CreateMessageResult)
        if isinstance(answer, types.InputRequiredResult):
            return answer
        content = answer.content
        text = content.text if isinstance(content, types.TextContent) else f"<{content.type} content>"
        return types.CallToolResult(content=[_text(f"LLM response: {text}")])

    async def _elicitation(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        message = str((params.arguments or {}).get("message", ""))
        return await self._elicit(ctx, params, message, ELICITATION_SCHEMA, "User response")

    async def _elicitation_defaults(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        message = "Please review and update the form fields with defaults"
        return await self._elicit(ctx, params, message, DEFAULTS_SCHEMA, "Elicitation completed")

    async def _elicitation_enums(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        message = "Please select options from the enum fields"
        return await self._elicit(ctx, params, message, ENUMS_SCHEMA, "Elicitation completed")

    async def _json_schema_2020_12(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = json.dumps(params.arguments or {})
        return types.CallToolResult(content=[_text(f"JSON Schema 2020-12 tool called with: {arguments}")])

    async def _elicit(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        message: str,
        schema: dict[str, Any],
        label: str,
    ) -> types.CallToolResult | types.InputRequiredResult:
        if not ctx.session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability())):
            return types.CallToolResult(is_error=True, content=[_text("The client does not support elicitation.")])
        request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))
        answer = await self._ask_client(ctx, params, "elicitation", request, types.ElicitResult)
        if isinstance(answer, types.InputRequiredResult):
            return answer
        content = json.dumps(answer.content or {})
        return types.CallToolResult(content=[_text(f"{label}: action={answer.action}, content={content}")])

    async def _ask_client(
        self,
        ctx: ServerRequestContext[Any],
        params: types.CallToolRequestParams,
        key: str,
        request: types.CreateMessageRequest | types.ElicitRequest,
        result_type: type[ResultT],
    ) -> ResultT | types.InputRequiredResult:
        """Asks the client: a request on this call's stream (2025 eras), or input_required (2026-07-28)."""
        if not _is_modern(ctx):
            metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
            return await ctx.session.send_request(request, result_type, metadata=metadata)
        answer = (params.input_responses or {}).get(key)
        if isinstance(answer, result_type):
            return answer
        return types.InputRequiredResult(input_requests={key: request})

    # Logging

    async def set_logging_level(
        self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """Records the least severe level this connection wants to receive."""
        self.log_levels[_connection_key(ctx)] = params.level
        return types.EmptyResult()

    async def _log(self, ctx: ServerRequestContext[Any], level: types.LoggingLevel, text: str) -> None:
        """Sends a log notification on this request's stream, if the client asked for that level."""
        if _is_modern(ctx):
            # 2026-07-28: each request opts in to a level in its _meta.
            if level not in allowed_log_levels(ctx.protocol_version, ctx.meta):
                return
        else:
            threshold = self.log_levels.get(_connection_key(ctx), "debug")
            if LOG_LEVELS.index(level) < LOG_LEVELS.index(threshold):
                return
        notification = types.LoggingMessageNotification(
            params=types.LoggingMessageNotificationParams(level=level, logger=LOGGER_NAME, data=text)
        )
        await ctx.session.send_notification(notification, related_request_id=ctx.request_id)

    # Resources

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        """Lists the direct resources (not the template)."""
        return types.ListResourcesResult(resources=RESOURCES)

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """Lists the one resource template."""
        return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        """Reads a static resource or an instance of the template."""
        uri = params.uri
        contents: types.TextResourceContents | types.BlobResourceContents
        if uri == STATIC_TEXT:
            text = "This is the content of the static text resource."
            contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)
        elif uri == STATIC_BINARY:
            contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_BASE64)
        elif uri == WATCHED:
            contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text="Watched resource content")
        elif match := TEMPLATE_PATTERN.fullmatch(uri):
            item = match["id"]
            text = json.dumps({"id": item, "templateTest": True, "data": f"Data for ID: {item}"})
            contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
        else:
            code = types.INVALID_PARAMS if _is_modern(ctx) else RESOURCE_NOT_FOUND_2025
            raise MCPError(code, "Resource not found", {"uri": uri})
        return types.ReadResourceResult(contents=[contents])

    async def subscribe(
        self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        """Tracks a subscription; the fixture's resources never change, so no update follows."""
        self.subscriptions.setdefault(_connection_key(ctx), set()).add(params.uri)
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        """Drops a subscription."""
        self.subscriptions.get(_connection_key(ctx), set()).discard(params.uri)
        return types.EmptyResult()

    # Prompts

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        """Lists every fixture prompt."""
        return types.ListPromptsResult(prompts=PROMPTS)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        """Renders one prompt; unknown names and missing arguments are invalid params."""
        prompt = next((p for p in PROMPTS if p.name == params.name), None)
        if prompt is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        arguments = params.arguments or {}
        missing = [a.name for a in prompt.arguments or [] if a.required and a.name not in arguments]
        if missing:
            raise MCPError(types.INVALID_PARAMS, f"Missing required arguments: {', '.join(missing)}")
        messages: list[types.PromptMessage]
        match params.name:
            case "test_simple_prompt":
                messages = [types.PromptMessage(role="user", content=_text("This is a simple prompt for testing."))]
            case "test_prompt_with_arguments":
                text = f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'"
                messages = [types.PromptMessage(role="user", content=_text(text))]
            case "test_prompt_with_embedded_resource":
                resource = _embedded(arguments["resourceUri"], "text/plain", "Embedded resource content for testing.")
                messages = [
                    types.PromptMessage(role="user", content=resource),
                    types.PromptMessage(role="user", content=_text("Please process the embedded resource above.")),
                ]
            case _:
                messages = [
                    types.PromptMessage(role="user", content=_image()),
                    types.PromptMessage(role="user", content=_text("Please analyze the image above.")),
                ]
        return types.GetPromptResult(description=prompt.description, messages=messages)

    # Completion

    async def complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """Suggests the known values of a prompt or template argument that start with the typed prefix."""
        ref = params.ref
        target = ref.name if isinstance(ref, types.PromptReference) else ref.uri
        known = {p.name for p in PROMPTS} | {t.uri_template for t in RESOURCE_TEMPLATES}
        if target not in known:
            raise MCPError(types.INVALID_PARAMS, f"Unknown reference: {target}")
        candidates = COMPLETIONS.get((target, params.argument.name), [])
        values = [value for value in candidates if value.startswith(params.argument.value)]
        return types.CompleteResult(
            completion=types.Completion(
                values=values[:MAX_COMPLETIONS], total=len(values), has_more=len(values) > MAX_COMPLETIONS
            )
        )


def build_server() -> Server[Any]:
    """The fixture on the SDK's low-level server."""
    fixture = ConformanceFixture()
    server: Server[Any] = Server(
        SERVER_NAME,
        version="1.0.0",
        title="MCP Conformance Fixture",
        instructions="Implements the fixtures of the MCP conformance suite's server scenarios.",
        on_list_tools=fixture.list_tools,
        on_call_tool=fixture.call_tool,
        on_list_resources=fixture.list_resources,
        on_list_resource_templates=fixture.list_resource_templates,
        on_read_resource=fixture.read_resource,
        on_subscribe_resource=fixture.subscribe,
        on_unsubscribe_resource=fixture.unsubscribe,
        on_list_prompts=fixture.list_prompts,
        on_get_prompt=fixture.get_prompt,
        on_completion=fixture.complete,
    )
    # Registered by method rather than on_set_logging_level=, which warns that the
    # capability is deprecated in 2026-07-28; the 2025 scenarios still test it.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, fixture.set_logging_level)
    return server


async def serve_stdio() -> None:
    """Serves one client over stdio until stdin closes."""
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(port: int, host: str = "127.0.0.1") -> None:
    """Serves streamable HTTP at http://host:port/mcp until interrupted."""
    server = build_server()
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH,
        event_store=MemoryEventStore(),
        retry_interval=RETRY_INTERVAL_MS,
        host=host,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(argv: Sequence[str] | None = None) -> None:
    """Parses the command line and serves."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=8931, help="HTTP port (http only)")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP host (http only)")
    args = parser.parse_args(argv)
    if args.transport == "http":
        serve_http(args.port, args.host)
    else:
        anyio.run(serve_stdio)


if __name__ == "__main__":
    main()
