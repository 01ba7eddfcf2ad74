"""Who a request comes from, as the HTTP guard decides it: tokens, key headers, Host and Origin.

With several named tokens (``LOOP_GUARD_AUTH_TOKENS=alice:tok-a,bob:tok-b``) an
``X-Loop-Guard-Key`` names a loop state inside the token's own namespace, so one agent
cannot read or spoil another's by sending the same key; with
``LOOP_GUARD_TRUST_KEY_HEADER=false`` the header is ignored, so a client cannot escape its
loop state by changing it. The status and metrics pages are behind the same Host and
Origin checks as ``/mcp``, and the bearer scheme is matched without regard to case.
The guard is served in the test's own process (:mod:`tests.proxy.http_inproc`), with a real stdio server.
"""

from __future__ import annotations

import anyio
import pytest

from tests.http_harness import (
    KEY_HEADER,
    http_get,
    http_post,
    initialize_body,
    jsonrpc_payloads,
    payload_for,
    payload_verdict,
    raw_call,
    time_command,
)
from tests.proxy.http_inproc import InProcessGuard, serving_ready

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

TIME_ARGS = ["--", *time_command()]
STATELESS_TIME = ["--stateless", *TIME_ARGS]
CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"}
"""Arguments whose result never changes, so repeating them builds a streak."""
TOKENS = {"LOOP_GUARD_AUTH_TOKENS": "alice:tok-a,bob:tok-b"}
ALICE = {"Authorization": "Bearer tok-a"}
BOB = {"Authorization": "Bearer tok-b"}


async def convert(guard: InProcessGuard, headers: dict[str, str]) -> str | None:
    """One identical convert_time call without a session; its verdict action ("block" when refused)."""
    with anyio.fail_after(10):
        response = await raw_call(guard.mcp_url, "convert_time", CONVERT, headers)
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    message = payload_for(response, 1)
    assert "result" in message, message
    return payload_verdict(message)


async def test_named_tokens_namespace_the_key_header() -> None:
    """Alice loops under key "shared" until refused; Bob sending the same key value and call is judged on his own."""
    async with serving_ready(STATELESS_TIME, TOKENS) as guard:
        alice = [await convert(guard, ALICE | {KEY_HEADER: "shared"}) for _ in range(5)]
        bob = await convert(guard, BOB | {KEY_HEADER: "shared"})
        alice_again = await convert(guard, ALICE | {KEY_HEADER: "shared"})

    assert alice == [None, None, "warn", "warn", "block"]
    assert bob is None, "Bob's first call was judged against Alice's loop state"
    assert alice_again == "block", "Bob's call changed Alice's loop state"


async def test_without_key_header_state_is_per_address_within_a_token() -> None:
    """Without the header, Alice's state is keyed by her address inside her token's namespace: Bob's is apart."""
    async with serving_ready(STATELESS_TIME, TOKENS) as guard:
        alice = [await convert(guard, ALICE) for _ in range(5)]
        bob = await convert(guard, BOB)

    assert alice == [None, None, "warn", "warn", "block"]
    assert bob is None, "Bob, from the same address, was judged against Alice's loop state"


async def test_named_tokens_refuse_anything_else() -> None:
    """With named tokens, a wrong token, a token's name or a name:token pair gets 401; the right tokens pass."""
    async with serving_ready(STATELESS_TIME, TOKENS) as guard:
        with anyio.fail_after(20):
            refused = [
                await http_post(guard.mcp_url, initialize_body(), {"Authorization": f"Bearer {token}"})
                for token in ("tok-c", "alice", "alice:tok-a", "tok-a,tok-b")
            ]
            anonymous = await http_post(guard.mcp_url, initialize_body())
            accepted = [await http_post(guard.mcp_url, initialize_body(), who) for who in (ALICE, BOB)]

    for response in [*refused, anonymous]:
        assert response.status_code == 401, (response.request.headers.get("authorization"), response.text)
    for response in accepted:
        assert response.status_code == 200, response.text
        assert "result" in jsonrpc_payloads(response)[0], response.text


async def test_untrusted_key_header_cannot_escape_the_loop_state() -> None:
    """LOOP_GUARD_TRUST_KEY_HEADER=false: a client rotating the header is warned at its 3rd, refused at its 5th call."""
    env = {"LOOP_GUARD_TRUST_KEY_HEADER": "false"}
    async with serving_ready(STATELESS_TIME, env) as guard:
        rotating = [await convert(guard, {KEY_HEADER: f"fresh-{n}"}) for n in range(5)]

    assert rotating == [None, None, "warn", "warn", "block"]


async def test_untrusted_key_header_with_tokens_keys_by_token_name() -> None:
    """With named tokens and an untrusted header, Alice rotating it is still refused at her 5th call; Bob is apart."""
    env = TOKENS | {"LOOP_GUARD_TRUST_KEY_HEADER": "false"}
    async with serving_ready(STATELESS_TIME, env) as guard:
        alice = [await convert(guard, ALICE | {KEY_HEADER: f"fresh-{n}"}) for n in range(5)]
        bob = await convert(guard, BOB | {KEY_HEADER: "fresh-0"})

    assert alice == [None, None, "warn", "warn", "block"]
    assert bob is None


async def test_status_pages_check_host_and_origin() -> None:
    """/readyz and /metrics refuse a foreign Host (421) or Origin (403) as /mcp does; loopback ones pass."""
    seen: dict[str, dict[str, int]] = {}
    async with serving_ready(TIME_ARGS) as guard:
        for path in ("/readyz", "/metrics"):
            with anyio.fail_after(20):
                seen[path] = {
                    "foreign host": (await http_get(guard.at(path), {"Host": "evil.example"})).status_code,
                    "foreign origin": (await http_get(guard.at(path), {"Origin": "http://evil.example"})).status_code,
                    "loopback": (
                        await http_get(
                            guard.at(path),
                            {"Host": f"localhost:{guard.port}", "Origin": f"http://localhost:{guard.port}"},
                        )
                    ).status_code,
                }

    for path, statuses in seen.items():
        assert statuses["foreign host"] in {403, 421}, (path, statuses)
        assert statuses["foreign origin"] == 403, (path, statuses)
        assert statuses["loopback"] in {200, 503}, (path, statuses)


async def test_bearer_scheme_is_case_insensitive() -> None:
    """``Authorization: bearer <token>`` in any case is accepted; a wrong token in that spelling still gets 401."""
    token = "tok-case"  # noqa: S105 - a made-up token for this guard only
    seen: dict[str, tuple[int, int, int]] = {}
    async with serving_ready(TIME_ARGS, {"LOOP_GUARD_AUTH_TOKEN": token}) as guard:
        for scheme in ("bearer", "BEARER", "bEaReR"):
            with anyio.fail_after(20):
                accepted = await http_post(guard.mcp_url, initialize_body(), {"Authorization": f"{scheme} {token}"})
                ready = await http_get(guard.at("/readyz"), {"Authorization": f"{scheme} {token}"})
                refused = await http_post(guard.mcp_url, initialize_body(), {"Authorization": f"{scheme} not-it"})
            seen[scheme] = (accepted.status_code, ready.status_code, refused.status_code)

    assert seen == dict.fromkeys(seen, (200, 200, 401)), "(initialize, /readyz, wrong token) per spelling"
