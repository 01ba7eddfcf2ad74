"""Every command the docs show is run: the fenced sh, bash and console blocks of README.md, CONTRIBUTING.md and
docs/*.md, each block in a sandbox of its own.

The sandbox: a temporary home with its XDG folders (client configs are seeded there for ``wrap
--client``), a working directory holding the repository's files (``docs/`` and ``configs/``
copied, so a command may write there; the rest linked), this virtualenv first on ``PATH`` and
as ``.venv`` (before it only ``mcp-loop-guard``, ``mcp-server-time`` and ``mcp-server-git``,
which run as forks of the test's fork servers, as everywhere in the tests: the same code,
started without its imports; the console script itself runs in the wrap and client tests).
A block's commands run in order, each through bash with its input closed and a time limit,
and must exit 0. A serving guard is started and stopped once ready: over stdio with its input
closed (exit 0), over HTTP on a free port (the port the docs show is mapped to it in the
block's later commands) until ``/readyz`` answers 200, then SIGTERM at the end of the block
(exit 0 or 143). In console blocks each output line shown (``…`` for any text, ``...`` for
lines left out) must be a line of what the command printed. A block marked ``<!-- not run:
REASON -->`` just above is left out, with its
reason; any other block runs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import pytest

from mcp_loop_guard.wrap.clients import CLIENTS, paths
from tests.docs_text import SHELL_LANGUAGES, Block, blocks, docs_files
from tests.harness import MARKER_ENV, REPO_ROOT, guard_argv, pypi_server_command
from tests.http_harness import LOCALHOST, free_port, wait_answering

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

COMMAND_LIMIT = 180.0
"""Seconds one command may take: the detection benchmark and the demo take seconds; a loaded machine more."""
START_LIMIT = 90.0
"""Seconds a serving guard may take to be ready."""
STOP_LIMIT = 30.0
SUBCOMMANDS = frozenset({"wrap", "unwrap", "replay", "state", "demo"})
COPIED = frozenset({"docs", "configs"})
"""Folders a docs command may write into: copied into the sandbox, never linked."""
DOCS_PORT = "8080"
"""The port the docs show; a serving guard's real port stands in for it."""
ELIDED = frozenset({"...", "…"})
PYPI_SERVERS = ("mcp-server-time", "mcp-server-git")
"""Servers the docs' commands start: each runs as the tests run it, a fork of the fork server (see prefork.py)."""

SEED_JSON = """{
  "mcpServers": {
    "git": {
      "command": "uvx",
      "args": ["mcp-server-git", "--repository", "/home/me/project"]
    }
  }
}
"""
"""What a client config seeded in the sandbox's home holds (the README shows wrap's diff of it)."""
SEED_TOML = '[mcp_servers.git]\ncommand = "uvx"\nargs = ["mcp-server-git", "--repository", "/home/me/project"]\n'
"""The same for Codex."""


@dataclass(frozen=True)
class Step:
    """One command of a block, and the output lines the docs show under it."""

    command: str
    shown: tuple[str, ...] = ()


@dataclass
class Sandbox:
    """One block's home, working directory and environment."""

    root: Path
    env: dict[str, str]
    cwd: Path
    ports: dict[str, str] = field(default_factory=dict)
    """Ports the docs show, mapped to the ports the block's guards listen on."""


def _shell_blocks() -> list[Block]:
    return [block for path in docs_files() for block in blocks(path) if block.language in SHELL_LANGUAGES]


def _steps(block: Block) -> list[Step]:
    """The commands of a block, continuation lines joined; in console blocks with the output shown under each."""
    steps: list[Step] = []
    pending = ""
    if block.language != "console":
        for line in block.lines:
            pending += line.rstrip()
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            if pending.strip() and not pending.lstrip().startswith("#"):
                steps.append(Step(pending.strip()))
            pending = ""
        return steps
    command: str | None = None
    shown: list[str] = []
    for line in block.lines:
        if command is not None and command.endswith("\\"):
            command = command[:-1] + " " + line.strip()
        elif line.startswith("$ "):
            if command is not None:
                steps.append(Step(command, tuple(shown)))
            command, shown = line[2:].strip(), []
        elif command is not None:
            shown.append(line)
    if command is not None:
        steps.append(Step(command, tuple(shown)))
    return steps


