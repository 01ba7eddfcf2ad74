"""pydantic-ai's side of ``test_pydantic_ai.py``: a scripted FunctionModel and the agent that runs it.

Kept apart so that only the test that runs it imports pydantic-ai and FastMCP (about two seconds
of CPU), not every test worker while it collects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

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


async def run_looping_agent(
    command: list[str], env: dict[str, str], stderr: Path, *, tool: str, calls: int, prompt: str
) -> tuple[str, list[Seen]]:
    """pydantic-ai's agent over an MCP toolset on stdio (``command``), its model calling ``tool`` ``calls`` times.

    Its final output and what its model saw of each call.
    """
    transport = StdioTransport(command=command[0], args=command[1:], env=env, keep_alive=False, log_file=stderr)
    # Refusals become failed results the model sees; the closed connection becomes retries, so allow plenty.
    toolset: MCPToolset[None] = MCPToolset(transport, tool_error_behavior="failed", max_retries=50)
    model = LoopingModel(tool, calls, [])
    agent = Agent(FunctionModel(model), toolsets=[toolset])
    try:
        result = await agent.run(prompt)
    finally:
        await transport.close()
    return result.output, model.seen
