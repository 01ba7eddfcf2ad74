"""A client that talks to the guard in raw JSON-RPC lines over its real stdin and stdout.

The SDK client only sends well-formed messages and hides malformed replies; these
tests need to send anything (broken JSON, huge lines, reused ids) and to see every
line the guard writes back, exactly.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import psutil

from tests.harness import command_process, describe, exit_status, read_json_lines, spawn_guard

PROTOCOL_VERSION = "2025-11-25"
"""The handshake-era protocol version the raw client asks for."""

Message = dict[str, Any]


def is_response(message: Mapping[str, Any], request_id: object) -> bool:
    """Whether a message is the response (result or error) to the request with this id."""
    if "method" in message or "id" not in message:
        return False
    found = message["id"]
    # In Python 1 == True; a JSON-RPC id of 1 is not answered by true.
    return bool(found == request_id) and type(found) is type(request_id)


def received(log: Path) -> list[Message]:
    """The messages a line-server fixture received, in order (its log of ``{"t", "message"}`` lines)."""
    return [entry["message"] for entry in read_json_lines(log) if "message" in entry]


def error_code(message: Mapping[str, Any]) -> int | None:
    """The error code of an error response, None for anything else."""
    error = message.get("error")
    return error.get("code") if isinstance(error, dict) else None


def result_texts(message: Mapping[str, Any]) -> list[str]:
    """The texts of a tools/call response's text content items."""
    result = message.get("result") or {}
    return [item["text"] for item in result.get("content") or [] if item.get("type") == "text"]


@dataclass
class RawGuard:
    """The guard as a child process, with every line it writes on stdout kept in order."""

    process: anyio.abc.Process
    stderr: Path
    marker: str
    messages: list[Message] = field(default_factory=list)
    """Every JSON object the guard wrote on stdout, in order."""
    unparsable: list[bytes] = field(default_factory=list)
    """Lines on the guard's stdout that were not JSON objects (there must be none)."""
    eof: bool = False
    _changed: anyio.Event = field(default_factory=anyio.Event)
    _ids: int = 0

    # --- writing

    async def send_bytes(self, data: bytes) -> None:
        """Writes bytes to the guard's stdin as they are."""
        assert self.process.stdin is not None
        await self.process.stdin.send(data)

    async def send_line(self, line: bytes | str) -> None:
        """Writes one line (a newline is added)."""
        data = line.encode() if isinstance(line, str) else line
        await self.send_bytes(data + b"\n")

    async def send(self, message: Mapping[str, Any]) -> None:
        """Writes one message as a compact JSON line."""
        await self.send_line(json.dumps(message, separators=(",", ":")))

    def new_id(self) -> str:
        """A request id not used before in this session."""
        self._ids += 1
        return f"raw-{self._ids}"

    async def close_stdin(self) -> None:
        """Closes the guard's stdin, as a client does when it is done."""
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    # --- reading

    async def _read(self) -> None:
        assert self.process.stdout is not None
        pending = bytearray()
        scan = 0
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async for chunk in self.process.stdout:
                scan = len(pending)
                pending += chunk
                while (end := pending.find(b"\n", scan)) >= 0:
                    self._take(bytes(pending[:end]))
                    del pending[: end + 1]
                    scan = 0
        if pending:
            self._take(bytes(pending))
        self.eof = True
        self._wake()

    def _take(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict):
            self.messages.append(message)
        else:
            self.unparsable.append(line[:500])
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[Message], bool], *, start: int = 0, within: float = 10) -> Message:
        """The first message at or after index ``start`` matching predicate, waiting up to ``within`` seconds."""
        with anyio.fail_after(within):
            while True:
                for index in range(start, len(self.messages)):
                    if predicate(self.messages[index]):
                        return self.messages[index]
                start = max(start, len(self.messages))
                if self.eof:
                    msg = f"the guard closed its stdout; stderr:\n{self.stderr_text()}"
                    raise AssertionError(msg)
                await self._changed.wait()

    async def response(self, request_id: object, *, start: int = 0, within: float = 10) -> Message:
        """The response to the request with this id."""
        return await self.wait_for(lambda message: is_response(message, request_id), start=start, within=within)

    def responses(self, request_id: object) -> list[Message]:
        """Every response received so far to the request with this id."""
        return [message for message in self.messages if is_response(message, request_id)]

    # --- requests

    async def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, within: float = 10, **extra: Any
    ) -> Message:
        """Sends a request with a fresh id and returns its response."""
        request_id = self.new_id()
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        message.update(extra)
        start = len(self.messages)
        await self.send(message)
        return await self.response(request_id, start=start, within=within)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        """Sends a notification."""
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self.send(message)

    async def call_tool(self, name: str, arguments: Mapping[str, Any], *, within: float = 10) -> Message:
        """Sends a tools/call and returns its response."""
        return await self.request("tools/call", {"name": name, "arguments": dict(arguments)}, within=within)

    async def initialize(self, *, within: float = 20) -> Message:
        """The 2025-11-25 handshake: initialize, then notifications/initialized."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "mcp-loop-guard-reliability", "version": "0"},
        }
        answer = await self.request("initialize", params, within=within)
        assert "result" in answer, answer
        await self.notify("notifications/initialized")
        return answer

    async def assert_serving(self) -> None:
        """Asserts the session goes on: a normal tools/call still gets its normal result."""
        text = f"still serving {self.new_id()}"
        answer = await self.call_tool("echo", {"text": text})
        assert result_texts(answer) == [text], answer

    # --- the process

    def stderr_text(self) -> str:
        """What the guard and its upstream wrote to stderr so far."""
        return self.stderr.read_text(encoding="utf-8", errors="replace") if self.stderr.exists() else ""

    def guard_lines(self) -> list[str]:
        """The guard's own log lines (its upstream's stderr left out)."""
        return [line for line in self.stderr_text().splitlines() if line.startswith("mcp-loop-guard:")]

    def family(self) -> list[psutil.Process]:
        """The guard and every live process below it."""
        try:
            root = command_process(self.process.pid)
            found = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        return [process for process in found if _alive(process)]

    def upstream(self) -> psutil.Process:
        """The guard's upstream process (its only direct child)."""
        children = [child for child in command_process(self.process.pid).children() if _alive(child)]
        assert len(children) == 1, describe(children)
        return children[0]

    def signal(self, signum: signal.Signals) -> None:
        """Sends a signal to the guard process alone (not its group), as a client does: with kill(2).

        Not with ``Process.send_signal``: that polls the process first (``waitpid``), so it reaps
        a guard that has just exited before the event loop's child watcher does; the watcher then
        finds no child and reports status 255 instead of the guard's own.

        Raises:
            ProcessLookupError: the guard is gone.
        """
        if self.process.returncode is None:
            os.kill(self.process.pid, signum)

    async def wait_exit(self, within: float) -> int:
        """Waits up to ``within`` seconds for the guard to exit; returns its exit status."""
        with anyio.fail_after(within):
            return await exit_status(self.process)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@asynccontextmanager
