"""Which front serves an HTTP guard: every combination of transport, ``--stateless`` and upstreams has one row.

The rows are ARCHITECTURE.md's path table; a plan goes to the first row that serves it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mcp_loop_guard.config import GuardConfig, HttpServer, ServerSpec, StdioServer
from mcp_loop_guard.plan import plan
from mcp_loop_guard.proxy.downstream.http.fronts import TOPOLOGIES, topology
from mcp_loop_guard.settings import FileSettings, Settings

ARCHITECTURE = Path(__file__).resolve().parents[2] / "ARCHITECTURE.md"

STDIO = StdioServer("local", "server")
HTTP = HttpServer("remote", "http://127.0.0.1:9/mcp")
SSE = HttpServer("legacy", "http://127.0.0.1:9/sse", transport="sse")
HTTP_2 = HttpServer("other", "http://127.0.0.1:8/mcp")


def _row(transport: str, stateless: bool, *servers: ServerSpec, child_per_session: bool = False) -> str:
    config = GuardConfig(None, servers, FileSettings({}))
    settings = Settings(transport=transport, stateless=stateless, child_per_session=child_per_session)
    return topology(plan(config, settings)).row.split(":")[0]


@pytest.mark.parametrize(
    ("transport", "stateless", "servers", "row"),
    [
        ("http", False, (HTTP,), "5"),
        ("http", True, (HTTP,), "5"),
        ("sse", False, (HTTP,), "7"),
        ("sse", True, (HTTP,), "7"),
        ("http", False, (STDIO,), "6"),
        ("http", True, (STDIO,), "6"),
        ("sse", False, (STDIO,), "6"),
        ("http", False, (SSE,), "7"),
        ("sse", False, (SSE,), "7"),
        ("http", True, (SSE,), "7"),
        ("http", False, (STDIO, HTTP), "8"),
        ("sse", False, (HTTP, HTTP_2), "8"),
        ("sse", True, (STDIO, SSE), "8"),
        ("http", True, (STDIO, HTTP), "8"),
        ("http", True, (HTTP, HTTP_2), "8"),
    ],
)
def test_each_plan_is_served_by_its_row(
    transport: str, stateless: bool, servers: tuple[ServerSpec, ...], row: str
) -> None:
    """One HTTP server relayed, one stdio server shared, one remote server channeled, several routed."""
    assert _row(transport, stateless, *servers) == row


@pytest.mark.parametrize(
    ("transport", "stateless", "servers", "row"),
    [
        ("http", False, (STDIO,), "7"),
        ("sse", False, (STDIO,), "7"),
        ("http", True, (STDIO,), "7"),
        ("http", False, (HTTP,), "5"),
        ("http", False, (STDIO, HTTP), "8"),
    ],
)
def test_a_child_per_session_makes_one_stdio_server_a_channeled_one(
    transport: str, stateless: bool, servers: tuple[ServerSpec, ...], row: str
) -> None:
    """--child-per-session: one stdio server is channeled (a child per session), as a remote server would be."""
    assert _row(transport, stateless, *servers, child_per_session=True) == row


def test_every_row_is_in_the_path_table() -> None:
    """The table the code picks from and the one ARCHITECTURE.md shows name the same rows."""
    shown = set(re.findall(r"^\| (\w+) \|", ARCHITECTURE.read_text(encoding="utf-8"), flags=re.MULTILINE))
    assert {row.row.split(":")[0] for row in TOPOLOGIES} <= shown
