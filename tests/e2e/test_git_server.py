"""The canonical real loop: an agent polling mcp-server-git's git_status on a tree that does not change."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.harness import MARKER, Connector, texts, verdict

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


async def test_git_status_loop_and_the_way_out(connect: Connector, git_server: list[str], git_repo: Path) -> None:
    """git_status on an unchanged tree is refused at the 5th call; after a change, git_status passes and shows it."""
    repo = {"repo_path": str(git_repo)}
    async with connect([*git_server, "--repository", str(git_repo)]) as conn:
        with anyio.fail_after(20):
            looping = [await conn.session.call_tool("git_status", repo) for _ in range(5)]
            (git_repo / "notes.txt").write_text("something new\n", encoding="utf-8")
            added = await conn.session.call_tool("git_add", {**repo, "files": ["notes.txt"]})
            after = await conn.session.call_tool("git_status", repo)

    actions = [None if (found := verdict(result)) is None else found["action"] for result in looping]
    assert actions == [None, None, "warn", "warn", "block"]
    assert "nothing to commit" in texts(looping[0])[0]
    assert looping[4].is_error
    assert texts(looping[4])[0].startswith(MARKER)

    assert not added.is_error, texts(added)
    assert verdict(added) is None
    assert not after.is_error, texts(after)
    assert verdict(after) is None
    status = texts(after)[0]
    assert "notes.txt" in status
    assert "Changes to be committed" in status
