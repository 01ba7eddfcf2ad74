"""In-process fixture servers (SDK ``MCPServer``) that count what reaches them."""

from __future__ import annotations

from collections import Counter

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations


class Tracker:
    """An SDK server whose tools record every call that reaches them."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.ticks = 0
        self.server = MCPServer("tracker", instructions="Counts calls.")
        server = self.server

        @server.tool(description="Echoes its text.")
        def echo(text: str) -> str:
            self.calls["echo"] += 1
            return text

        @server.tool(description="A status that changes at every call.")
        def tick() -> str:
            self.calls["tick"] += 1
            self.ticks += 1
            return f"tick {self.ticks}"

        @server.tool(description="Always fails the same way.")
        def broken(path: str) -> str:
            self.calls["broken"] += 1
            raise ToolError("disk full")

        @server.tool(
            description="Deletes a file.",
            annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
        )
        def delete(path: str) -> str:
            self.calls["delete"] += 1
            return f"deleted {path}"

        @server.tool(description="Reports progress three times, then answers.")
        async def work(ctx: Context) -> str:
            self.calls["work"] += 1
            for step in (1, 2, 3):
                await ctx.report_progress(step, 3, f"step {step}")
            return "worked"
