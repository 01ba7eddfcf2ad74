"""Run the benchmark suite: ``python -m benchmarks.run [--size smoke|full] [--out PATH]``.

Prints one table per scenario and the issue's targets, and writes every number
to a JSON file (``benchmarks/results/<timestamp>.json`` unless ``--out`` says
otherwise), with the children's stderr in a ``.log`` beside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import traceback
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, TextIO

import anyio
import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from benchmarks import http_load, stdio_rtt
from benchmarks.checks import evaluate
from benchmarks.peers import FASTMCP_PEER, FASTMCP_SCRIPT, MCP_PROXY_PEER, PEERS
from benchmarks.processes import (
    BENCH_DIR,
    EVERYTHING_MISSING,
    REPO_ROOT,
    WORKTREE,
    GuardBuild,
    Via,
    background_server,
    everything_command,
    fixture_command,
    free_port,
    guard_builds,
    guard_http_support,
    scratch_dir,
)
from benchmarks.report import markdown, print_report
from benchmarks.results import DIRECT, FASTMCP, MCP_PROXY, RELAY, Report, Row
from benchmarks.sizes import SIZES, Size

EXIT_FAILED = 1
NO_PEERS = "peers not run (--skip-peers, the default at --size smoke)"
MCP_PROXY_STDIO = "mcp-proxy only bridges stdio and HTTP, so it has no stdio-to-stdio path; see the HTTP scenario"
SCENARIOS = ("fingerprint", "memory", "startup", "stdio", "remote", "http", "profile")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full", help="workload (default: full)")
    parser.add_argument("--out", type=Path, help="JSON file to write (default: benchmarks/results/<timestamp>.json)")
    parser.add_argument("--markdown", type=Path, help="also write the tables as Markdown to this file")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument(
        "--peers", dest="peers", action="store_true", default=None, help="compare with FastMCP/mcp-proxy"
    )
    peers.add_argument("--skip-peers", dest="peers", action="store_false", help="do not install or run the peers")
    parser.add_argument(
        "--guard",
        action="append",
        metavar="REF",
        help=f"guard revision to measure: {WORKTREE!r} (the installed work tree, default) or a git ref; repeatable",
    )
    parser.add_argument("--only", action="append", choices=SCENARIOS, help="run only these scenarios; repeatable")
    return parser


@dataclass
class Run:
    """One run's settings, shared by the scenarios."""

    size: Size
    builds: list[GuardBuild]
    peer_skips: dict[str, str | None]
    """Per peer: None when ready to run, else why it is skipped."""
    log: TextIO
    out: Path
    """The JSON report's path; logs and profiles are written beside it."""
    progress: Progress
    rows: list[Row] = field(default_factory=list)
    profiles: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def advancer(self, task: TaskID) -> Callable[[int], None]:
        """A callback that moves ``task``'s bar by n steps."""
        return lambda n: self.progress.advance(task, n)

    def skip(self, scenario: str, case: str, via: str, reason: str) -> None:
        """Record a measurement that was not made, and why."""
        self.rows.append(Row(scenario, case, via, skipped=reason))


# --- scenarios -------------------------------------------------------------------------------


async def _fingerprint(run: Run, task: TaskID) -> None:
    from benchmarks import fingerprint_speed

    size = run.size
    run.rows += fingerprint_speed.measure(
        size.text_bytes, size.image_bytes, size.fingerprint_repeats, run.advancer(task)
    )