def _normal(line: str) -> str:
    return " ".join(line.split())


def _shown_pattern(line: str) -> re.Pattern[str]:
    """A shown output line as a pattern: spaces loosened, ``…`` standing for any text."""
    return re.compile(".*".join(re.escape(part) for part in _normal(line).split("…")))


def _missing(shown: tuple[str, ...], output: str) -> list[str]:
    """The shown lines that are no line of the output."""
    printed = [_normal(line) for line in output.splitlines()]
    wanted = [line for line in shown if line.strip() and line.strip() not in ELIDED]
    return [line for line in wanted if not any(_shown_pattern(line).fullmatch(out) for out in printed)]


def _sandbox(root: Path, marker: str) -> Sandbox:
    home, work = root / "home", root / "work"
    work.mkdir(parents=True)
    for entry in REPO_ROOT.iterdir():
        if entry.name == ".venv":
            continue
        if entry.name in COPIED:
            shutil.copytree(entry, work / entry.name)
        else:
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(Path(sys.prefix))
    shims = root / "bin"
    shims.mkdir()
    forked = {server: pypi_server_command(server) for server in PYPI_SERVERS} | {"mcp-loop-guard": guard_argv()}
    for name, command in forked.items():
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    folders = {
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_STATE_HOME": home / ".local" / "state",
        "XDG_DATA_HOME": home / ".local" / "share",
        "XDG_CACHE_HOME": home / ".cache",
    }
    for folder in folders.values():
        folder.mkdir(parents=True)
    env = {name: value for name, value in os.environ.items() if not name.startswith(("LOOP_GUARD_", "OTEL_"))}
    for name in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "APPDATA", "PYTEST_ADDOPTS", "VIRTUAL_ENV"):
        env.pop(name, None)
    env |= {name: str(folder) for name, folder in folders.items()}
    env |= {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(shims), str(Path(sys.executable).parent), env.get("PATH", "")]),
        "COLUMNS": "120",
        "PYTHONUNBUFFERED": "1",
        MARKER_ENV: marker,
    }
    return Sandbox(root, env, work)


def _seed_clients(sandbox: Sandbox, command: str) -> None:
    """A client config in the sandbox's home for each ``--client`` a command names, unless one is there."""
    for key in re.findall(r"--client[= ](\S+)", command):
        client = CLIENTS[key]
        target = paths(client, "user", home=Path(sandbox.env["HOME"]), cwd=sandbox.cwd, environ=sandbox.env)[0]
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if key == "codex":
            target.write_text(SEED_TOML, encoding="utf-8")
        else:
            seed = SEED_JSON.replace('"mcpServers"', '"servers"') if key == "vscode" else SEED_JSON
            target.write_text(seed, encoding="utf-8")


def _serving(command: str) -> tuple[dict[str, str], list[str]] | None:
    """The assignments and argv of a command that starts a guard serving (not a subcommand, help or version)."""
    words = shlex.split(command.removesuffix("&").strip(), comments=True)
    assignments: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        assignments[name] = value
    if not words or Path(words[0]).name != "mcp-loop-guard":
        return None
    own = words[1 : words.index("--")] if "--" in words else words[1:]
    if (own and own[0] in SUBCOMMANDS) or {"-h", "--help", "--version"} & set(own):
        return None
    return assignments, words


async def _run(sandbox: Sandbox, step: Step) -> None:
    """Runs one command through bash and checks its exit status and the output the docs show."""
    command = step.command
    for shown, real in sandbox.ports.items():
        command = command.replace(f":{shown}", f":{real}").replace(f"--port {shown}", f"--port {real}")
    with anyio.fail_after(COMMAND_LIMIT):
        done = await anyio.run_process(
            ["bash", "-o", "pipefail", "-c", command], cwd=sandbox.cwd, env=sandbox.env, input=b"", check=False
        )
    output = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"`{step.command}` exited with status {done.returncode}:\n{output[-3000:]}"
    missing = _missing(step.shown, output)
    assert not missing, f"`{step.command}` did not print:\n" + "\n".join(missing) + f"\n--- it printed:\n{output}"


