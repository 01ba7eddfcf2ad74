"""The sessions of an HTTP guard in front of one shared stdio server: each one's relay, streams and agent.

A session is the guard's own (it gives the ``Mcp-Session-Id``): a message relay
(:class:`~mcp_loop_guard.proxy.relay.pipe.Pipe`) whose upstream is the session's view of the
shared child, or an upstream session of its own. What the relay sends the client goes to the event log of the request it
belongs to (an answer, its progress, a request the child made meanwhile), or else to the
session's GET stream's log; a log is written out as one response's event stream, and what a
cut stream missed is there for the client to resume (:mod:`.event_log`). A session the guard
ends (aborted, deleted, expired, evicted) answers 404 from then on and its streams close
once what they hold is out.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from mcp_loop_guard.metrics import Metrics
from mcp_loop_guard.plan import Plan
from mcp_loop_guard.proxy.downstream.http.agents import Agents
from mcp_loop_guard.proxy.downstream.http.event_log import EventLog
from mcp_loop_guard.proxy.downstream.session_table import SessionTable
from mcp_loop_guard.proxy.relay.pipe import Pipe
from mcp_loop_guard.proxy.upstream.mux_view import MuxView
from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message, RequestId

__all__ = ["MuxedSession", "MuxedSessions", "Stream"]

logger = logging.getLogger(__name__)

Stream = MemoryObjectSendStream[bytes]
LOGS_KEPT = 16
"""Request logs a session keeps for resuming, besides those being written out (the oldest go first)."""
SNIFF_LIMIT = 1 << 16
"""Lines up to this size are parsed to route them; a larger one is an answer, found by its id."""


def stream_pair() -> tuple[Stream, anyio.abc.ObjectReceiveStream[bytes]]:
    """A stream of lines for one HTTP response (unbounded: the relay never waits on a slow client)."""
    return anyio.create_memory_object_stream[bytes](math.inf)


@dataclass(eq=False)
class MuxedSession:
    """One client session: its relay, the event logs its lines go to, and its use."""

    session_id: bytes
    token: str
    view: MuxView | None
    """The session's share of the one child, for a relay in front of a shared child."""
    pipe: Pipe | None = None
    on_retire: Callable[[], None] | None = None
    """What lets the upstream go when the session ends (the child's share, or a connection of its own)."""
    running: anyio.Event | None = None
    """Set once the session's upstream runs (its first message waits for it)."""
    streams: dict[RequestId, EventLog] = field(default_factory=dict)
    """Each request's event log, until its answer is in."""
    logs: dict[int, EventLog] = field(default_factory=dict)
    """Request logs not yet written to their end, oldest first: a GET may resume one whose stream was cut."""
    progress: dict[object, RequestId] = field(default_factory=dict)
    """The client's progress tokens -> the request each came with."""
    kept_listener: EventLog | None = None
    """The GET stream's log, once something went to it."""
    sse_out: Stream | None = None
    """A legacy SSE session's one event stream."""
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0
    kind: str = "session"
    """``session`` (streamable HTTP: a stream per request) or ``sse`` (legacy SSE: one stream for everything)."""
    streams_opened: int = 0

    @property
    def listener(self) -> EventLog:
        """The GET stream's log: what belongs to no request, kept while no GET stream is open too."""
        if self.kept_listener is None:
            self.kept_listener = EventLog(0)
        return self.kept_listener

    @property
    def short(self) -> str:
        """The id's first characters, for logs."""
        return self.session_id[:8].decode("latin-1")

    def opened(self, message: Message) -> EventLog:
        """A request of the client's: the log its lines go to."""
        ident = message.id
        assert ident is not None
        self.streams_opened += 1
        log = self.streams[ident] = self.logs[self.streams_opened] = EventLog(self.streams_opened)
        if len(self.logs) > LOGS_KEPT:
            for number in [n for n, kept in self.logs.items() if not kept.following][: len(self.logs) - LOGS_KEPT]:
                del self.logs[number]
        params = message.body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and "progressToken" in meta:
            self.progress[meta["progressToken"]] = ident
        return log

    def closed(self, ident: RequestId) -> None:
        """The request is over (answered, or its client went away for good): its log takes nothing more."""
        log = self.streams.pop(ident, None)
        if log is not None:
            log.end()
        for token, request in list(self.progress.items()):
            if request == ident:
                del self.progress[token]

    def delivered(self, log: EventLog) -> None:
        """A request's log was written to its end: nothing is left to resume."""
        self.logs.pop(log.number, None)

    async def send(self, line: bytes) -> None:
        """One line of the relay's for the client, to the log it belongs to (dropped when none will be read)."""
        if self.kind == "sse":
            _put(self.sse_out, line)
            return
        ident, kind, token = _sniff(line)
        log: EventLog | None
        if kind == "response":
            log = self.streams.get(ident) if ident is not None else None
            if log is not None:
                log.put(line)
                self.closed(ident)  # type: ignore[arg-type]
                return
        elif kind == "progress":
            request = self.progress.get(token)
            log = self.streams.get(request) if request is not None else None
            log = log or self._open_listener()
        elif kind == "request":
            # The child asked while this session's requests were open: on the newest one's stream,
            # as a server that knows which request it asks for would send it.
            log = self._newest(followed=True) or self._open_listener() or self._newest(followed=False)
        elif self.session_id:  # kept in the GET stream's log when no stream is open, for the GET stream when it opens
            log = self._open_listener() or self._newest(followed=True) or self.listener
        else:  # a request without a session (no GET stream): its own, even before its stream is written
            log = self._newest(followed=False)
        if log is None:
            logger.debug("session %s: no open stream for a %s; dropped", self.short, kind)
            return
        log.put(line)

    def _open_listener(self) -> EventLog | None:
        listener = self.kept_listener
        return listener if listener is not None and listener.following else None

    def _newest(self, *, followed: bool) -> EventLog | None:
        """The newest request's log (being written to a client, if ``followed``)."""
        for log in reversed(self.streams.values()):
            if log.following or not followed:
                return log
        return None

    def close_streams(self) -> None:
        """End every log (what they hold still goes out to a stream writing them)."""
        for ident in list(self.streams):
            self.closed(ident)
        self.logs.clear()
        if self.kept_listener is not None:
            self.kept_listener.end()
        if self.sse_out is not None:
            self.sse_out.close()
            self.sse_out = None


