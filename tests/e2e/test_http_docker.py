"""The Docker image's command, run here exactly as the image runs it, since no Docker engine is available.

The Dockerfile's ENTRYPOINT and CMD are read from the file itself, so this test follows
any change to them. Only what must differ outside a container is replaced: the
``/config/mcp.json`` path (a copy of ``configs/mcp.json`` whose ``everything`` URL points
at a server-everything started by the test) and the port (a free one).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import anyio
import pytest

from tests.dockerfile import (
    DOCKERFILE,
    IMAGE_CONFIG,
    IMAGE_PORT,
    healthcheck_command,
    image_command,
    image_environment,
    localized,
)
from tests.harness import BIN_DIR, REPO_ROOT, texts
from tests.http_harness import Rig, http_get, open_http_session, run_server, tool_names

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


def local_config(directory: Path, everything_url: str) -> Path:
    """configs/mcp.json, copied with its everything server at the given URL."""
    document = json.loads((REPO_ROOT / "configs" / "mcp.json").read_text(encoding="utf-8"))
    servers: Mapping[str, dict[str, str]] = document["mcpServers"]
    servers["everything"]["url"] = everything_url
    target = directory / "config" / "mcp.json"
    target.parent.mkdir()
    target.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return target


def test_dockerfile_command_shape() -> None:
    """The image runs tini as PID 1, then the guard over HTTP on 0.0.0.0:8080 from /config/mcp.json."""
    command = image_command(DOCKERFILE)
    assert command[:3] == ["tini", "--", "mcp-loop-guard"], command
    assert command[command.index("--transport") + 1] == "http"
    assert command[command.index("--host") + 1] == "0.0.0.0"  # noqa: S104 - what the image must listen on
    assert command[command.index("--port") + 1] == IMAGE_PORT
    assert command[command.index("--config") + 1] == IMAGE_CONFIG


async def test_image_command_serves(rig: Rig, tmp_path: Path) -> None:
    """The image's command serves /healthz, /readyz and tools/list, and its HEALTHCHECK passes.

    tini is left out when it is not installed on this machine (it only reaps and forwards
    signals); everything after it is run unchanged, with the guard found on PATH.
    """
    command = image_command(DOCKERFILE)
    env = image_environment(DOCKERFILE) | {"PATH": f"{BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}
    async with rig.everything_http() as everything:
        config = local_config(tmp_path, everything.mcp_url)
        async with run_server(
            lambda port: (localized(command, config, port), env), marker=rig.marker, stderr=rig.log("image")
        ) as guard:
            with anyio.fail_after(15):
                health = await http_get(guard.url("/healthz"))
                ready = await http_get(guard.url("/readyz"))
                async with open_http_session(guard.mcp_url) as client:
                    listed = tool_names(await client.session.list_tools())
                    now = await client.session.call_tool("time__get_current_time", {"timezone": "UTC"})
            check = [part.replace(f":{IMAGE_PORT}/", f":{guard.port}/") for part in healthcheck_command(DOCKERFILE)]
            if check[0] == "python":
                check[0] = str(BIN_DIR / "python")
            probe = await anyio.run_process(check, check=False, stderr=subprocess.STDOUT)

    assert health.status_code == 200, health.text
    assert ready.status_code == 200, ready.text
    assert set(ready.json()["upstreams"]) == {"time", "everything"}
    assert {"time__get_current_time", "everything__echo"} <= listed
    assert not now.is_error, texts(now)
    assert probe.returncode == 0, probe.stdout.decode(errors="replace")
