"""Abuse soak: honest agents and hostile clients at once against two HTTP guards, upstreams killed every minute.

Run on demand (``pytest -m soak -k abuse``, or ``RUN_SOAK_TESTS=1``); deselected otherwise.
``ABUSE_SOAK_SECONDS`` sets the length (default 600; e.g. 20 for a short form),
``ABUSE_SOAK_AGENTS`` and ``ABUSE_SOAK_HOSTILE`` the number of agents (200) and hostile
clients (1,000).

Two guards run side by side, one serving stateful sessions and one ``--stateless``
(loop state keyed by ``X-Loop-Guard-Key``), each in front of its own counting server.
Half of the agents loop (the same call, the same result, again and again) and must be
warned, refused and cut off; the other half poll a tool whose result changes and must
never be judged. Hostile clients flood keys, send headers a byte at a time, declare
bodies they never send, and post malformed, deeply nested, oversized, foreign-Host and
wrong-token requests, with at most a few hundred of their sockets open at any moment.
Every kill interval each guard's upstream is killed with SIGKILL (found under the
guard's pid); calls failing while it restarts are excused, no others.

At the end: both guards still run and answer ``/healthz``, honest calls succeeded, loops
were caught, and resident memory levelled off (the mean of the last third of the
samples against the middle third). The figures are printed for the README.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
from collections import Counter
from collections.abc import Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import httpx2
import psutil
import pytest

from tests.harness import MARKER, VERDICT_KEY, command_process, fixture_command
from tests.http_harness import (
    KEY_HEADER,
    LOCALHOST,
    MCP_POST_HEADERS,
    SESSION_HEADER,
    Rig,
    ServerProcess,
    http_client,
    initialize_body,
    jsonrpc_payloads,
    poll,
    tool_call_body,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

DURATION = float(os.environ.get("ABUSE_SOAK_SECONDS", "600"))
AGENTS = int(os.environ.get("ABUSE_SOAK_AGENTS", "200"))
HOSTILE = int(os.environ.get("ABUSE_SOAK_HOSTILE", "1000"))
KILL_INTERVAL = min(60.0, DURATION / 2)
"""Seconds between two kills of each guard's upstream: every minute, or twice in a short run."""
THINK_SECONDS = 3.0
"""An agent's pause between two calls, on average: 200 agents make about 70 calls a second."""
HOSTILE_AT_ONCE = 150
"""Hostile clients running at the same moment; each holds one socket (a key flood reuses it)."""
SAMPLES = 60
TOKEN = "abuse-soak-token"  # noqa: S105 - a made-up token for the guards of this test
BEARER = {"Authorization": f"Bearer {TOKEN}"}
HANDSHAKE = {"Mcp-Protocol-Version": "2025-11-25"}
MIB = 1024 * 1024
RSS_LEVEL_TOLERANCE = 16 * MIB
"""How much the mean resident memory of the last third may exceed that of the middle third."""


def guard_env() -> dict[str, str]:
    """Settings for both guards: short windows and expiry so that they happen many times in the run."""
    idle = max(2.0, min(30.0, DURATION / 4))
    return {
        "LOOP_GUARD_AUTH_TOKEN": TOKEN,
        "LOOP_GUARD_RESET_AFTER_SECONDS": "5",
        "LOOP_GUARD_SESSION_IDLE_SECONDS": f"{idle:g}",
        "LOOP_GUARD_MAX_REQUEST_BYTES": str(64 * 1024),
        "LOOP_GUARD_HEADER_TIMEOUT_SECONDS": "5",
        "LOOP_GUARD_BODY_TIMEOUT_SECONDS": "5",
        "LOOP_GUARD_LOG_LEVEL": "warning",
    }


@dataclass
class Window:
    """From a kill of a guard's upstream until /readyz said ready again (None: not yet)."""

    guard: str
    start: float
    end: float | None = None


