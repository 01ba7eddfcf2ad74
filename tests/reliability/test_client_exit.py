"""How clients really stop a stdio server: two signals 100 ms apart, or SIGKILL. Nothing of the upstream may be left.

Claude Code sends SIGINT, then SIGTERM 100 ms later; other clients send SIGKILL. The upstream
here is started the way ``npx`` starts a server: a process that forks a grandchild (one that
ignores its stdin), and, in the stubborn case, both ignore stdin's end and SIGTERM. After the
stop, no process of the upstream's process group may be left, the group watch included.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import anyio
import psutil
import pytest

from tests.harness import describe, eventually, fixture_command
from tests.reliability.wire import RawConnector, RawGuard

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

UPSTREAMS = {
    "npx-like": fixture_command("counting_server", "--spawn-grandchild"),
    "stubborn": fixture_command("hanging_server", "--stubborn", "--spawn-grandchild"),
}
"""A server that forks a grandchild, and one (with its grandchild) that ignores stdin EOF and SIGTERM."""


def group_members(pgid: int) -> list[psutil.Process]:
    """Every live process of a process group (zombies are dead)."""
    found = []
    for process in psutil.process_iter():
        with suppress(psutil.Error, ProcessLookupError, PermissionError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


@contextmanager
def killed_at_the_end(pgid: int) -> Iterator[None]:
    """Whatever the test finds, the group is gone afterwards."""
    try:
        yield
    finally:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


async def upstream_group(guard: RawGuard) -> tuple[int, list[psutil.Process]]:
    """The upstream's process group once it runs with its grandchild, and its members then."""
    with anyio.fail_after(10):
        await eventually(lambda: len(guard.family()) == 3)
    pgid = guard.upstream().pid
    assert os.getpgid(pgid) == pgid, "the upstream leads a process group of its own"
    return pgid, group_members(pgid)


async def wait_group_gone(pgid: int, within: float) -> list[psutil.Process]:
    """Waits up to ``within`` seconds for the group to be empty; returns who is left."""
    with anyio.move_on_after(within):
        await eventually(lambda: not group_members(pgid))
    return group_members(pgid)


@pytest.mark.parametrize("gap", [0.1, 0.0], ids=["100ms", "at once"])
@pytest.mark.parametrize("upstream", list(UPSTREAMS))
async def test_sigint_then_sigterm_100ms_later_leaves_nothing(
    raw_guard: RawConnector, upstream: str, gap: float
) -> None:
    """Claude Code's stop: the guard survives the second signal, exits 130 itself, and the whole group is gone.

    The second signal may come while the guard is exiting (at once), or after it is gone (a
    guard that stopped within the client's 100 ms): neither kills it with SIGTERM.
    """
    async with raw_guard(UPSTREAMS[upstream]) as guard:
        pgid, before = await upstream_group(guard)
        with killed_at_the_end(pgid):
            guard.signal(signal.SIGINT)
            await anyio.sleep(gap)  # the client's own gap between its two signals: the point of the test
            with suppress(ProcessLookupError):  # the guard has exited already, as a client finds it
                guard.signal(signal.SIGTERM)
            status = await guard.wait_exit(within=15)
            left = await wait_group_gone(pgid, within=10)

    assert left == [], f"left running: {describe(left)} (the group was: {describe(before)})"
    # Sent at once, both signals are pending together: the guard exits by the one it took first.
    exits = [128 + signal.SIGINT] if gap else [128 + signal.SIGINT, 128 + signal.SIGTERM]
    assert status in exits, f"the guard did not exit by itself: {status}\n{guard.stderr_text()}"


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
async def test_a_sigkilled_guard_takes_its_upstream_group_down(raw_guard: RawConnector, upstream: str) -> None:
    """SIGKILL cannot be handled: the upstream, its grandchild and the group watch end anyway, within a grace."""
    async with raw_guard(UPSTREAMS[upstream]) as guard:
        pgid, before = await upstream_group(guard)
        with killed_at_the_end(pgid):
            guard.signal(signal.SIGKILL)
            status = await guard.wait_exit(within=5)
            # The group watch gives SIGTERM a grace of 2 s before SIGKILL.
            left = await wait_group_gone(pgid, within=10)

    assert status == -signal.SIGKILL
    assert left == [], f"left running: {describe(left)} (the group was: {describe(before)})"


async def test_the_group_watch_is_no_child_of_the_server_and_carries_no_environment(raw_guard: RawConnector) -> None:
    """The server's own children are its own: the watch is in its group but is not its child, nor the guard's."""
    async with raw_guard(UPSTREAMS["npx-like"]) as guard:
        pgid, members = await upstream_group(guard)
        family = {process.pid for process in guard.family()}
        watches = [(p.ppid(), p.cmdline()[0], p.environ()) for p in members if p.pid not in family]

    assert len(watches) == 1, describe(members)
    ((parent, name, environment),) = watches
    assert parent != pgid
    assert name == "mcp-loop-guard-group-watch"
    assert set(environment) == {"PATH"}, environment


async def test_two_signals_while_the_guard_starts_leave_nothing_and_no_traceback(raw_guard: RawConnector) -> None:
    """SIGINT then SIGTERM as soon as the upstream runs, while the guard is still loading: 130, no traceback."""
    async with raw_guard(UPSTREAMS["stubborn"], initialize=False) as guard:
        with anyio.fail_after(10):
            await eventually(lambda: len(guard.family()) >= 2)  # the upstream starts before the guard has loaded
        pgid = guard.upstream().pid
        with killed_at_the_end(pgid):
            guard.signal(signal.SIGINT)
            await anyio.sleep(0.1)  # the client's own gap between its two signals: the point of the test
            with suppress(ProcessLookupError):  # gone already: a start-up ends fast
                guard.signal(signal.SIGTERM)
            status = await guard.wait_exit(within=15)
            left = await wait_group_gone(pgid, within=10)

    assert left == [], f"left running: {describe(left)}"
    assert "Traceback" not in guard.stderr_text(), guard.stderr_text()
    assert status == 128 + signal.SIGINT, f"the guard did not exit by itself: {status}\n{guard.stderr_text()}"
