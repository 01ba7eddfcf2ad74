"""The fixture server works in both protocol eras over both transports (the suite checks HTTP at 2025-11-25 only)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from mcp import Client, StdioServerParameters, types
from mcp.client.session import ClientRequestContext

from tests.conformance.run_suite import fixture_command, serving_fixture

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


async def _sample(context: ClientRequestContext, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="pong"), model="m")


async def _elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    assert isinstance(params, types.ElicitRequestFormParams)
    chosen: dict[str, str | int | float | bool | list[str] | None] = dict.fromkeys(
        params.requested_schema["properties"], "x"
    )
    return types.ElicitResult(action="accept", content=chosen)


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", list(ERAS))
async def test_fixture_serves_both_eras(transport: str, mode: str) -> None:
    """Sampling, elicitation, logging, progress, resources, prompts and completion work in either era."""
    with contextlib.ExitStack() as stack:
        if transport == "http":
            target: str | StdioServerParameters = stack.enter_context(serving_fixture())
        else:
            command = fixture_command("stdio")
            target = StdioServerParameters(command=command[0], args=command[1:])
        await _exercise(target, mode)


async def _exercise(target: str | StdioServerParameters, mode: str) -> None:
    logs: list[Any] = []
    seen: list[float] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with Client(
        target,
        mode="legacy" if mode == "legacy" else "auto",
        sampling_callback=_sample,
        elicitation_callback=_elicit,
        logging_callback=on_log,
        log_level="info",
    ) as client:
        assert client.session.protocol_version == ERAS[mode]
        assert _text(await client.call_tool("test_sampling", {"prompt": "ping"})) == "LLM response: pong"
        answer = _text(await client.call_tool("test_elicitation", {"message": "who?"}))
        assert answer == f"User response: action=accept, content={json.dumps({'username': 'x', 'email': 'x'})}"
        assert "untitledSingle" in _text(await client.call_tool("test_elicitation_sep1330_enums", {}))
        await client.call_tool("test_tool_with_logging", {})
        assert logs == ["Tool execution started", "Tool processing data", "Tool execution completed"]
        await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert seen == [0, 50, 100]
        failure = await client.call_tool("test_error_handling", {})
        assert failure.is_error
        # Only a 2025-11-25 client over HTTP got a priming event, so only it can resume a closed stream.
        resumed = isinstance(target, str) and mode == "legacy"
        how = "after closing the stream" if resumed else "on the original stream"
        assert _text(await client.call_tool("test_reconnection", {})).endswith(f"({how}).")

        read = await client.read_resource("test://template/123/data")
        contents = read.contents[0]
        assert isinstance(contents, types.TextResourceContents)
        assert json.loads(contents.text)["id"] == "123"
        prompt = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        assert [message.content.type for message in prompt.messages] == ["text"]
        ref = types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments")
        completion = await client.complete(ref, {"name": "arg1", "value": "te"})
        assert completion.completion.values == ["test", "testValue1"]