async def _memory(run: Run, task: TaskID) -> None:
    from benchmarks import detector_memory

    size = run.size
    run.rows += detector_memory.measure(size.detector_calls, size.detector_checkpoints, run.advancer(task))
    case = f"resident memory, {size.idle_sessions:,} idle HTTP sessions"
    everything = everything_command("streamableHttp")
    if everything is None:
        run.skip("memory", case, DIRECT, EVERYTHING_MISSING)
        return
    port = free_port()
    async with background_server(everything, port, run.log, {"PORT": str(port)}) as server:
        run.rows.append(
            await _idle_rss(run, task, case=case, via=DIRECT, server=server, url=f"http://127.0.0.1:{port}/mcp")
        )
        run.rows[-1].note = "server-everything itself, for scale"
        for build in run.builds:
            reason = guard_http_support(build)
            if reason is not None:
                run.skip("memory", case, build.label, reason)
                continue
            guard_port = free_port()
            command = build.http_command(guard_port, f"http://127.0.0.1:{port}/mcp")
            async with background_server(command, guard_port, run.log, build.env) as guard:
                url = f"http://127.0.0.1:{guard_port}/mcp"
                run.rows.append(await _idle_rss(run, task, case=case, via=build.label, server=guard, url=url))
            shared_port = free_port()
            command = build.http_stdio_command(shared_port, everything_command() or [])
            async with background_server(command, shared_port, run.log, build.env) as guard:
                url = f"http://127.0.0.1:{shared_port}/mcp"
                via = f"{build.label} · stdio"
                run.rows.append(await _idle_rss(run, task, case=case, via=via, server=guard, url=url))
                run.rows[-1].note = "in front of one server-everything over stdio, shared by the sessions"
            keyed_port = free_port()
            command = [*build.http_command(keyed_port, f"http://127.0.0.1:{port}/mcp"), "--stateless"]
            memory_state = {**build.env, "LOOP_GUARD_STATE": "memory"}  # every key's state in the process measured
            async with background_server(command, keyed_port, run.log, memory_state) as guard:
                url = f"http://127.0.0.1:{keyed_port}/mcp"
                run.rows.append(await _keys_rss(run, task, via=build.label, server=guard, url=url))


async def _idle_rss(run: Run, task: TaskID, *, case: str, via: str, server: psutil.Process, url: str) -> Row:
    before = server.memory_info().rss
    opened = await http_load.open_idle_sessions(url, run.size.idle_sessions, run.log, run.advancer(task))
    await anyio.sleep(run.size.settle_seconds)  # let the server finish whatever each session started
    after = server.memory_info().rss
    values: dict[str, float | int | str] = {
        "sessions": opened,
        "rss_before_mb": before / 2**20,
        "rss_mb": after / 2**20,
        "kb_per_session": (after - before) / max(opened, 1) / 1024,
    }
    return Row("memory", case, via, values)


async def _keys_rss(run: Run, task: TaskID, *, via: str, server: psutil.Process, url: str) -> Row:
    before = server.memory_info().rss
    touched = await http_load.touch_keys(url, run.size.idle_sessions, run.log, run.advancer(task))
    await anyio.sleep(run.size.settle_seconds)
    after = server.memory_info().rss
    values: dict[str, float | int | str] = {
        "keys": touched,
        "rss_before_mb": before / 2**20,
        "rss_mb": after / 2**20,
        "kb_per_key": (after - before) / max(touched, 1) / 1024,
    }
    case = f"resident memory, {run.size.idle_sessions:,} sessionless agents (one call each)"
    return Row("memory", case, via, values, "--stateless, X-Loop-Guard-Key")


UNJUDGED_NOTE = "the same relay with tools/call unjudged (benchmarks/unjudged_guard.py): the relay's own cost"


def _stdio_vias(run: Run, upstream: list[str], cases: Sequence[str]) -> list[Via]:
    vias = [Via(DIRECT, upstream)]
    relay = [sys.executable, str(BENCH_DIR / "relay_floor.py"), *upstream]
    vias.append(Via(RELAY, relay, note="copies bytes, parses nothing: the least a proxy process costs"))
    vias += [Via(build.label, build.command(upstream), build.env) for build in run.builds]
    first = run.builds[0]
    unjudged = [sys.executable, str(BENCH_DIR / "unjudged_guard.py"), "--", *upstream]
    vias.append(Via(f"{first.label}, judging off", unjudged, first.env, note=UNJUDGED_NOTE))
    fastmcp_skip = run.peer_skips[FASTMCP]
    if fastmcp_skip is None:
        argv = [str(FASTMCP_PEER.executable), str(FASTMCP_SCRIPT), "stdio", *upstream]
        vias.append(Via(FASTMCP, argv, note="create_proxy(StdioTransport(...)), warm upstream session"))
    for case in cases:
        if fastmcp_skip is not None:
            run.skip("stdio", case, FASTMCP, fastmcp_skip)
        run.skip("stdio", case, MCP_PROXY, MCP_PROXY_STDIO)
    return vias


def _cases(size: Size) -> tuple[stdio_rtt.Case, stdio_rtt.Case, stdio_rtt.Case]:
    """Small calls on server-everything and on the fixture, large results on the fixture."""
    large = size.large_bytes
    return (
        stdio_rtt.Case(
            "echo · server-everything",
            "echo",
            lambda i: {"message": f"call {i}"},
            size.echo_calls,
            size.echo_warmup,
        ),
        stdio_rtt.Case("echo · fixture", "echo", lambda i: {"text": f"call {i}"}, size.echo_calls, size.echo_warmup),
        stdio_rtt.Case(
            f"{large / 1e6:g} MB result · fixture",
            "blob",
            lambda i: {"size": large, "seed": i},
            size.large_calls,
            size.large_warmup,
        ),
    )