async def _serve(
    sandbox: Sandbox, step: Step, assignments: dict[str, str], argv: list[str], stack: AsyncExitStack
) -> None:
    """Starts a serving guard: over stdio it runs with its input closed; over HTTP it stays up until the block ends."""
    env = sandbox.env | assignments
    executable = shutil.which(argv[0], path=env["PATH"])
    assert executable, f"`{argv[0]}` is not on the sandbox's PATH"
    argv = [executable, *argv[1:]]
    own = argv[1 : argv.index("--")] if "--" in argv else argv[1:]
    transport = own[own.index("--transport") + 1] if "--transport" in own else "stdio"
    if transport == "stdio":
        with anyio.fail_after(START_LIMIT):
            done = await anyio.run_process(argv, cwd=sandbox.cwd, env=env, input=b"", check=False)
        assert done.returncode == 0, f"`{step.command}` with its input closed: {done.returncode}\n{done.stderr!r}"
        return
    port = str(free_port())
    if "--port" in own:
        at = argv.index("--port") + 1
        sandbox.ports[argv[at]] = port
        argv[at] = port
    else:
        sandbox.ports[DOCS_PORT] = port
        argv[1:1] = ["--port", port]
    log = sandbox.root / f"guard-{port}.log"
    with log.open("wb") as stderr:
        process = await anyio.open_process(
            argv, cwd=sandbox.cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
        )
    stack.push_async_callback(_stop, process, step.command, log)

    def output() -> str:
        return log.read_text(encoding="utf-8", errors="replace")

    ready = f"http://{LOCALHOST}:{port}/readyz"
    await wait_answering(ready, process, output, lambda status: status == 200, START_LIMIT)


async def _stop(process: anyio.abc.Process, command: str, log: Path) -> None:
    """SIGTERM to a serving guard; it must exit by itself, 0 or 143."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    try:
        with anyio.fail_after(STOP_LIMIT):
            status = await process.wait()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    text = await anyio.Path(log).read_text(encoding="utf-8", errors="replace")
    assert status in (0, 128 + signal.SIGTERM), f"`{command}` stopped by SIGTERM: status {status}\n{text[-3000:]}"


SHELL_BLOCKS = _shell_blocks()
RUN = [block for block in SHELL_BLOCKS if block.not_run is None]


def test_every_shell_block_is_run_or_says_why_not() -> None:
    """Each shell block is run by this test unless a `<!-- not run: REASON -->` line just above gives a reason."""
    assert RUN, "no runnable shell block found in the docs"
    for block in SHELL_BLOCKS:
        assert block.not_run is None or len(block.not_run) > 10, f"{block.name}: give the reason it is not run"
        assert _steps(block), f"{block.name}: a shell block without a command"


def test_console_blocks_show_commands_after_a_prompt() -> None:
    """A console block starts with a `$ ` command line, so no command is taken for output."""
    for block in SHELL_BLOCKS:
        if block.language == "console":
            assert block.lines, f"{block.name}: an empty console block"
            assert block.lines[0].startswith("$ "), f"{block.name}: starts without `$ `"


@pytest.mark.timeout(COMMAND_LIMIT * 4)
@pytest.mark.parametrize("block", RUN, ids=lambda block: block.name)
async def test_the_commands_of_a_block_run_as_shown(block: Block, tmp_path: Path, process_marker: str) -> None:
    """The block's commands run in a fresh sandbox: each exits 0 and prints what the docs show under it."""
    sandbox = _sandbox(tmp_path, process_marker)
    async with AsyncExitStack() as stack:
        for step in _steps(block):
            if export := re.fullmatch(r"export ([A-Za-z_][A-Za-z0-9_]*)=(\S*)", step.command):
                sandbox.env[export[1]] = shlex.split(export[2])[0] if export[2] else ""
                continue
            _seed_clients(sandbox, step.command)
            if serving := _serving(step.command):
                await _serve(sandbox, step, *serving, stack)
            else:
                await _run(sandbox, step)
