"""A Redis store asked for where the ``redis`` package is missing: a start-up error naming the extra, never memory.

A fleet of guards that each fell back to memory would share nothing while looking healthy.
The guard runs in a real interpreter in which ``import redis`` fails (a package of that name,
first on its path, raises ImportError as a missing one does).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from tests.harness import CountingUpstream
from tests.http_harness import free_port
from tests.store.test_private_files import assert_one_line, refused_at_start

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

EXTRA = "pip install 'mcp-loop-guard[redis]'"
URL = "redis://:hunter2@127.0.0.1:1/0"
"""A Redis URL with a password, which no message may show."""
SHOWN = "redis (redis://127.0.0.1:1/0)"
"""How messages name that store."""


@pytest.fixture
def without_redis(tmp_path: Path) -> dict[str, str]:
    """An environment whose interpreter cannot import redis."""
    shim = tmp_path / "no-redis" / "redis"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("No module named \'redis\'", name="redis")\n')
    path = os.pathsep.join([str(shim.parent), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "LOOP_GUARD_STATE": URL}


async def test_the_shim_hides_the_redis_package(without_redis: dict[str, str]) -> None:
    """In that environment ``import redis`` fails, as where the package is not installed."""
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-c", "import redis"], env={**os.environ, **without_redis}, check=False
        )
    assert done.returncode == 1
    assert b"ImportError" in done.stderr


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_redis_store_without_the_package_is_a_start_up_error(
    counting: CountingUpstream, process_marker: str, without_redis: dict[str, str], transport: str
) -> None:
    """Exit 2 and one line naming the store asked for and the extra to install; no password, no traceback."""
    args = ["--transport", "http", "--port", str(free_port())] if transport == "http" else []
    code, stderr = await refused_at_start(counting, process_marker, without_redis, args)
    assert_one_line(code, stderr, SHOWN, EXTRA)
    assert "hunter2" not in stderr
    assert "memory" not in stderr, stderr


async def test_state_list_without_the_package_names_the_extra(without_redis: dict[str, str]) -> None:
    """``state list --state redis://...``: exit 2, one line naming the store and the extra."""
    with anyio.fail_after(30):
        done = await anyio.run_process(
            [sys.executable, "-m", "mcp_loop_guard", "state", "list", "--state", URL],
            env={**os.environ, **without_redis},
            check=False,
        )
    stderr = done.stderr.decode()
    assert_one_line(done.returncode, stderr, SHOWN, EXTRA)
    assert "hunter2" not in stderr