async def open_raw_guard(
    command: Sequence[str],
    *,
    marker: str,
    stderr: Path,
    guard_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    initialize: bool = True,
) -> AsyncIterator[RawGuard]:
    """Starts the guard in front of command and yields a raw client on its stdio, initialized unless told not to."""
    async with AsyncExitStack() as stack:
        process = await spawn_guard(stack, command, guard_args, marker=marker, env=env, stderr=stderr)
        guard = RawGuard(process=process, stderr=stderr, marker=marker)
        task_group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(task_group.cancel_scope.cancel)
        task_group.start_soon(guard._read)
        if initialize:
            await guard.initialize()
        yield guard
        assert guard.unparsable == [], f"the guard wrote lines that are not JSON objects: {guard.unparsable[:3]}"


class RawConnector:
    """Starts guards with a raw client, one stderr file each, shown when the test fails."""

    def __init__(self, directory: Path, marker: str) -> None:
        self.directory = directory
        self.marker = marker
        self.stderr_files: list[Path] = []

    def __call__(
        self,
        command: Sequence[str],
        *,
        guard_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        initialize: bool = True,
    ) -> AbstractAsyncContextManager[RawGuard]:
        """The guard in front of command, with a raw client on its stdio."""
        stderr = self.directory / f"stderr-{len(self.stderr_files)}-raw-guard.log"
        self.stderr_files.append(stderr)
        return open_raw_guard(
            command, marker=self.marker, stderr=stderr, guard_args=guard_args, env=env, initialize=initialize
        )

    def report(self) -> None:
        """Copies what the guards and their upstreams wrote to stderr into the test's captured output."""
        for path in self.stderr_files:
            if path.exists() and (text := path.read_text(encoding="utf-8", errors="replace")):
                print(f"--- {path.name} ---\n{text[-20000:]}", file=sys.stderr)
