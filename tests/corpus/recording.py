"""Recording one trace: scripted agent sessions driving real MCP servers with the official SDK client.

A script gets a :class:`Take`. Each ``await take.call(...)`` issues one real ``tools/call``
to a real server process and appends one trace line; ``await take.batch(...)`` issues
several calls concurrently and gives their lines one ``batch`` value. The script reads
the outcomes to decide what to do next, as an agent would, and checks with
:meth:`Take.check` that the servers behaved as its label assumes, so a server that changes
behaviour fails the recording instead of leaving a wrong label behind.

Time in a trace is the agent's: ``at`` advances by each step's think time (seeded per
trace), not by the wall clock; only where a server reads the clock does a script wait for
real, so that the clock's answers really differ. Where the agent waits on purpose before a
call (a poll interval, a backoff delay, the wait tool or a ``sleep`` it called just before),
the script says so with ``wait``: ``at`` advances by it too, and the line records it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TextIO

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError

from tests.corpus.normalise import Normaliser
from tests.corpus.workspace import server_spec

CALL_TIMEOUT = 90.0
RESULT_KEYS = ("content", "structuredContent", "isError", "_meta")


class RecordingError(Exception):
    """A server did not behave as the script (and so its label) assumes."""


@dataclass(frozen=True)
class Label:
    """What a trace is: a loop of one family due to be refused by a line, or productive work."""

    label: Literal["loop", "productive"]
    note: str
    family: str | None = None
    due: int | None = None
    settings: dict[str, str] | None = None

    def describe(self) -> str:
        """The label in a few words, for listings."""
        return f"{self.label} {self.family or ''}".strip()

    def to_json(self) -> dict[str, Any]:
        """The label's entry in labels.json."""
        entry: dict[str, Any] = {"label": self.label}
        if self.family is not None:
            entry["family"] = self.family
            if self.label == "loop":
                entry["due"] = self.due
        if self.settings:
            entry["settings"] = self.settings
        entry["note"] = self.note
        return entry


def loop(family: str, due: int, note: str, settings: dict[str, str] | None = None) -> Label:
    """A loop label; due is the 1-based line by which a refusal (or for same_result the warning) is due."""
    return Label("loop", note, family, due, settings)


def productive(note: str, kind: str | None = None) -> Label:
    """A productive label; ``kind`` ``clock_wait`` marks polling whose only sign of waiting is the clock."""
    return Label("productive", note, kind)


@dataclass(frozen=True)
class Outcome:
    """What one call ended with: the result as wire JSON, or a JSON-RPC error."""

    result: dict[str, Any] | None
    error: dict[str, Any] | None
    line: int = field(default=0, compare=False)
    """The 1-based line of the trace the call wrote (not part of what the call ended with)."""

    @property
    def text(self) -> str:
        """The texts of the result's text items joined, or the error message."""
        if self.result is None:
            return str((self.error or {}).get("message", ""))
        return "\n".join(item["text"] for item in self.result.get("content", []) if item.get("type") == "text")

    @property
    def is_error(self) -> bool:
        """True for an isError result or a JSON-RPC error."""
        return self.result is None or bool(self.result.get("isError"))

    @property
    def data(self) -> dict[str, Any]:
        """The structuredContent (empty when there is none)."""
        return dict((self.result or {}).get("structuredContent") or {})


Script = Callable[["Take"], Awaitable[None]]