async def _stdio(run: Run, task: TaskID) -> None:
    echo, fixture_echo, large = _cases(run.size)
    everything = everything_command()
    if everything is None:
        run.skip("stdio", echo.name, DIRECT, EVERYTHING_MISSING)
    else:
        vias = _stdio_vias(run, everything, [echo.name])
        run.rows += await stdio_rtt.run_group(vias, [echo], run.log, run.advancer(task))
    vias = _stdio_vias(run, fixture_command(), [fixture_echo.name, large.name])
    run.rows += await stdio_rtt.run_group(vias, [fixture_echo, large], run.log, run.advancer(task))


async def _remote(run: Run, task: TaskID) -> None:
    """The stdio guard relaying to server-everything over HTTP, against the SDK client speaking HTTP itself."""
    echo = _cases(run.size)[0]
    everything_http = everything_command("streamableHttp")
    if everything_http is None:
        run.skip("remote", echo.name, DIRECT, EVERYTHING_MISSING)
        return
    async with AsyncExitStack() as stack:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        await stack.enter_async_context(background_server(everything_http, port, run.log, {"PORT": str(port)}))
        note = "the SDK client over streamable HTTP (httpx)"
        vias = [Via(DIRECT, [], note=note, url=url)]
        vias += [Via(build.label, build.command([], "--upstream", url), build.env) for build in run.builds]
        run.rows += await stdio_rtt.run_group(vias, [echo], run.log, run.advancer(task), scenario="remote")


async def _http(run: Run, task: TaskID) -> None:
    size = run.size
    case = f"echo, {size.http_sessions} sessions"
    everything_http, everything_stdio = everything_command("streamableHttp"), everything_command()
    everything_sse = everything_command("sse")
    if everything_http is None or everything_stdio is None or everything_sse is None:
        run.skip("http", case, DIRECT, EVERYTHING_MISSING)
        return
    async with AsyncExitStack() as stack:
        port = free_port()
        upstream = f"http://127.0.0.1:{port}/mcp"
        server = await stack.enter_async_context(background_server(everything_http, port, run.log, {"PORT": str(port)}))
        sse_port = free_port()
        await stack.enter_async_context(background_server(everything_sse, sse_port, run.log, {"PORT": str(sse_port)}))
        sse_upstream = f"http://127.0.0.1:{sse_port}/sse"
        targets = [http_load.HttpTarget(DIRECT, upstream, server, "server-everything streamableHttp")]
        for build in run.builds:
            reason = guard_http_support(build)
            if reason is not None:
                run.skip("http", case, build.label, reason)
                continue
            targets += await _guard_targets(stack, run, build, (upstream, everything_stdio, sse_upstream))
        if (reason := run.peer_skips[FASTMCP]) is not None:
            run.skip("http", case, FASTMCP, reason)
        else:
            peer_port = free_port()
            command = [str(FASTMCP_PEER.executable), str(FASTMCP_SCRIPT), "http", str(peer_port), upstream]
            peer = await stack.enter_async_context(background_server(command, peer_port, run.log))
            note = "HTTP to HTTP, create_proxy(url): a new upstream session per request (its default)"
            targets.append(http_load.HttpTarget(FASTMCP, f"http://127.0.0.1:{peer_port}/mcp", peer, note))
        if (reason := run.peer_skips[MCP_PROXY]) is not None:
            run.skip("http", case, MCP_PROXY, reason)
        else:
            peer_port = free_port()
            command = [str(MCP_PROXY_PEER.executable), "--port", str(peer_port), "--", *everything_stdio]
            peer = await stack.enter_async_context(background_server(command, peer_port, run.log))
            note = "HTTP to stdio: one server-everything process shared by all sessions"
            targets.append(http_load.HttpTarget(MCP_PROXY, f"http://127.0.0.1:{peer_port}/mcp", peer, note))
        stateless = await _stateless_targets(stack, run)
        run.progress.update(task, total=size.http_rounds * (len(targets) + len(stateless)))
        run.rows += await http_load.measure(
            targets, size.http_sessions, size.http_calls, size.http_rounds, run.advancer(task)
        )
        run.rows += await http_load.measure(
            stateless,
            size.http_sessions,
            size.http_calls,
            size.http_rounds,
            run.advancer(task),
            case=f"{case}, stateless",
        )