@dataclass
class Figures:
    """Everything counted during the run."""

    calls: Counter[str] = field(default_factory=Counter)
    """Honest calls by outcome: ok, warn, block, abort, refused-429, reopened-404, excused, failed."""
    failures: list[str] = field(default_factory=list)
    """What went wrong with honest calls outside restart windows (the first few hundred)."""
    false_positives: list[str] = field(default_factory=list)
    hostile: Counter[str] = field(default_factory=Counter)
    """Hostile clients by kind and what they got."""
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    windows: list[Window] = field(default_factory=list)

    def excused(self, guard: str, at: float) -> bool:
        """Whether a failure at this time falls in a restart window of that guard (with a second of slack)."""
        return any(
            w.guard == guard and w.start - 1 <= at <= (w.end if w.end is not None else float("inf")) + 2
            for w in self.windows
        )

    def fail(self, guard: str, at: float, what: str) -> None:
        """Counts an honest call that failed: excused in a restart window, otherwise a failure."""
        if self.excused(guard, at):
            self.calls["excused"] += 1
        else:
            self.calls["failed"] += 1
            if len(self.failures) < 300:
                self.failures.append(f"{guard} +{at:.1f}s: {what}")


@dataclass
class Target:
    """One guard of the run."""

    name: str
    server: ServerProcess
    stateless: bool


def verdict_of(message: Mapping[str, Any]) -> str | None:
    """The guard's verdict action on a tools/call response, None where it added none."""
    found = ((message.get("result") or {}).get("_meta") or {}).get(VERDICT_KEY)
    return str(found["action"]) if isinstance(found, Mapping) else None


class Agent:
    """An honest agent: a looping one repeats one call, a polling one calls a tool whose result changes."""

    def __init__(self, number: int, target: Target, looping: bool, figures: Figures, started: float) -> None:
        self.number = number
        self.target = target
        self.looping = looping
        self.figures = figures
        self.started = started
        self.session: dict[str, str] | None = None
        self.ids = 0

    def _now(self) -> float:
        return anyio.current_time() - self.started

    async def _post(self, client: httpx2.AsyncClient, body: Mapping[str, Any], headers: Mapping[str, str]) -> Any:
        return await client.post(
            self.target.server.mcp_url, content=json.dumps(body), headers=MCP_POST_HEADERS | BEARER | dict(headers)
        )

    async def _open(self, client: httpx2.AsyncClient) -> bool:
        opened = await self._post(client, initialize_body(f"agent-{self.number}"), {})
        if opened.status_code != 200 or SESSION_HEADER not in opened.headers:
            self.figures.fail(self.target.name, self._now(), f"initialize: {opened.status_code} {opened.text[:200]}")
            return False
        self.session = {SESSION_HEADER: opened.headers[SESSION_HEADER]} | HANDSHAKE
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self._post(client, note, self.session)
        return True

    def _headers(self) -> dict[str, str]:
        if self.target.stateless:
            return {KEY_HEADER: f"agent-{self.number}"} | HANDSHAKE
        assert self.session is not None
        return self.session

    async def call(self, client: httpx2.AsyncClient) -> float:
        """One call; returns how long to wait before the next one."""
        pause = random.uniform(THINK_SECONDS / 2, THINK_SECONDS * 1.5)
        if not self.target.stateless and self.session is None and not await self._open(client):
            return pause
        self.ids += 1
        name = "constant" if self.looping else "ticker"
        at = self._now()
        try:
            response = await self._post(client, tool_call_body(name, {}, self.ids), self._headers())
        except httpx2.HTTPError as exc:
            self.figures.fail(self.target.name, at, f"{name}: {exc!r}")
            return pause
        if response.status_code == 429 and self.looping:
            self.figures.calls["refused-429"] += 1
            return min(10.0, float(response.headers.get("retry-after", "1") or 1))
        self._take(response, name, at)
        return pause

    def _take(self, response: httpx2.Response, name: str, at: float) -> None:
        if response.status_code == 404 and not self.target.stateless:
            self.figures.calls["reopened-404"] += 1  # expired, evicted or aborted: a new session next time
            self.session = None
            return
        if response.status_code != 200:
            self.figures.fail(self.target.name, at, f"{name}: HTTP {response.status_code} {response.text[:200]}")
            return
        answers = [m for m in jsonrpc_payloads(response) if m.get("id") == self.ids]
        if len(answers) != 1:
            self.figures.fail(self.target.name, at, f"{name}: no answer in {response.text[:200]}")
            return
        self._judge(answers[0], name, at)

    def _judge(self, answer: Mapping[str, Any], name: str, at: float) -> None:
        if "error" in answer:
            self.figures.fail(self.target.name, at, f"{name}: JSON-RPC error {answer['error']}")
            return
        action = verdict_of(answer)
        if action is not None:
            if self.looping:
                self.figures.calls[action] += 1
            else:
                self.figures.false_positives.append(f"{self.target.name} agent {self.number}: {action} on {name}")
            if action == "abort" and not self.target.stateless:
                self.session = None
            return
        result = answer["result"]
        if result.get("isError"):
            text = " ".join(item.get("text", "") for item in result.get("content") or [])
            kind = "upstream error" if text.startswith(MARKER) else "isError"
            self.figures.fail(self.target.name, at, f"{name}: {kind}: {text[:200]}")
            return
        self.figures.calls["ok"] += 1

    async def run(self, client: httpx2.AsyncClient, until: float) -> None:
        """Calls until the end of the run, pausing between calls."""
        await anyio.sleep(random.uniform(0, min(5.0, DURATION / 10)))
        while anyio.current_time() < until:
            pause = await self.call(client)
            await anyio.sleep(min(pause, max(0.0, until - anyio.current_time())))


