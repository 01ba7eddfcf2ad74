"""Bounded state and connections in the HTTP guard, whatever clients do.

``LOOP_GUARD_MAX_SESSIONS`` and ``LOOP_GUARD_MAX_KEYS`` cap live sessions and keyed loop
states: when full, the least recently used idle one is evicted, and when none is idle the
request gets 503 with ``Retry-After``. Requests the front door refuses leave nothing
behind. Slow clients are cut (``LOOP_GUARD_HEADER_TIMEOUT_SECONDS``,
``LOOP_GUARD_BODY_TIMEOUT_SECONDS``), and excess connections are shed
(``LOOP_GUARD_MAX_CONNECTIONS``, and a low limit of open files) while ``/healthz`` and new
clients are still served.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import suppress
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest

from tests.harness import eventually, fixture_command
from tests.http_harness import (
    KEY_HEADER,
    LOCALHOST,
    MCP_POST_HEADERS,
    SESSION_HEADER,
    FloodConnection,
    Rig,
    ServerProcess,
    http_client,
    http_get,
    http_post,
    initialize_body,
    payload_for,
    payload_verdict,
    raw_call,
    raw_session,
    time_command,
    tool_call_body,
)
from tests.proxy.http_inproc import InProcessGuard, serving_cli
from tests.reliability.wire import received

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ERRORING = ["--", *fixture_command("erroring_server")]
"""An upstream with an ``echo`` (same answer every time, so streaks build) and a ``slow`` tool."""
TIME_ARGS = ["--", *time_command()]
SAME = {"text": "same"}
MB = 1024 * 1024


def guard_env(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """The environment of a guard served in this process (and of the upstream it starts), for this test."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)


async def keyed_echo(
    guard: ServerProcess | InProcessGuard, key: str, headers: Mapping[str, str] | None = None
) -> str | None:
    """One identical echo call under a key, without a session; its verdict action."""
    with anyio.fail_after(10):
        response = await raw_call(guard.mcp_url, "echo", SAME, {KEY_HEADER: key, **(headers or {})})
    assert response.status_code == 200, f"key {key}: {response.status_code} {response.text}"
    return payload_verdict(payload_for(response, 1))


async def slow_calls_in_flight(
    guard: InProcessGuard, line_log: Path, tg: anyio.abc.TaskGroup, headers: Sequence[Mapping[str, str]]
) -> None:
    """Starts one ``slow`` call per header set (a key or a session) and returns once the upstream has them all."""

    async def call(extra: Mapping[str, str]) -> None:
        with suppress(httpx2.TransportError):
            async with http_client(timeout=httpx2.Timeout(10, read=60)) as client:
                body = json.dumps(tool_call_body("slow", {"seconds": 30}, 9))
                await client.post(guard.mcp_url, content=body, headers=MCP_POST_HEADERS | dict(extra))

    before = sum(1 for m in received(line_log) if m.get("method") == "tools/call" and m["params"]["name"] == "slow")
    for extra in headers:
        tg.start_soon(call, {"Mcp-Protocol-Version": "2025-11-25", **extra})

    def arrived() -> int:
        return sum(1 for m in received(line_log) if m.get("method") == "tools/call" and m["params"]["name"] == "slow")

    with anyio.fail_after(10):
        await eventually(lambda: arrived() - before >= len(headers))


# --- bounded state ------------------------------------------------------------------------


async def test_max_keys_evicts_the_least_recently_used_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_KEYS=3: a 4th key evicts the least recently used one from memory; with the in-memory store its loop
    state goes with it (a persistent store would keep it), while the others keep theirs."""
    guard_env(monkeypatch, {"LOOP_GUARD_MAX_KEYS": "3", "LOOP_GUARD_STATE": "memory"})
    async with serving_cli(["--stateless", *ERRORING], state=None) as guard:
        for key in ("k1", "k2", "k3"):
            assert [await keyed_echo(guard, key) for _ in range(2)] == [None, None]
        fourth = await keyed_echo(guard, "k4")
        kept = await keyed_echo(guard, "k3")
        evicted = await keyed_echo(guard, "k1")

    assert fourth is None
    assert kept == "warn", "k3 was used more recently than k1 and should have kept its streak"
    assert evicted is None, "k1, the least recently used key, was not evicted: its third identical call was warned"


async def test_max_keys_full_of_busy_keys_answers_503(line_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_KEYS=3 with a call in flight under each key: a 4th key gets 503 with Retry-After; the busy ones finish."""
    guard_env(monkeypatch, {"LOOP_GUARD_MAX_KEYS": "3", "LINE_SERVER_LOG": str(line_log)})
    async with serving_cli(["--stateless", *ERRORING], state=None) as guard, anyio.create_task_group() as tg:
        await slow_calls_in_flight(guard, line_log, tg, [{KEY_HEADER: f"busy-{n}"} for n in range(3)])
        with anyio.fail_after(10):
            refused = await raw_call(guard.mcp_url, "echo", SAME, {KEY_HEADER: "one-too-many"})
        tg.cancel_scope.cancel()

    assert refused.status_code == 503, f"{refused.status_code} {refused.text}"
    assert int(refused.headers.get("retry-after", "0")) >= 1, refused.headers


