"""pydantic-ai looping through the guard: its MCP toolset over stdio, a scripted FunctionModel.

pydantic-ai (``pydantic-ai-slim[mcp]``, on FastMCP's client and this project's SDK) runs in
the test process and starts the guard as its child, as an application embedding it would.
It does not start a server again once the guard has closed the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.harness import MARKER, CountingUpstream, guard_command, server_environment

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

REAL_TEXT = "always the same"
"""What the counting server's ``constant`` tool returns."""
ABORT_NOTE = "closing this session"
"""Part of the refusal after which the guard closes the session."""
FINAL_TEXT = "I have what I need."


@dataclass(frozen=True)
class Seen:
    """One tool result as pydantic-ai handed it to the model."""

    outcome: str
    """``success``, ``failed`` (a tool error shown to the model) or ``retried`` (a protocol error)."""
    texts: tuple[str, ...]


@dataclass
class LoopingModel:
    """A FunctionModel script: the same tool call `calls` times, then a final answer; keeps what came back."""

    tool: str
    calls: int
    seen: list[Seen]

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        """Records the tool results of the last request and answers with the next scripted turn."""
        last = messages[-1]
        if isinstance(last, ModelRequest):
            for part in last.parts:
                if isinstance(part, ToolReturnPart):
                    content = part.content
                    texts = tuple(str(item) for item in content) if isinstance(content, list) else (str(content),)
                    self.seen.append(Seen(part.outcome, texts))
        made = sum(1 for message in messages if isinstance(message, ModelResponse))
        if made < self.calls:
            return ModelResponse(parts=[ToolCallPart(self.tool, {}, tool_call_id=f"call_{made + 1:03d}")])
        return ModelResponse(parts=[TextPart(FINAL_TEXT)])


async def test_twenty_identical_calls_through_pydantic_ai(
    counting: CountingUpstream, guard_env: dict[str, str], process_marker: str, tmp_path: Path
) -> None:
    """pydantic-ai's model sees warnings at calls 3-4, refusals from 5, errors after the abort; 4 calls go upstream."""
    command = guard_command(counting.command)
    stderr = tmp_path / "guard-stderr.log"
    transport = StdioTransport(
        command=command[0],
        args=command[1:],
        env=server_environment(process_marker, guard_env),
        keep_alive=False,
        log_file=stderr,
    )
    # Refusals become failed results the model sees; the closed connection becomes retries, so allow plenty.
    toolset: MCPToolset[None] = MCPToolset(transport, tool_error_behavior="failed", max_retries=50)
    model = LoopingModel("constant", 20, [])
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    try:
        result = await agent.run("Use the constant tool until you have what you need, then answer.")
    finally:
        await transport.close()
    shown = "\n".join(f"call {n}: {seen.outcome} {seen.texts}" for n, seen in enumerate(model.seen, 1))
    context = f"what the model saw:\n{shown}\n--- guard stderr ---\n{stderr.read_text(errors='replace')}"
    assert result.output == FINAL_TEXT, context
    assert len(model.seen) == 20, context
    assert model.seen[:2] == [Seen("success", (REAL_TEXT,))] * 2, context
    for warned in model.seen[2:4]:
        assert warned.outcome == "success", context
        assert warned.texts[0] == REAL_TEXT, context
        assert [text.startswith(MARKER) for text in warned.texts[1:]] == [True], context
    for refused in model.seen[4:7]:
        assert refused.outcome == "failed", context
        assert refused.texts[0].startswith(MARKER), context
    assert ABORT_NOTE in model.seen[6].texts[0], context
    assert all(seen.outcome != "success" and REAL_TEXT not in seen.texts for seen in model.seen[7:]), context
    assert len(counting.calls("constant")) == 4, context
