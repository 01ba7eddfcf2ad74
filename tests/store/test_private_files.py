"""Files of other users: the state directory, the database, its live files and the event log are this user's alone.

Another user who can write where a guard keeps its files could plant a loop state (refusing
an agent from its first call), or a symbolic link that turns the guard's next write into one
to a file of the victim's. So a guard refuses, at start, with one line naming the path and
the problem (exit 2), a state directory or file that is another user's, that others may
write, or that is a link; it never follows a link to a live file, nor opens a FIFO as its
event log; and what it creates is 0700 (folders) and 0600 (files). A sticky shared directory
(``/tmp``) is fine above a folder of its own. The tests run as root, so "another user" is a
uid the files are given with chown.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store import SqliteStore
from mcp_loop_guard.store.live import LiveFiles
from tests.harness import Connector, CountingUpstream, action, guard_command, server_environment
from tests.http_harness import free_port
from tests.store.test_state_cli import state_command

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

OTHER_USER = 12345
"""The uid of "another user": files chowned to it belong to no one the guard runs as."""
VICTIM_TEXT = b"the victim's own private file, which no guard of theirs may overwrite\n" * 8
AGENT = "private"
"""The agent key of the guards (``LOOP_GUARD_AGENT_KEY``), so its live file's name is known."""


def mode(path: Path) -> int:
    """The permission bits of ``path`` (not following a link)."""
    return stat.S_IMODE(os.lstat(path).st_mode)


async def refused_at_start(
    counting: CountingUpstream, marker: str, env: dict[str, str], guard_args: Sequence[str] = ()
) -> tuple[int, str]:
    """Start a stdio guard (stdin at EOF at once); its exit status and stderr, within a bounded wait."""
    argv = guard_command(counting.command, guard_args)
    process = await anyio.open_process(
        argv, env=server_environment(marker, {**counting.env, **env}), stdin=subprocess.DEVNULL
    )
    try:
        with anyio.fail_after(30):
            assert process.stderr is not None
            chunks = [chunk async for chunk in process.stderr]
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()
    return code, b"".join(chunks).decode(errors="replace")


def assert_one_line(code: int, stderr: str, *parts: str) -> None:
    """Exit 2, one line of the guard's naming every part, no traceback."""
    lines = [line for line in stderr.splitlines() if line.startswith("mcp-loop-guard:")]
    assert code == 2, stderr
    assert len(lines) == 1, stderr
    assert all(part in lines[0] for part in parts), stderr
    assert "Traceback" not in stderr, stderr


def victim_file(tmp_path: Path) -> Path:
    """A file of the user's own, mode 0600, that a planted link points at."""
    victim = tmp_path / "victim-private.txt"
    victim.write_bytes(VICTIM_TEXT)
    victim.chmod(0o600)
    return victim


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_state_directory_of_another_user_is_refused_at_start(
    counting: CountingUpstream, process_marker: str, tmp_path: Path, transport: str
) -> None:
    """The folder holding the state file belongs to another user: exit 2, one line naming it, over stdio and HTTP."""
    directory = tmp_path / "theirs"
    directory.mkdir(mode=0o700)
    os.chown(directory, OTHER_USER, OTHER_USER)
    env = {"LOOP_GUARD_STATE": f"sqlite://{directory}/state.sqlite3"}
    args = ["--transport", "http", "--port", str(free_port())] if transport == "http" else []
    code, stderr = await refused_at_start(counting, process_marker, env, args)
    assert_one_line(code, stderr, str(directory), "another user", "uid 12345")


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o1777])
async def test_a_state_directory_others_may_write_is_refused_at_start(
    counting: CountingUpstream, process_marker: str, tmp_path: Path, bits: int
) -> None:
    """The folder holding the state file is writable by group or others (sticky or not): exit 2, one line.

    Its group is another user's: the user's own private group may write (some systems give every user one).
    """
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(bits)
    os.chown(directory, -1, OTHER_USER)
    env = {"LOOP_GUARD_STATE": f"sqlite://{directory}/state.sqlite3"}
    code, stderr = await refused_at_start(counting, process_marker, env)
    assert_one_line(code, stderr, str(directory), "writable by other users")
    assert not (directory / "state.sqlite3").exists(), "nothing is created in a folder others may write"


