"""The admin API of an HTTP guard: its own token, names and counts only, and a reset that unblocks an agent."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from urllib.parse import quote

import anyio
import httpx2
import pytest

from tests.harness import CountingUpstream
from tests.http_harness import (
    KEY_HEADER,
    Rig,
    ServerProcess,
    guard_http_argv,
    http_client,
    http_get,
    payload_for,
    raw_call,
    raw_session,
    run_server,
    serve_guard,
)
from tests.redis_harness import RedisServer

pytestmark = pytest.mark.anyio

ADMIN = "admin-secret-token"
CLIENT = "client-secret-token"
SECRET_ARGUMENT = "my-password-1234"  # noqa: S105
"""An argument value that must never show up in what the admin API returns."""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def admin_get(guard: ServerProcess, path: str, token: str = ADMIN) -> httpx2.Response:
    return await http_get(guard.url(path), bearer(token))


async def admin_delete(guard: ServerProcess, key: str, token: str = ADMIN) -> httpx2.Response:
    async with http_client(timeout=10) as client:
        return await client.delete(guard.url(f"/admin/agents/{quote(key, safe='')}"), headers=bearer(token))


async def loop_until_refused(guard: ServerProcess, key: str, calls: int) -> list[object]:
    """``calls`` identical echoes by one keyed agent; each answer's HTTP status, or its verdict action."""
    seen: list[object] = []
    for _ in range(calls):
        response = await raw_call(guard.mcp_url, "echo", {"text": SECRET_ARGUMENT}, {KEY_HEADER: key, **bearer(CLIENT)})
        if response.status_code != 200:
            seen.append(response.status_code)
            continue
        meta = (payload_for(response, 1)["result"].get("_meta") or {}).get("mcp-loop-guard/verdict")
        seen.append(meta["action"] if meta else None)
    return seen


async def test_the_admin_api_lists_agents_without_their_arguments_and_resets_one(
    rig: Rig, counting: CountingUpstream
) -> None:
    """An aborted keyed agent is listed with its counts; a reset lets it call again; tokens do not cross."""
    env = {
        **counting.env,
        "LOOP_GUARD_ADMIN_TOKEN": ADMIN,
        "LOOP_GUARD_AUTH_TOKEN": CLIENT,
        "LOOP_GUARD_BUDGETS": "*=100/3600",
        "LOOP_GUARD_STATE": "memory",
    }
    async with serve_guard(
        ["--stateless", "--", *counting.command], marker=rig.marker, stderr=rig.log("guard"), env=env
    ) as guard:
        with anyio.fail_after(30):
            looped = await loop_until_refused(guard, "agent-7", 8)
            listing = await admin_get(guard, "/admin/agents")
            one = await admin_get(guard, f"/admin/agents/{quote('key:default/agent-7', safe='')}")
            unknown = await admin_get(guard, "/admin/agents/no-such-key")
            without = await http_get(guard.url("/admin/agents"))
            with_client_token = await admin_get(guard, "/admin/agents", CLIENT)
            admin_on_mcp = await raw_call(guard.mcp_url, "echo", {"text": "x"}, {KEY_HEADER: "a", **bearer(ADMIN)})
            reset = await admin_delete(guard, "key:default/agent-7")
            after = await loop_until_refused(guard, "agent-7", 1)
            reset_unknown = await admin_delete(guard, "key:default/nobody")
    assert looped == [None, None, "warn", "warn", "block", "block", "abort", 429]
    assert listing.status_code == 200, listing.text
    assert SECRET_ARGUMENT not in listing.text
    agents = {agent["key"]: agent for agent in listing.json()["agents"]}
    agent = agents["key:default/agent-7"]
    assert agent["live"] is True
    assert agent["kind"] == "keyed"
    assert (agent["refusals"], agent["lastTool"], agent["lastVerdict"]) == (3, "echo", "abort:identical:echo")
    assert agent["budgets"][":*:3600s"]["used"] == 4  # the four forwarded calls, not the refused ones
    assert one.json()["key"] == "key:default/agent-7"
    assert unknown.status_code == 404
    assert without.status_code == 401
    assert with_client_token.status_code == 401
    assert admin_on_mcp.status_code == 401
    assert reset.status_code == 200, reset.text
    assert reset.json()["reset"] is True
    assert after == [None]  # served again, and its streak starts over
    assert reset_unknown.status_code == 404
    assert len(counting.calls("echo")) == 5


async def test_sessions_are_listed_and_no_admin_api_without_its_token(rig: Rig, counting: CountingUpstream) -> None:
    """A stateful session shows up as one; a guard without LOOP_GUARD_ADMIN_TOKEN serves no admin paths."""
    env = {**counting.env, "LOOP_GUARD_ADMIN_TOKEN": ADMIN, "LOOP_GUARD_STATE": "memory"}
    async with AsyncExitStack() as stack:
        guard = await stack.enter_async_context(
            serve_guard(["--", *counting.command], marker=rig.marker, stderr=rig.log("guard"), env=env)
        )
        plain = await stack.enter_async_context(
            serve_guard(["--", *counting.command], marker=rig.marker, stderr=rig.log("plain"), env=counting.env)
        )
        with anyio.fail_after(30):
            session = await raw_session(guard.mcp_url)
            await raw_call(guard.mcp_url, "echo", {"text": SECRET_ARGUMENT}, session)
            listing = await admin_get(guard, "/admin/agents")
            absent = await admin_get(plain, "/admin/agents")
    kinds = {agent["kind"] for agent in listing.json()["agents"] if agent.get("live")}
    assert kinds == {"session"}
    assert SECRET_ARGUMENT not in listing.text
    assert absent.status_code == 404


async def test_a_reset_on_one_replica_unblocks_the_agent_on_every_replica(
    rig: Rig, redis_server: RedisServer, counting: CountingUpstream
) -> None:
    """Shared state: the agent aborted through replica A is served by replica B after A's admin reset."""
    env = {**counting.env, "LOOP_GUARD_STATE": redis_server.url, "LOOP_GUARD_ADMIN_TOKEN": ADMIN}
    env |= {"LOOP_GUARD_AUTH_TOKEN": CLIENT}
    argv = ["--stateless", "--", *counting.command]
    async with AsyncExitStack() as stack:
        first, second = [
            await stack.enter_async_context(
                run_server(lambda port: (guard_http_argv(port, argv), env), marker=rig.marker, stderr=rig.log(f"g{n}"))
            )
            for n in range(2)
        ]
        with anyio.fail_after(30):
            looped = await loop_until_refused(first, "shared", 8)
            blocked_elsewhere = await loop_until_refused(second, "shared", 1)
            listed = await admin_get(second, "/admin/agents")
            reset = await admin_delete(first, "key:default/shared")
            served_elsewhere = await loop_until_refused(second, "shared", 1)
    assert looped[-1] == 429
    assert blocked_elsewhere == [429]
    stored = {agent["key"]: agent for agent in listed.json()["agents"]}
    assert stored["key:default/shared"]["refusals"] == 3
    assert reset.status_code == 200, reset.text
    assert json.loads(reset.text)["stored"] is True
    assert served_elsewhere == [None]