async def _stateless_targets(stack: AsyncExitStack, run: Run) -> list[http_load.HttpTarget]:
    """The fixture server in its stateless HTTP mode, and each build's ``--stateless`` guard in front of it.

    Every session sends its own key, so each is an agent of its own, as behind a load balancer.
    """
    port = free_port()
    upstream = f"http://127.0.0.1:{port}/mcp"
    command = [*fixture_command(), "--http", str(port), "--stateless"]
    server = await stack.enter_async_context(background_server(command, port, run.log))
    note = "the benchmark fixture server, stateless (it opens no sessions)"
    targets = [http_load.HttpTarget(DIRECT, upstream, server, note, keyed=True, argument="text")]
    for build in run.builds:
        if guard_http_support(build) is not None:
            continue  # reported with the other HTTP targets
        guard_port = free_port()
        argv = [*build.http_command(guard_port, upstream), "--stateless"]
        guard = await stack.enter_async_context(background_server(argv, guard_port, run.log, build.env))
        url = f"http://127.0.0.1:{guard_port}/mcp"
        note = "--stateless, each session its own X-Loop-Guard-Key"
        via = f"{build.label} · stateless"
        targets.append(http_load.HttpTarget(via, url, guard, note, keyed=True, argument="text"))
    return targets


async def _guard_targets(
    stack: AsyncExitStack, run: Run, build: GuardBuild, upstreams: tuple[str, Sequence[str], str]
) -> list[http_load.HttpTarget]:
    """One build's guards: before the HTTP server (also ``--stateless``), one shared stdio server, the SSE server."""
    upstream, stdio, sse_upstream = upstreams
    ports = [free_port() for _ in range(4)]
    stateless = [*build.http_command(ports[3], upstream), "--stateless"]
    guards = [
        ("", build.http_command(ports[0], upstream), "HTTP to HTTP"),
        (" · stdio", build.http_stdio_command(ports[1], stdio), "HTTP to stdio: one server-everything process shared"),
        (" · sse", build.http_command(ports[2], sse_upstream), "HTTP to legacy SSE: server-everything, a session each"),
        (" · stateless", stateless, "--stateless, each session its own X-Loop-Guard-Key; the server opens sessions"),
    ]
    targets = []
    for port, (suffix, command, note) in zip(ports, guards, strict=True):
        guard = await stack.enter_async_context(background_server(command, port, run.log, build.env))
        url = f"http://127.0.0.1:{port}/mcp"
        targets.append(http_load.HttpTarget(f"{build.label}{suffix}", url, guard, note, keyed=suffix == " · stateless"))
    return targets


async def _startup(run: Run, task: TaskID) -> None:
    from benchmarks import startup

    case = "spawn to initialize · mcp-server-time"
    server = startup.time_server_command()
    if server is None:
        run.skip("startup", case, DIRECT, "mcp-server-time is not installed (pip install '.[test]')")
        return
    vias = [Via(DIRECT, server), *(Via(build.label, build.command(server), build.env) for build in run.builds)]
    run.rows += await startup.measure(vias, run.size.startup_rounds, run.log, run.advancer(task))

    def http_guard(build: GuardBuild) -> Callable[[int], Via]:
        return lambda port: Via(build.label, build.http_stdio_command(port, server), build.env)

    run.rows += await startup.measure_http(
        [http_guard(build) for build in run.builds], run.size.startup_rounds, run.log
    )
    everything_http = everything_command("streamableHttp")
    if everything_http is None:
        run.skip("startup", startup.RELAY_CASE, DIRECT, EVERYTHING_MISSING)
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    async with background_server(everything_http, port, run.log, {"PORT": str(port)}):

        def relay(build: GuardBuild) -> Callable[[int], Via]:
            return lambda guard_port: Via(build.label, build.http_command(guard_port, url), build.env)

        vias = [relay(build) for build in run.builds]
        run.rows += await startup.measure_http(vias, run.size.startup_rounds, run.log, startup.RELAY_CASE)