# --- hostile clients ----------------------------------------------------------------------


def nested(depth: int) -> bytes:
    """A tools/call whose arguments hold ``depth`` nested arrays."""
    return (
        b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"x":'
        + b"[" * depth
        + b"]" * depth
        + b"}}}"
    )


MALFORMED: list[tuple[str, Mapping[str, str], bytes]] = [
    ("broken json", BEARER | MCP_POST_HEADERS, b'{"jsonrpc": "2.0", "id": '),
    ("nested json", BEARER | MCP_POST_HEADERS, nested(20_000)),
    ("oversized", BEARER | MCP_POST_HEADERS, b'{"pad": "' + b"x" * (128 * 1024) + b'"}'),
    ("bad accept", BEARER | {"Accept": "text/plain", "Content-Type": "application/json"}, b"{}"),
    ("foreign host", BEARER | MCP_POST_HEADERS | {"Host": "evil.example"}, b"{}"),
    ("wrong token", {"Authorization": "Bearer wrong"} | MCP_POST_HEADERS, b"{}"),
]


async def dribble(port: int, data: bytes, interval: float, limit: float) -> str:
    """Sends data a byte every interval until the guard closes the connection or ``limit`` seconds pass."""
    stream = await anyio.connect_tcp(LOCALHOST, port)
    closed = anyio.Event()

    async def watch() -> None:
        with suppress(anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while await stream.receive():
                pass
        closed.set()

    async with stream, anyio.create_task_group() as tg:
        tg.start_soon(watch)
        with anyio.move_on_after(limit), suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            for byte in data:
                if closed.is_set():
                    break
                await stream.send(bytes([byte]))
                await anyio.sleep(interval)
            await closed.wait()
        tg.cancel_scope.cancel()
    return "cut" if closed.is_set() else "still open"


SLOW_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Padding: " + b"a" * 200 + b"\r\n\r\n"
)
SILENT_BODY_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n"
)


