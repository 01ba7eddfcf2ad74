"""An HTTP guard whose port another process holds: one line naming the address, exit 2, no upstream started.

The guard binds its address before it starts anything: an upstream given with ``--`` (which
it otherwise starts at once, while it loads) or those of a config file.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.harness import fixture_command, guard_argv, server_environment

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another socket listens on for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("how", ["command", "config", "environment"])
async def test_a_port_in_use_stops_the_guard_before_any_upstream_starts(
    how: str, taken_port: int, tmp_path: Path, process_marker: str
) -> None:
    """`--port` (or LOOP_GUARD_PORT) taken: one stderr line naming 127.0.0.1:PORT, exit 2, the upstream never run."""
    starts = tmp_path / "starts.log"
    upstream = fixture_command("early_exit_server")
    env = {"EARLY_EXIT_SERVER_STARTS": str(starts)}
    if how == "config":
        config = tmp_path / "mcp.json"
        entry = {"command": upstream[0], "args": upstream[1:], "env": env}
        config.write_text(json.dumps({"mcpServers": {"a": entry}}), encoding="utf-8")
        served = ["--config", str(config)]
    else:
        served = ["--", *upstream]
    if how == "environment":
        env["LOOP_GUARD_PORT"] = str(taken_port)
        where = []
    else:
        where = ["--port", str(taken_port)]
    argv = [*guard_argv(), "--transport", "http", *where, *served]
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, env=server_environment(process_marker, env), check=False)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().splitlines() == [
        f"mcp-loop-guard: error: cannot listen on 127.0.0.1:{taken_port}: address already in use "
        "(another process listens there: stop it or choose another --port)"
    ]
    assert not starts.exists()