async def test_max_sessions_evicts_the_least_recently_used_idle_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_SESSIONS=3: a 4th session evicts the least recently used idle one (its id then answers 404)."""
    guard_env(monkeypatch, {"LOOP_GUARD_MAX_SESSIONS": "3"})
    async with serving_cli(ERRORING, state=None) as guard:
        with anyio.fail_after(30):
            sessions = [await raw_session(guard.mcp_url) for _ in range(4)]
            answers = [await http_post(guard.mcp_url, tool_call_body("echo", SAME, 2), s) for s in sessions]

    oldest, *others = answers
    assert oldest.status_code == 404, f"the least recently used session still answers: {oldest.status_code}"
    for answer in others:
        assert answer.status_code == 200, answer.text
        assert "result" in payload_for(answer, 2), answer.text


async def test_max_sessions_full_of_busy_sessions_answers_503(line_log: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MAX_SESSIONS=3 with a call in flight in each: a new initialize gets 503 with Retry-After."""
    guard_env(monkeypatch, {"LOOP_GUARD_MAX_SESSIONS": "3", "LINE_SERVER_LOG": str(line_log)})
    async with serving_cli(ERRORING, state=None) as guard, anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            sessions = [await raw_session(guard.mcp_url) for _ in range(3)]
        await slow_calls_in_flight(guard, line_log, tg, sessions)
        with anyio.fail_after(10):
            refused = await http_post(guard.mcp_url, initialize_body())
        tg.cancel_scope.cancel()

    assert refused.status_code == 503, f"{refused.status_code} {refused.text}"
    assert refused.headers.get(SESSION_HEADER) is None
    assert int(refused.headers.get("retry-after", "0")) >= 1, refused.headers


async def test_refused_requests_leave_no_state(rig: Rig) -> None:
    """5,000 requests the front door refuses (401, 421, 403, 406, 413), distinct keys each: RSS grows < 20 MB."""
    token = "tok-front-door"  # noqa: S105 - a made-up token for this guard only
    bearer = {"Authorization": f"Bearer {token}"}
    env = {"LOOP_GUARD_AUTH_TOKEN": token, "LOOP_GUARD_MAX_REQUEST_BYTES": "4096"}
    small = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    large = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"_meta": {"pad": "x" * 8192}}})
    kinds: dict[str, tuple[dict[str, str], str, set[int]]] = {
        "wrong token": ({"Authorization": "Bearer nope"} | MCP_POST_HEADERS, small, {401}),
        "foreign host": (bearer | MCP_POST_HEADERS | {"Host": "evil.example"}, small, {421, 403}),
        "foreign origin": (bearer | MCP_POST_HEADERS | {"Origin": "http://evil.example"}, small, {403}),
        "bad accept": (bearer | {"Accept": "text/plain", "Content-Type": "application/json"}, small, {406}),
        "too large": (bearer | MCP_POST_HEADERS, large, {413}),
    }
    statuses: dict[str, set[int]] = {kind: set() for kind in kinds}
    requests = 5000

    async def flood(numbers: range) -> None:
        connection = FloodConnection(guard.port)
        for n in numbers:
            kind = list(kinds)[n % len(kinds)]
            headers, body, _ = kinds[kind]
            sent = headers | {KEY_HEADER: f"hostile-{n}", "Mcp-Protocol-Version": "2025-11-25"}
            status, _ = await connection.post("/mcp", body.encode(), sent)
            statuses[kind].add(status)
        await connection.aclose()

    async with rig.guard(["--stateless", *ERRORING], env=env) as guard:
        with anyio.fail_after(30):
            await flood(range(200))  # warm-up: the code paths, caches and pools exist now
        before = guard.rss()
        with anyio.fail_after(180):
            async with anyio.create_task_group() as tg:
                for worker in range(8):
                    tg.start_soon(flood, range(200 + worker, 200 + requests, 8))
        after = guard.rss()
        served = await keyed_echo(guard, "legitimate", bearer)
    print(f"RSS {before / MB:.1f} MB -> {after / MB:.1f} MB; statuses {statuses}")

    for kind, (_, _, expected) in kinds.items():
        assert statuses[kind] <= expected, f"{kind}: answered {statuses[kind]}, expected {expected}"
    assert after - before < 20 * MB, f"resident memory grew by {(after - before) / MB:.1f} MB over {requests} refusals"
    assert served is None