async def test_a_live_folder_planted_in_a_shared_directory_overwrites_nothing(
    counting: CountingUpstream, process_marker: str, tmp_path: Path
) -> None:
    """Another user made the live folder in a sticky shared directory, with a link to the victim's file: refused."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = LiveFiles(shared / "state.sqlite3-live")
    planted.directory.mkdir(mode=0o777)
    planted.directory.chmod(0o777)
    victim = victim_file(tmp_path)
    planted.path(f"agent:{AGENT}").symlink_to(victim)
    os.chown(planted.directory, OTHER_USER, OTHER_USER)
    env = {"LOOP_GUARD_STATE": f"sqlite://{shared}/state.sqlite3", "LOOP_GUARD_AGENT_KEY": AGENT}
    code, stderr = await refused_at_start(counting, process_marker, env)
    assert victim.read_bytes() == VICTIM_TEXT, "the guard wrote through the planted link"
    assert_one_line(code, stderr, str(shared), "writable by other users")


async def test_a_link_in_the_live_folder_is_never_followed(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """A link where the agent's live file goes: not followed (the state goes to the database), the file untouched."""
    directory = tmp_path / "state"
    live = LiveFiles(directory / "state.sqlite3-live")
    live.directory.mkdir(parents=True, mode=0o700)
    victim = victim_file(tmp_path)
    live.path(f"agent:{AGENT}").symlink_to(victim)
    env = {**counting.env, "LOOP_GUARD_STATE": f"sqlite://{directory}/state.sqlite3", "LOOP_GUARD_AGENT_KEY": AGENT}
    async with connect(counting.command, env=env) as conn:
        with anyio.fail_after(30):
            results = [action(await conn.session.call_tool("constant", {})) for _ in range(3)]
        log = conn.stderr_text()
    assert victim.read_bytes() == VICTIM_TEXT, "the guard wrote through the link"
    assert results == [None, None, "warn"], log
    assert "symbolic link" in log, log
    stored = SqliteStore(directory / "state.sqlite3")
    try:
        kept = await stored.load(f"agent:{AGENT}")
    finally:
        await stored.aclose()
    assert kept is not None, "the agent's state went to the database instead"


async def make_store(path: Path) -> None:
    """A state file as a guard leaves it (its folder 0700, the file 0600)."""
    store = SqliteStore(path)
    await store.save("earlier", State(), ttl=600)
    await store.aclose()


@pytest.mark.parametrize("plant", ["link", "owner", "mode", "wal"])
async def test_a_state_file_another_user_could_write_or_redirect_is_refused(
    counting: CountingUpstream, process_marker: str, tmp_path: Path, plant: str
) -> None:
    """The file is a link, another user's, writable by others, or has another user's WAL beside it: exit 2, one line."""
    directory = tmp_path / "state"
    path = directory / "state.sqlite3"
    victim = victim_file(tmp_path)
    directory.mkdir(mode=0o700)
    if plant == "link":
        path.symlink_to(victim)
        named = (str(path), "symbolic link")
    else:
        await make_store(path)
        if plant == "owner":
            os.chown(path, OTHER_USER, OTHER_USER)
            named = (str(path), "another user")
        elif plant == "mode":
            path.chmod(0o666)
            named = (str(path), "writable by other users")
        else:
            wal = directory / "state.sqlite3-wal"
            wal.write_bytes(b"")
            os.chown(wal, OTHER_USER, OTHER_USER)
            named = (str(wal), "another user")
    env = {"LOOP_GUARD_STATE": f"sqlite://{path}"}
    code, stderr = await refused_at_start(counting, process_marker, env)
    assert victim.read_bytes() == VICTIM_TEXT
    assert_one_line(code, stderr, *named)
    code, _, err = await state_command("list", "--state", f"sqlite://{path}")
    assert (code, err.count("mcp-loop-guard:")) == (2, 1), err
    assert named[0] in err, err


async def test_a_private_folder_under_a_sticky_shared_one_is_used_and_kept_private(
    connect: Connector, counting: CountingUpstream, tmp_path: Path
) -> None:
    """State in a folder of its own under a sticky ``/tmp``-like one: used; folders 0700, files 0600."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    directory = shared / "mine" / "state"
    events = shared / "events.jsonl"
    env = {
        **counting.env,
        "LOOP_GUARD_STATE": f"sqlite://{directory}/state.sqlite3",
        "LOOP_GUARD_AGENT_KEY": AGENT,
        "LOOP_GUARD_EVENT_LOG": str(events),
    }
    async with connect(counting.command, env=env) as conn:
        with anyio.fail_after(30):
            results = [action(await conn.session.call_tool("constant", {})) for _ in range(3)]
        live = LiveFiles(directory / "state.sqlite3-live")
        made = [shared / "mine", directory, live.directory]
        files = [directory / "state.sqlite3", live.path(f"agent:{AGENT}"), events]
        modes = {path.name: mode(path) for path in [*made, *files]}
    assert results == [None, None, "warn"]
    assert modes == {path.name: 0o700 for path in made} | {path.name: 0o600 for path in files}


@pytest.mark.parametrize("plant", ["link", "fifo", "owner"])
async def test_an_event_log_another_user_could_redirect_is_refused(
    counting: CountingUpstream, process_marker: str, tmp_path: Path, plant: str
) -> None:
    """The event log is a link, a FIFO (no hang waiting for a reader) or another user's file: exit 2, one line."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    events = shared / "events.jsonl"
    victim = victim_file(tmp_path)
    if plant == "link":
        events.symlink_to(victim)
        problem = "symbolic link"
    elif plant == "fifo":
        os.mkfifo(events, 0o666)
        problem = "not a regular file"
    else:
        events.write_bytes(b"")
        os.chown(events, OTHER_USER, OTHER_USER)
        problem = "another user"
    env = {"LOOP_GUARD_EVENT_LOG": str(events)}
    code, stderr = await refused_at_start(counting, process_marker, env)
    assert victim.read_bytes() == VICTIM_TEXT
    assert_one_line(code, stderr, "event log", str(events), problem)