async def _profile(run: Run, task: TaskID) -> None:
    from benchmarks import guard_profile

    echo, fixture_echo, large = _cases(run.size)
    everything = everything_command()
    small = (everything, echo) if everything is not None else (fixture_command(), fixture_echo)
    profiled = [
        (*small, run.size.profile_calls),
        (fixture_command(), large, max(3, run.size.profile_calls // 30)),
    ]
    for upstream, case, calls in profiled:
        shorter = replace(case, calls=calls, warmup=max(case.warmup // 5, 1))
        stats_file = run.out.with_suffix(f".{case.tool}.pstats")
        run.profiles.append(
            await guard_profile.profile(
                run.builds[0], upstream, shorter, stats_file=stats_file, errlog=run.log, advance=run.advancer(task)
            )
        )


# --- the run ---------------------------------------------------------------------------------


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _output(command: Sequence[str]) -> str | None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    except OSError:
        return None
    return done.stdout.strip() or None


def describe_machine() -> dict[str, Any]:
    """What the numbers depend on: CPU, load, interpreter, library versions, revision."""
    cpu = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    dirty = bool(_output(["git", "status", "--porcelain", "--", "src"]))
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 1e9, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "node": _output(["node", "--version"]),
        "mcp": _version("mcp"),
        "mcp_loop_guard": _version("mcp-loop-guard"),
        "commit": _output(["git", "rev-parse", "--short", "HEAD"]),
        "src_modified": dirty,
        "peers": {peer.name: peer.requirement for peer in PEERS},
    }


def _install_peers(wanted: bool, console: Console) -> dict[str, str | None]:
    skips: dict[str, str | None] = {}
    for peer in PEERS:
        if not wanted:
            skips[peer.name] = NO_PEERS
            continue
        with console.status(f"installing {peer.requirement} into {peer.venv.relative_to(REPO_ROOT)} (first run only)"):
            skips[peer.name] = peer.install()
    return skips


async def _run_all(run: Run, only: Sequence[str]) -> None:
    size = run.size
    steps: dict[str, tuple[int, Callable[[Run, TaskID], Awaitable[Any]]]] = {
        "fingerprint": (4, _fingerprint),
        "memory": (size.detector_calls + size.idle_sessions * (1 + 3 * len(run.builds)), _memory),
        "startup": (size.startup_rounds, _startup),
        "stdio": (2 * (size.echo_calls + size.echo_warmup) + size.large_calls + size.large_warmup, _stdio),
        "remote": (size.echo_calls + size.echo_warmup, _remote),
        "http": (size.http_rounds * 4, _http),
        "profile": (size.profile_calls + max(3, size.profile_calls // 30), _profile),
    }
    for name, (total, scenario) in steps.items():
        if name not in only:
            continue
        task = run.progress.add_task(name, total=total)
        try:
            await scenario(run, task)
        # Any failure is recorded, its traceback logged, the exit status set; the other scenarios still run.
        except Exception as exc:
            run.failures.append(f"{name}: {exc!r}")
            traceback.print_exc(file=run.log)
            run.skip(name, "(scenario)", "-", f"failed: {exc!r} (traceback in the log)")
        run.progress.update(task, completed=run.progress.tasks[task].total)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected scenarios; 0 when all ran (skips included), 1 when one failed."""
    args = _parser().parse_args(argv)
    size = SIZES[args.size]
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # logs and CI: wide tables rather than wrapped cells
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out: Path = args.out or BENCH_DIR / "results" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.with_suffix(".log")
    peers_wanted = args.peers if args.peers is not None else size.name == "full"
    meta = describe_machine()
    meta.update(size=size.name, command=" ".join(["python -m benchmarks.run", *(argv or sys.argv[1:])]))
    with scratch_dir() as scratch, log_path.open("w", encoding="utf-8") as log:
        builds = guard_builds(args.guard or [WORKTREE], Path(scratch))
        if builds[0].pythonpath:
            sys.path.insert(0, builds[0].pythonpath)  # in-process scenarios measure the same revision
        meta["guards"] = [build.label for build in builds]
        skips = _install_peers(peers_wanted, console)
        progress = Progress(
            TextColumn("{task.description:>12}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        run = Run(size, builds, skips, log, out, progress)
        with progress:
            anyio.run(_run_all, run, args.only or SCENARIOS)
    meta["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report = Report(meta, run.rows, profiles=run.profiles)
    for build in builds:
        checks = evaluate(report, build.label)
        if len(builds) > 1:
            checks = [replace(check, goal=f"{build.label}: {check.goal}") for check in checks]
        report.checks += checks
    print_report(report, console)
    report.write(out)
    if args.markdown:
        args.markdown.write_text(markdown(report), encoding="utf-8")
    console.print(f"results: {out}  (children's stderr: {log_path})")
    for failure in run.failures:
        console.print(f"[red]failed[/] {failure}")
    return EXIT_FAILED if run.failures else 0


if __name__ == "__main__":
    sys.exit(main())