# --- slow clients and connections ---------------------------------------------------------


async def until_closed(stream: anyio.abc.SocketStream, dribble: bytes, interval: float) -> bytes:
    """Sends dribble a byte at a time, one every interval, until the peer closes the connection; what it answered."""
    closed = anyio.Event()
    answer = bytearray()

    async def watch() -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while chunk := await stream.receive():
                answer.extend(chunk)
        closed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        try:
            for byte in dribble:
                if closed.is_set():
                    break
                await stream.send(bytes([byte]))
                await anyio.sleep(interval)
            await closed.wait()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        tg.cancel_scope.cancel()
    return bytes(answer)


SLOW_REQUEST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nX-Padding: " + b"a" * 4000 + b"\r\n\r\n"
)
"""A request whose headers take minutes to arrive at a byte every few tenths of a second."""


async def test_headers_sent_a_byte_at_a_time_are_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOOP_GUARD_HEADER_TIMEOUT_SECONDS=1: a client dribbling its headers is disconnected within seconds."""
    guard_env(monkeypatch, {"LOOP_GUARD_HEADER_TIMEOUT_SECONDS": "1"})
    async with serving_cli(TIME_ARGS, state=None) as guard:
        stream = await anyio.connect_tcp(LOCALHOST, guard.port)
        try:
            with anyio.fail_after(10):
                await until_closed(stream, SLOW_REQUEST, 0.2)
        except TimeoutError:
            pytest.fail("a client sending its headers a byte every 0.2 s was still connected after 10 s")
        finally:
            await stream.aclose()


async def test_body_never_sent_is_answered_408_or_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    """LOOP_GUARD_BODY_TIMEOUT_SECONDS=1: a request declaring a body it never sends gets 408 or is disconnected."""
    head = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n"
    )
    answer = b""
    guard_env(monkeypatch, {"LOOP_GUARD_BODY_TIMEOUT_SECONDS": "1"})
    async with serving_cli(TIME_ARGS, state=None) as guard:
        stream = await anyio.connect_tcp(LOCALHOST, guard.port)
        try:
            await stream.send(head)
            with anyio.fail_after(10):
                with suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    while chunk := await stream.receive():
                        answer += chunk
        except TimeoutError:
            pytest.fail(f"a request whose body never came was neither answered nor cut after 10 s (got {answer!r})")
        finally:
            await stream.aclose()

    assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:200]


SLOW_BODY_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json, text/event-stream\r\nContent-Length: 4000\r\n\r\n"
)
"""A request whose headers come at once, announcing a body that then takes minutes to arrive."""
SLOW_BODY = b"[" + b" " * 3998 + b"]"


async def hold_slow_sockets(
    port: int, count: int, tg: anyio.abc.TaskGroup, *, head: bytes = b"", dribble: bytes = SLOW_REQUEST
) -> None:
    """Opens ``count`` connections that each send ``head`` at once and dribble the rest, and leaves them to it in tg."""
    for _ in range(count):
        try:
            stream = await anyio.connect_tcp(LOCALHOST, port)
        except OSError:
            continue  # refused outright: shed before it was even accepted

        async def trickle(stream: anyio.abc.SocketStream = stream) -> None:
            async with stream:
                with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    await stream.send(head)
                await until_closed(stream, dribble, 0.5)

        tg.start_soon(trickle)


async def served_promptly(guard: ServerProcess) -> str:
    """What /healthz and a normal client's initialize got, each allowed 10 s: ``"200 200"`` when both were served."""
    try:
        with anyio.fail_after(10):
            health = (await http_get(guard.url("/healthz"))).status_code
        with anyio.fail_after(10):
            opened = (await http_post(guard.mcp_url, initialize_body())).status_code
    except (TimeoutError, httpx2.TransportError) as exc:
        return f"not served: {exc!r}"
    return f"{health} {opened}"