async def hostile(number: int, targets: list[Target], figures: Figures) -> None:
    """One hostile client, of a kind chosen by its number."""
    choose = random.Random(number)
    target = choose.choice(targets)
    kind = choose.choice(("key flood", "slow headers", "silent body", "malformed"))
    try:
        if kind == "key flood":
            async with http_client(timeout=10) as client:
                for n in range(20):
                    headers = MCP_POST_HEADERS | BEARER | {KEY_HEADER: f"hostile-{number}-{n}"}
                    headers |= {"Mcp-Protocol-Version": "2026-07-28"} if not target.stateless else HANDSHAKE
                    response = await client.post(
                        target.server.mcp_url, json={"jsonrpc": "2.0", "id": n, "method": "ping"}, headers=headers
                    )
                    figures.hostile[f"{kind}: {response.status_code}"] += 1
        elif kind == "slow headers":
            figures.hostile[f"{kind}: {await dribble(target.server.port, SLOW_HEAD, 0.5, 15)}"] += 1
        elif kind == "silent body":
            figures.hostile[f"{kind}: {await dribble(target.server.port, SILENT_BODY_HEAD, 0.0, 15)}"] += 1
        else:
            label, malformed_headers, body = choose.choice(MALFORMED)
            async with http_client(timeout=10) as client:
                response = await client.post(target.server.mcp_url, content=body, headers=dict(malformed_headers))
            figures.hostile[f"{label}: {response.status_code}"] += 1
    except (httpx2.HTTPError, OSError) as exc:
        figures.hostile[f"{kind}: {type(exc).__name__}"] += 1


async def hostile_clients(targets: list[Target], figures: Figures, until: float) -> None:
    """Starts HOSTILE clients spread over the run, at most HOSTILE_AT_ONCE at a time."""
    limiter = anyio.Semaphore(HOSTILE_AT_ONCE)
    spacing = DURATION * 0.8 / max(1, HOSTILE)

    async def one(number: int) -> None:
        async with limiter:
            if anyio.current_time() < until:
                await hostile(number, targets, figures)

    async with anyio.create_task_group() as tg:
        for number in range(HOSTILE):
            if anyio.current_time() >= until:
                break
            tg.start_soon(one, number)
            await anyio.sleep(spacing)


# --- the operator's side ------------------------------------------------------------------


def upstream_of(target: Target) -> psutil.Process | None:
    """The guard's counting-server child, found under its pid."""
    with suppress(psutil.Error):
        for child in command_process(target.server.process.pid).children(recursive=True):
            with suppress(psutil.Error):
                if any("counting_server.py" in part for part in child.cmdline()):
                    return child
    return None


async def ready(client: httpx2.AsyncClient, target: Target) -> bool:
    """Whether /readyz says 200."""
    try:
        return (await client.get(target.server.url("/readyz"), headers=BEARER)).status_code == 200
    except httpx2.HTTPError:
        return False


async def kill_upstreams(targets: list[Target], figures: Figures, started: float, until: float) -> None:
    """Kills each guard's upstream with SIGKILL every KILL_INTERVAL and notes when it is ready again."""
    async with http_client(timeout=5) as client:
        while anyio.current_time() + KILL_INTERVAL < until:
            await anyio.sleep(KILL_INTERVAL)
            windows: list[tuple[Window, Target]] = []
            for target in targets:
                child = upstream_of(target)
                window = Window(target.name, anyio.current_time() - started)
                figures.windows.append(window)
                if child is not None:
                    child.send_signal(signal.SIGKILL)
                windows.append((window, target))
            for window, target in windows:

                async def up(target: Target = target) -> bool:
                    return await ready(client, target)

                # /readyz may still say ready for a moment after the kill: see it go down first (or not, if
                # the restart was quicker than a look), then come back.
                with anyio.move_on_after(3):
                    await poll(up, lambda ok: not ok, 0.05)
                with anyio.move_on_after(max(5.0, until - anyio.current_time())):
                    await poll(up, lambda ok: ok, 0.25)
                    window.end = anyio.current_time() - started


async def sample_rss(targets: list[Target], figures: Figures, started: float, until: float) -> None:
    """Samples each guard's resident memory SAMPLES times over the run."""
    interval = DURATION / SAMPLES
    while anyio.current_time() < until:
        for target in targets:
            with suppress(psutil.Error):
                rss = command_process(target.server.process.pid).memory_info().rss
                figures.rss.setdefault(target.name, []).append((anyio.current_time() - started, rss))
        await anyio.sleep(interval)