class TraceLabel(Protocol):
    """What the recorder needs of a label of either corpus."""

    @property
    def due(self) -> int | None: ...

    def describe(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Entry:
    """A registered script with its label."""

    name: str
    label: TraceLabel
    run: Script


REGISTRY: dict[str, Entry] = {}
"""The main corpus (tests/corpus/*.jsonl)."""
HARD_REGISTRY: dict[str, Entry] = {}
"""The hard cases (tests/corpus/hard/*.jsonl)."""
REGISTRIES = {"main": REGISTRY, "hard": HARD_REGISTRY}


def trace(name: str, label: TraceLabel, *, corpus: str = "main") -> Callable[[Script], Script]:
    """Registers a script as the recipe of the trace ``<name>.jsonl`` of a corpus."""
    registry = REGISTRIES[corpus]

    def register(script: Script) -> Script:
        if name in registry:
            raise ValueError(f"trace {name} is registered twice")
        registry[name] = Entry(name, label, script)
        return script

    return register


@dataclass
class Take:
    """One recording: the sessions opened so far, the lines written, the agent's clock."""

    name: str
    root: Path
    stack: AsyncExitStack
    errlog: TextIO
    clock: float = 0.0
    lines: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[tuple[str, str], ClientSession] = field(default_factory=dict)
    annotations: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    batches: int = 0
    extra_rules: list[tuple[str, str]] = field(default_factory=list)
    marked: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.name)
        self.started = datetime.now(UTC)

    # --- the world around the agent ------------------------------------------------------

    def path(self, relative: str = "") -> str:
        """The real path of a project file, as the agent passes it to servers."""
        return str(self.root / relative) if relative else str(self.root)

    def write(self, relative: str, content: str) -> None:
        """Changes a project file behind the agent's back (another process, a build, a teammate)."""
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")

    def normalise_also(self, pattern: str, replacement: str) -> None:
        """Adds a regular-expression replacement for a value that changes at every recording."""
        self.extra_rules.append((pattern, replacement))

    @staticmethod
    def check(condition: bool, message: str) -> None:
        """Stops the recording when a server did not do what the script relies on."""
        if not condition:
            raise RecordingError(message)

    def mark(self, *outcomes: Outcome) -> None:
        """Notes the lines of these calls as occurrences of the action the label's ``repeats`` lists."""
        self.marked.extend(outcome.line for outcome in outcomes)

    # --- sessions and calls --------------------------------------------------------------

    async def _session(self, server: str, session: str) -> ClientSession:
        key = (server, session)
        if key not in self.sessions:
            spec = server_spec(server, self.root)
            params = StdioServerParameters(
                command=spec.argv[0], args=spec.argv[1:], env={**get_default_environment(), **spec.env}
            )
            read, write = await self.stack.enter_async_context(stdio_client(params, errlog=self.errlog))
            client = await self.stack.enter_async_context(ClientSession(read, write))
            with anyio.fail_after(CALL_TIMEOUT):
                await client.initialize()
                listed = await client.list_tools()
            for item in listed.tools:
                if item.annotations is not None:
                    dumped = item.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
                    self.annotations[(server, item.name)] = dumped
            self.sessions[key] = client
        return self.sessions[key]

    def _advance(self, think: float | None, wait: float = 0.0) -> float:
        if wait:
            self.check(bool(self.lines) and wait > 0, "a wait needs a call before it and a positive length")
            self.clock += wait
        if self.lines:
            self.clock += round(think if think is not None else self.rng.uniform(1.5, 6.0), 1)
        return round(self.clock, 3)

    def _line(
        self, server: str, session: str, tool: str, arguments: dict[str, Any], at: float, *, wait: float = 0.0
    ) -> dict[str, Any]:
        line: dict[str, Any] = {"session": session, "tool": tool, "arguments": arguments, "server": server}
        annotations = self.annotations.get((server, tool))
        if annotations:
            line["annotations"] = annotations
        line["at"] = at
        if wait:
            line["wait"] = wait
        self.lines.append(line)
        return line

    async def _send(
        self, client: ClientSession, tool: str, arguments: dict[str, Any], line: dict[str, Any], number: int
    ) -> Outcome:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name=tool, arguments=arguments))
        try:
            with anyio.fail_after(CALL_TIMEOUT):
                result = await client.send_request(request, types.CallToolResult)
        except MCPError as error:
            line["error"] = {"code": error.error.code, "message": error.error.message}
            return Outcome(None, line["error"], number)
        dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        line["result"] = {key: dumped[key] for key in RESULT_KEYS if key in dumped}
        return Outcome(line["result"], None, number)

    async def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        session: str = "s1",
        think: float | None = None,
        pause: float = 0.0,
        wait: float = 0.0,
    ) -> Outcome:
        """Issues one tools/call.

        think is the agent's seconds of thinking since its previous call, wait its seconds of
        waiting on purpose before this call (both on the agent's clock), pause a real wait.
        """
        client = await self._session(server, session)
        if pause:
            await anyio.sleep(pause)
        line = self._line(server, session, tool, dict(arguments or {}), self._advance(think, wait), wait=wait)
        return await self._send(client, tool, line["arguments"], line, len(self.lines))

    async def batch(
        self,
        calls: Sequence[tuple[str, str, dict[str, Any]]],
        *,
        session: str = "s1",
        think: float | None = None,
        wait: float = 0.0,
    ) -> list[Outcome]:
        """Issues calls concurrently, as one model response asking for several tools at once."""
        clients = [await self._session(server, session) for server, _, _ in calls]
        at = self._advance(think, wait)
        self.batches += 1
        first = len(self.lines) + 1
        lines = [self._line(server, session, tool, dict(arguments), at, wait=wait) for server, tool, arguments in calls]
        for line in lines:
            line["batch"] = self.batches
        outcomes: list[Outcome | None] = [None] * len(calls)

        async def one(index: int) -> None:
            outcomes[index] = await self._send(
                clients[index], lines[index]["tool"], lines[index]["arguments"], lines[index], first + index
            )

        async with anyio.create_task_group() as group:
            for index in range(len(calls)):
                group.start_soon(one, index)
        return [outcome for outcome in outcomes if outcome is not None]

    def finished_lines(self) -> Iterable[str]:
        """The trace's lines as JSON, normalised; ``server`` only when the trace has several."""
        normaliser = Normaliser(self.name, self.root, self.started, extra=self.extra_rules)
        several = len({line["server"] for line in self.lines}) > 1
        for line in self.lines:
            shown = normaliser.line(line)
            if not several:
                del shown["server"]
            yield json.dumps(shown, ensure_ascii=False)
