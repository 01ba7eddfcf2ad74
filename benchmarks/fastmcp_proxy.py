"""FastMCP's proxy, run the way its documentation shows: ``create_proxy(target).run()``.

Runs in the fastmcp virtual environment (see peers.py), never in the guard's::

    python fastmcp_proxy.py stdio COMMAND [ARG...]   # stdio in front of a stdio server
    python fastmcp_proxy.py http PORT URL            # streamable HTTP in front of an HTTP server

With a stdio target, FastMCP keeps the child and its session alive between
requests (``keep_alive``); with a URL target it opens a new upstream session per
request, which is its documented default for remote servers.
"""

from __future__ import annotations

import sys

from fastmcp.client.transports import StdioTransport  # type: ignore[import-not-found]
from fastmcp.server import create_proxy  # type: ignore[import-not-found]


def main(argv: list[str]) -> None:
    """Serve the proxy until the client goes away."""
    mode, *rest = argv
    if mode == "stdio":
        create_proxy(StdioTransport(rest[0], rest[1:])).run(transport="stdio", show_banner=False)
    elif mode == "http":
        port, url = rest
        create_proxy(url).run(transport="http", host="127.0.0.1", port=int(port), show_banner=False)
    else:
        raise SystemExit(f"unknown mode {mode!r}: use stdio or http")


if __name__ == "__main__":
    main(sys.argv[1:])