def thirds(samples: list[tuple[float, int]]) -> tuple[float, float]:
    """Mean RSS of the middle third and of the last third of the samples."""
    values = [rss for _, rss in samples]
    third = max(1, len(values) // 3)
    return statistics.fmean(values[third : 2 * third]), statistics.fmean(values[-third:])


def report(figures: Figures, targets: list[Target]) -> str:
    """The figures, as printed at the end of the run."""
    honest = sum(figures.calls.values())
    lines = [
        f"abuse soak: {DURATION:g}s, {AGENTS} agents, {HOSTILE} hostile clients, upstreams killed every "
        f"{KILL_INTERVAL:g}s ({len(figures.windows)} kills)",
        f"honest calls: {honest}; by outcome: {dict(figures.calls)}",
        f"loops caught: warn {figures.calls['warn']}, block {figures.calls['block']}, "
        f"abort {figures.calls['abort']}, 429 {figures.calls['refused-429']}",
        f"false positives on polling agents: {len(figures.false_positives)}",
        f"hostile outcomes: {dict(sorted(figures.hostile.items()))}",
        "restart windows: "
        + ", ".join(
            f"{w.guard} {w.start:.1f}s to {'never' if w.end is None else f'{w.end:.1f}s'}" for w in figures.windows
        ),
    ]
    for target in targets:
        samples = figures.rss.get(target.name, [])
        if samples:
            middle, last = thirds(samples)
            lines.append(
                f"RSS {target.name}: first {samples[0][1] / MIB:.1f} MiB, middle third {middle / MIB:.1f}, "
                f"last third {last / MIB:.1f}, max {max(r for _, r in samples) / MIB:.1f}; samples (MiB): "
                + " ".join(f"{r / MIB:.0f}" for _, r in samples)
            )
    lines.extend(f"failure: {failure}" for failure in figures.failures[:20])
    return "\n".join(lines)


@pytest.mark.soak
@pytest.mark.timeout(int(DURATION) + 600)
async def test_abuse_soak(rig: Rig) -> None:
    """Honest agents and hostile clients for ABUSE_SOAK_SECONDS: the guards stay up, serve, catch loops, level off."""
    figures = Figures()
    counting = fixture_command("counting_server")
    async with AsyncExitStack() as stack:
        targets: list[Target] = []
        for name, stateless in (("stateful", False), ("stateless", True)):
            flags = ["--stateless"] if stateless else []
            server = await stack.enter_async_context(rig.guard([*flags, "--", *counting], env=guard_env()))
            targets.append(Target(name, server, stateless))
        started = anyio.current_time()
        until = started + DURATION
        limits = httpx2.Limits(max_connections=AGENTS + 10, max_keepalive_connections=AGENTS + 10)
        async with (
            http_client(timeout=httpx2.Timeout(30), limits=limits) as client,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(sample_rss, targets, figures, started, until)
            tg.start_soon(kill_upstreams, targets, figures, started, until)
            tg.start_soon(hostile_clients, targets, figures, until)
            for number in range(AGENTS):
                agent = Agent(number, targets[number % 2], looping=number % 4 < 2, figures=figures, started=started)
                tg.start_soon(agent.run, client, until)
        alive = {target.name: target.server.process.returncode for target in targets}
        health: dict[str, int | str] = {}
        async with http_client(timeout=10) as client:
            for target in targets:
                try:
                    health[target.name] = (await client.get(target.server.url("/healthz"))).status_code
                except httpx2.HTTPError as exc:
                    health[target.name] = repr(exc)
        tracebacks = {target.name: "Traceback" in target.server.stderr_text() for target in targets}
        printed = report(figures, targets)
        print(printed)

    assert alive == {"stateful": None, "stateless": None}, f"exit statuses {alive}\n{printed}"
    assert health == {"stateful": 200, "stateless": 200}, printed
    assert tracebacks == {"stateful": False, "stateless": False}, printed
    assert figures.calls["ok"] > 0, printed
    assert figures.calls["failed"] == 0, printed
    assert figures.false_positives == [], printed
    assert figures.calls["warn"] > 0, printed
    assert figures.calls["block"] > 0, printed
    assert all(window.end is not None for window in figures.windows), printed
    for target in targets:
        middle, last = thirds(figures.rss[target.name])
        assert last - middle < RSS_LEVEL_TOLERANCE, f"{target.name}: memory did not level off\n{printed}"
