"""An upstream kept connected by a supervisor: its status for ``/readyz``, and retries with backoff.

The SDK-based slots (:mod:`.pool`) and the relay's own probe of one HTTP server
(:mod:`~mcp_loop_guard.proxy.downstream.http.probe`) share this; it needs no SDK, so a relay
that never translates never loads it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import ClassVar, Literal, Self

import anyio
import anyio.abc

from mcp_loop_guard.config import HttpServer, ServerSpec, StdioServer
from mcp_loop_guard.proxy.upstream.backoff import Backoff
from mcp_loop_guard.redaction import without_urls

__all__ = ["HTTP_HANDSHAKE_TIMEOUT", "Status", "Supervised", "public_reason", "reason_of"]

logger = logging.getLogger(__name__)

Status = Literal["starting", "ready", "down"]

HTTP_HANDSHAKE_TIMEOUT = 15.0
"""Seconds an HTTP upstream may take to answer initialize (stdio ones get longer: ``npx`` may download)."""


def reason_of(error: BaseException) -> str:
    """One line saying why an upstream connection failed (never the whole traceback, nor a URL: clients read it)."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(reason_of(inner) for inner in error.exceptions[:3])
    text = str(error) or type(error).__name__
    return without_urls(text.splitlines()[0][:500])


class Supervised:
    """One configured upstream's status, kept by :meth:`supervise` (a connection, or a probe, at a time)."""

    expected: ClassVar[tuple[type[BaseException], ...]] = (OSError,)
    """How a connection normally fails: said in one line, no traceback."""

    def __init__(self, spec: ServerSpec, backoff: Backoff | None = None) -> None:
        """Not connected yet; :meth:`supervise` connects."""
        self.spec = spec
        self.name = spec.name
        self.status: Status = "starting"
        self.detail = "not connected yet"
        """Why it is down, for logs (may name the command and its last stderr lines)."""
        self.reason = "not connected yet"
        """Why it is down, for ``/readyz`` and other clients: no command line, no stderr, no secret."""
        self.restarts = 0
        self.supervised = False
        """A supervisor keeps a connection (or probe) up: its status says whether sessions should try it."""
        self._backoff = backoff or Backoff()
        self._listeners: list[Callable[[Self, bool], None]] = []

    def on_change(self, listener: Callable[[Self, bool], None]) -> None:
        """Call ``listener(slot, tools_changed)`` when it goes up or down, or comes back with other tools."""
        self._listeners.append(listener)

    def _set(self: Self, status: Status, detail: str, reason: str, *, tools_changed: bool = False) -> None:
        changed = status != self.status
        self.status, self.detail, self.reason = status, detail, reason
        if changed or tools_changed:
            for listener in list(self._listeners):
                listener(self, tools_changed)

    async def wait_settled(self, limit: float) -> None:
        """Wait until the first connection attempt has succeeded or failed."""
        with anyio.move_on_after(limit):
            while self.status == "starting":  # noqa: ASYNC110 - status changes have no single event
                await anyio.sleep(0.02)

    async def supervise(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep the connection (or the probe) up, connecting again with backoff forever."""
        self.supervised = True
        task_status.started()
        attempt = 1
        while True:
            try:
                reason = await self._serve_once()
                attempt = 1
            except Exception as exc:
                known = self._expected(exc)
                if known is None:
                    logger.warning("upstream %r failed unexpectedly", self.name, exc_info=exc)
                reason = reason_of(known or exc)
            self._lost()
            self._set("down", reason, public_reason(reason, self.spec))
            delay = self._backoff.delay(attempt)
            command = f" (command: `{self.spec.display}`)" if isinstance(self.spec, StdioServer) else ""
            logger.warning("upstream %r is down (%s)%s; reconnecting in %.1fs", self.name, reason, command, delay)
            attempt += 1
            self.restarts += 1
            await anyio.sleep(delay)

    async def _serve_once(self) -> str:
        """One connection, from opening to its end; returns why it ended."""
        raise NotImplementedError

    def _lost(self) -> None:
        """The connection ended: forget it."""

    def _expected(self, exc: BaseException) -> BaseException | None:
        """``exc``, or the first expected failure inside a group of them (task groups wrap what they raise)."""
        if isinstance(exc, self.expected):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                found = self._expected(inner)
                if found is not None:
                    return found
        return None


_EXIT = re.compile(r"exited with status -?\d+|was killed by (?:SIG[A-Z0-9]+|signal \d+)")
_HTTP_STATUS = re.compile(r"\b([45]\d\d)\b")


def public_reason(reason: str, spec: ServerSpec) -> str:
    """What ``/readyz`` may say of a failure: its kind and status, never a command line, stderr line or URL."""
    lowered = reason.lower()
    found = _EXIT.search(reason)
    if found is not None:
        return found.group(0)
    for words, said in (
        ("cannot start", "cannot start its command"),
        ("did not answer initialize", "did not answer initialize"),
        ("failed a health check", "failed a health check"),
    ):
        if words in lowered:
            return said
    status = _HTTP_STATUS.search(reason) if isinstance(spec, HttpServer) else None
    if status is not None:
        return f"HTTP {status.group(1)}"
    if "refused initialize" in lowered:
        return "refused initialize"
    return "down" if isinstance(spec, StdioServer) else "unreachable"
