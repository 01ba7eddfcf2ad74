"""One agent process that starts a new MCP server for every tool call, as langchain-mcp-adapters does by default.

Run as ``python agent_driver.py COMMAND [ARG...]``. Reads one JSON object per line on stdin,
``{"tool": NAME, "arguments": {...}}``; for each, starts COMMAND as its own child with the
official SDK's stdio client (in its own working directory and environment), calls the tool
once, closes the session, and prints one JSON line: ``{"is_error": ..., "texts": [...],
"meta": {...}}``. The servers' stderr goes to this process's stderr. Exits at EOF.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types

CALL_LIMIT = 30.0
"""Seconds one call may take, server start included."""


async def call_once(command: list[str], tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Starts the server, calls one tool, stops the server; the result as JSON."""
    parameters = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ), cwd=os.getcwd())
    with anyio.fail_after(CALL_LIMIT):
        async with (
            stdio_client(parameters, errlog=sys.stderr) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            await session.initialize()
            result = await session.call_tool(tool, arguments)
    return {
        "is_error": bool(result.is_error),
        "texts": [item.text for item in result.content if isinstance(item, types.TextContent)],
        "meta": result.meta or {},
    }


async def main() -> None:
    """Answers each request line with one result line until stdin closes."""
    command = sys.argv[1:]
    if not command:
        sys.exit("usage: agent_driver.py COMMAND [ARG...]")
    stdin = anyio.wrap_file(sys.stdin)
    async for line in stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answer = await call_once(command, request["tool"], request.get("arguments") or {})
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    anyio.run(main)