def _put(stream: Stream | None, line: bytes) -> None:
    """A line onto a response's stream; dropped when its client has gone (the response ended meanwhile)."""
    if stream is None:
        return
    try:
        stream.send_nowait(line)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        logger.debug("a line for a response whose client has gone was dropped")


def _sniff(line: bytes) -> tuple[RequestId | None, str, object]:
    """What a line is (``response``, ``progress``, ``request``, ``notification``), its id and progress token."""
    if len(line) > SNIFF_LIMIT:
        return wire.response_id(line), "response", None
    parsed = wire.parse(line.rstrip(b"\n"))
    if not isinstance(parsed, Message):
        return None, "notification", None
    if parsed.is_response:
        return parsed.id, "response", None
    if parsed.is_request:
        return parsed.id, "request", None
    if parsed.method == "notifications/progress":
        params = parsed.body.get("params")
        return None, "progress", params.get("progressToken") if isinstance(params, dict) else None
    return None, "notification", None


class MuxedSessions:
    """Every session of the guard, in its one session table (:mod:`..session_table`), with their agents' keys."""

    def __init__(self, plan: Plan, agents: Agents, metrics: Metrics) -> None:
        """Agents are made with ``agents``' store and event log."""
        self.plan = plan
        self.agents = agents
        self.table: SessionTable[MuxedSession] = SessionTable(plan.settings.max_sessions, metrics.sessions)

    @property
    def live(self) -> OrderedDict[bytes, MuxedSession]:
        """The live sessions, least recently used first."""
        return self.table.live

    def lookup(self, session_id: bytes, token: str) -> MuxedSession | None:
        """The live session with this id, opened with this token; None: the client gets 404."""
        return self.table.lookup(session_id, token)

    def new(self, token: str, view: MuxView | None, *, kind: str = "session") -> MuxedSession:
        """A session for an ``initialize`` (or a legacy SSE connection)."""
        session = MuxedSession(secrets.token_hex(16).encode(), token, view, kind=kind)
        self.table.add(session)
        return session

    def key(self, session: MuxedSession) -> str:
        """The session's agent key in the store."""
        return f"{session.kind}:{session.token or '-'}/{session.session_id.decode('latin-1')}"

    def retire(self, session: MuxedSession) -> bool:
        """End a session: 404 from now on, streams closed; False when it had ended already."""
        if not self.table.end(session):
            return False
        session.close_streams()
        if session.on_retire is not None:
            session.on_retire()
        return True
