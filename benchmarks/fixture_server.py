"""A tiny MCP server over stdio for the benchmarks: an echo and a large result.

Run as ``python benchmarks/fixture_server.py``, or with ``--http PORT [--stateless]`` over
streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (``--stateless``: a server that opens no
sessions, for the stateless HTTP guard). Tools:

- ``echo{text}``: returns the text (a second small-call target besides server-everything).
- ``blob{size, seed}``: returns ``size`` characters of text that start with the seed, so
  consecutive calls differ and the guard forwards every one of them.

It uses the SDK's own stdio server: it stands for an ordinary upstream, not for a
fast one, and is the same upstream for every target it is measured behind.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

_TOOLS = [
    types.Tool(
        name="echo",
        description="Returns its text argument.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(
        name="blob",
        description="Returns `size` characters of text that start with `seed`.",
        input_schema={
            "type": "object",
            "properties": {"size": {"type": "integer"}, "seed": {"type": "integer"}},
            "required": ["size"],
        },
    ),
]

_filler: dict[int, str] = {}


def blob_text(size: int, seed: int) -> str:
    """``size`` characters: the seed, then filler (cached per size, so a call costs one copy)."""
    head = f"{seed}:"
    filler = _filler.get(size)
    if filler is None:
        filler = _filler[size] = "x" * size
    return head + filler[: max(0, size - len(head))]


async def _list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_TOOLS)


async def _call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "echo":
        text = str(arguments.get("text", ""))
    elif params.name == "blob":
        text = blob_text(int(arguments["size"]), int(arguments.get("seed", 0)))
    else:
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    """Serve until stdin closes (over HTTP: until interrupted)."""
    server: Server[Any] = Server(
        "benchmark-fixture", version="1.0.0", on_list_tools=_list_tools, on_call_tool=_call_tool
    )
    if "--http" in sys.argv:
        import uvicorn  # only the HTTP mode needs it

        port = int(sys.argv[sys.argv.index("--http") + 1])
        app = server.streamable_http_app(host="127.0.0.1", stateless_http="--stateless" in sys.argv)
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).serve()
        return
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
