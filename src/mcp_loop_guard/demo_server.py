"""A tiny MCP server shipped for ``mcp-loop-guard demo``: a docs search, a file reader and a job queue.

Run it alone with ``python -m mcp_loop_guard.demo_server``; it speaks MCP on stdio.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

_FILES = {
    "README.md": "# shop\nRun `make deploy` to ship.",
    "Makefile": "deploy:\n\t./deploy.sh --env prod",
}
_DOCS = {
    "deploy": "Deployments are queued; poll job_status until the job is done.",
    "rollback": "Use `make rollback` to restore the previous release.",
}

_TOOLS = [
    types.Tool(
        name="search_docs",
        description="Search the project documentation.",
        input_schema={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    ),
    types.Tool(
        name="read_file",
        description="Read a file of the project.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    ),
    types.Tool(
        name="job_status",
        description="Status of a queued job.",
        input_schema={"type": "object", "properties": {"job": {"type": "string"}}, "required": ["job"]},
    ),
]


class _State:
    def __init__(self) -> None:
        self.build_polls = 0


async def _list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_TOOLS)


def _make_call_tool(state: _State) -> Any:
    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "search_docs":
            text = _DOCS.get(str(args.get("query")), "No match.")
        elif params.name == "read_file":
            text = _FILES.get(str(args.get("path")), "No such file.")
        elif params.name == "job_status" and args.get("job") == "build":
            state.build_polls += 1
            progress = min(100, state.build_polls * 25)
            text = f"build: {'done' if progress == 100 else 'running'} ({progress}%)"
        elif params.name == "job_status":
            # The stuck case: this job never leaves the queue.
            text = f"{args.get('job')}: queued (position 3)"
        else:
            return types.CallToolResult(content=[types.TextContent(text=f"unknown tool {params.name}")], is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=text)])

    return call_tool


def build_server() -> Server[Any]:
    """The demo server, for running in process or over stdio."""
    return Server(
        "mcp-loop-guard-demo", version="1.0.0", on_list_tools=_list_tools, on_call_tool=_make_call_tool(_State())
    )


async def _main() -> None:
    server = build_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(_main)