async def test_excess_connections_are_shed(rig: Rig) -> None:
    """MAX_CONNECTIONS=10 and 20 slow sockets: the guard holds at most 10, serves /healthz and a new client."""
    env = {"LOOP_GUARD_MAX_CONNECTIONS": "10"}
    async with rig.guard(TIME_ARGS, env=env) as guard, anyio.create_task_group() as tg:
        await hold_slow_sockets(guard.port, 20, tg)
        served = await served_promptly(guard)
        with anyio.move_on_after(10):
            await eventually(lambda: guard.client_connections() <= 10, interval=0.2)
        held = guard.client_connections()
        tg.cancel_scope.cancel()

    assert served == "200 200", f"/healthz and initialize with 20 slow sockets open: {served}"
    assert held <= 10, f"the guard still holds {held} client connections, over its limit of 10"
    assert guard.stderr.stat().st_size < 200 * 1024, guard.stderr_tail()


async def test_slow_bodies_do_not_keep_new_clients_out(rig: Rig) -> None:
    """MAX_CONNECTIONS=10 and 20 bodies a byte every 0.5 s: five clients after them are each served at once."""
    env = {"LOOP_GUARD_MAX_CONNECTIONS": "10"}
    async with rig.guard(TIME_ARGS, env=env) as guard, anyio.create_task_group() as tg:
        await hold_slow_sockets(guard.port, 20, tg, head=SLOW_BODY_HEAD, dribble=SLOW_BODY)
        with anyio.move_on_after(10):
            await eventually(lambda: guard.client_connections() >= 10, interval=0.2)
        served = [await served_promptly(guard) for _ in range(5)]
        held = guard.client_connections()
        tg.cancel_scope.cancel()

    assert served == ["200 200"] * 5, f"/healthz and initialize behind 20 slow bodies: {served}"
    assert held <= 10, f"the guard still holds {held} client connections, over its limit of 10"


@pytest.mark.parametrize(
    ("head", "answers"),
    [
        (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n",
            (b"", b"HTTP/1.1 408"),
        ),
        (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4000\r\n\r\n", (b"HTTP/1.1 200",)),
    ],
    ids=["a body the app reads", "a body nobody reads"],
)
async def test_a_body_sent_a_byte_at_a_time_is_cut(
    monkeypatch: pytest.MonkeyPatch, head: bytes, answers: tuple[bytes, ...]
) -> None:
    """LOOP_GUARD_BODY_TIMEOUT_SECONDS=1: a body dribbled a byte every 0.2 s ends within seconds, whatever the path."""
    guard_env(monkeypatch, {"LOOP_GUARD_BODY_TIMEOUT_SECONDS": "1"})
    async with serving_cli(TIME_ARGS, state=None) as guard:
        stream = await anyio.connect_tcp(LOCALHOST, guard.port)
        try:
            await stream.send(head)
            with anyio.fail_after(10):
                answer = await until_closed(stream, SLOW_BODY, 0.2)
        except TimeoutError:
            pytest.fail("a body sent a byte every 0.2 s was still being taken after 10 s")
        finally:
            await stream.aclose()

    assert answer.startswith(answers), answer[:200]


async def test_low_open_file_limit_with_twice_as_many_slow_sockets(rig: Rig) -> None:
    """RLIMIT_NOFILE=100 and 200 slow sockets: /healthz and a new client are still served; stderr stays small."""
    async with rig.guard(TIME_ARGS, nofile=100) as guard, anyio.create_task_group() as tg:
        await hold_slow_sockets(guard.port, 200, tg)
        served = await served_promptly(guard)
        tg.cancel_scope.cancel()

    assert served == "200 200", f"/healthz and initialize with 200 slow sockets open: {served}"
    assert guard.stderr.stat().st_size < 200 * 1024, guard.stderr_tail()
