"""The agent behind a session: its key, its state in the store, and the judge of its calls."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc
import anyio.to_thread

from mcp_loop_guard.config import ServerSpec, StdioServer
from mcp_loop_guard.core.detector import take_over
from mcp_loop_guard.core.state import State
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.private_files import UnsafePathError
from mcp_loop_guard.proxy.relay.judge import CallObserver, Judge
from mcp_loop_guard.store import (
    AgentLoop,
    MemoryStore,
    Owner,
    Store,
    StoreError,
    StoreHealth,
    StoreSetupError,
    open_store,
)
from mcp_loop_guard.store import describe_store as describe
from mcp_loop_guard.store.keys import stdio_agent_base

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.relay.events import EventLog

logger = logging.getLogger(__name__)

LEASE = 30.0
"""Seconds an owner's lease runs (checked only by guards on other hosts); renewed at a third of it."""


@asynccontextmanager
async def opened_store(plan: Plan) -> AsyncIterator[tuple[Store, StoreHealth]]:
    """The configured store, opened in a worker thread (a file may be busy).

    A store that cannot be opened now (a file that cannot be created) is replaced by memory,
    with one line naming the store asked for.

    Raises:
        StoreSetupError: the store cannot be had at all (a missing package, a path another user
            could write): a start-up error.
    """
    spec = plan.settings.state
    try:
        store: Store = await anyio.to_thread.run_sync(
            partial(open_store, spec, timeout=plan.settings.state_timeout_seconds)
        )
        health = StoreHealth(store.name)
        logger.debug("loop state is kept in %s", describe(spec))
    except StoreSetupError:
        raise
    except StoreError as error:
        store = MemoryStore()
        health = StoreHealth("memory")
        logger.warning(
            "the state store %s cannot be opened (%s); loop state is kept in memory only (it ends with this process)",
            describe(spec),
            error,
        )
    try:
        yield store, health
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


@asynccontextmanager
async def opened_events(plan: Plan) -> AsyncIterator[EventLog | None]:
    """The event log, when one is configured (LOOP_GUARD_EVENT_LOG).

    Raises:
        UnsafePathError: another user could write or redirect it: a start-up error.
    """
    path = plan.settings.event_log
    if path is None:
        yield None
        return
    from mcp_loop_guard.proxy.relay.events import EventLog  # noqa: PLC0415 - loaded only when there is a log to write

    try:
        events = EventLog(Path(path).expanduser(), contents=plan.settings.log_contents)  # noqa: ASYNC240 - once, at start
    except UnsafePathError as error:
        raise UnsafePathError(f"the event log (LOOP_GUARD_EVENT_LOG) cannot be used: {error}") from error
    except OSError as error:
        logger.error("cannot open the event log %s: %s; calls are not recorded", path, error)
        yield None
        return
    try:
        yield events
    finally:
        events.close()


def judge_for(
    plan: Plan,
    agent: AgentLoop,
    *,
    label: str,
    events: EventLog | None,
    observe: CallObserver | None = None,
) -> Judge:
    """The judge of one agent's calls."""
    return Judge(
        agent,
        plan.policies,
        label=label,
        events=events,
        observe=observe,
        log_contents=plan.settings.log_contents,
    )


def agent_loop(plan: Plan, store: Store, health: StoreHealth, key: str, state: State | None = None) -> AgentLoop:
    """An agent's state handle, with the plan's expiry and failure rules."""
    return AgentLoop(
        store,
        key,
        plan.policies,
        ttl=plan.settings.session_idle_seconds,
        health=health,
        fail_closed=plan.settings.state_fail == "closed",
        state=state,
    )


@asynccontextmanager
async def stdio_agent(plan: Plan, spec: ServerSpec, store: Store, health: StoreHealth) -> AsyncIterator[AgentLoop]:
    """The agent of a stdio guard: the client process that started it, with the server it runs.

    The key is claimed from the store: a guard restarted by the same client continues the
    state of the one that exited (its calls in flight are dropped), while two guards alive at
    once under one client get keys of their own. The state is written back at exit and the
    key released, so the next guard takes over at once.
    """
    if isinstance(spec, StdioServer):
        base = stdio_agent_base(spec.name, [spec.command, *spec.args], spec.cwd, plan.settings.agent_key)
    else:
        base = stdio_agent_base(spec.name, [spec.url], None, plan.settings.agent_key)
    owner = Owner.this_process(lease=time.time() + LEASE)
    ttl = plan.settings.session_idle_seconds
    now = time.time()
    key, state, took_over = base, None, False
    try:
        with anyio.fail_after(plan.settings.state_timeout_seconds * 4):
            key, took_over = await store.claim(base, owner, ttl)
            state = await store.load(key)
    except (StoreError, TimeoutError) as error:
        health.failed(StoreError(str(error) or "timed out"), now)
    if state is not None and took_over:
        take_over(state, plan.policy, now)
    if state is not None and state.blocks:
        logger.info("continuing agent %s: %d refusal(s) in its current request window", key, state.blocks)
    agent = agent_loop(plan, store, health, key, state)
    try:
        async with anyio.create_task_group() as tg:
            if store.shared:
                tg.start_soon(_renew, store, key, owner)
            yield agent
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(plan.settings.state_timeout_seconds * 4):
            await agent.flush(time.time())
            try:
                await store.release(key, owner)
            except StoreError as error:
                logger.debug("could not release agent key: %s", error)


async def _renew(store: Store, key: str, owner: Owner) -> None:
    while True:
        await anyio.sleep(LEASE / 3)
        try:
            await store.renew(key, Owner(owner.host, owner.pid, owner.started, time.time() + LEASE))
        except StoreError as error:
            logger.debug("could not renew the agent key's lease: %s", error)


def sighup_reload(
    plan: Plan, apply_servers: Callable[[Sequence[ServerSpec]], Awaitable[str | None]], tg: anyio.abc.TaskGroup
) -> Callable[[str], None] | None:
    """What SIGHUP does in a guard given a config file: reload it; None without one.

    The reloader (and with it the config file's reader and pydantic) loads only in such a guard.
    """
    if plan.config.path is None and not plan.settings.watch_config:
        return None
    from mcp_loop_guard.reload import on_sighup, reloader_for  # noqa: PLC0415 - see above

    return on_sighup(reloader_for(plan, apply_servers, tg), tg)
