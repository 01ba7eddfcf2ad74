"""Traces: recorded ``tools/call`` lines, read one at a time, as ``replay`` and the benchmarks take them.

A trace is JSON Lines, one line per ``tools/call`` in the order the calls started: the
corpus format, or the event log the guard writes (``LOOP_GUARD_EVENT_LOG``). Reading is
streamed: a trace of any length costs memory for one line at a time.

Time in a trace is the agent's. ``at`` is when a call began; a line without it begins
``spacing`` seconds after the one before, plus its ``wait``: the part of a gap the agent
spent waiting on purpose (a poll interval, a backoff) rather than thinking. :func:`respace`
replays a trace as a model of another speed would have made it: every gap becomes
``spacing`` seconds of thinking plus the recorded ``wait``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["Line", "TraceError", "read_trace", "respace"]


class TraceError(ValueError):
    """A trace line that cannot be read: ``file:line: what is wrong``."""


@dataclass(frozen=True, slots=True)
class Line:
    """One recorded call, read and checked."""

    number: int
    session: str
    tool: str
    arguments: Mapping[str, Any] | None
    """None when only fingerprints were recorded (the event log's default)."""
    call: str | None
    """The recorded key fingerprint, when there are no arguments."""
    result: Mapping[str, Any] | None
    error: Mapping[str, Any] | None
    """A JSON-RPC error that answered the call instead of a result."""
    outcome: str | None
    """A recorded result fingerprint (the event log's default), with ``is_error``."""
    is_error: bool
    batch: object
    annotations: Mapping[str, Any] | None
    server: str | None
    at: float
    wait: float = 0.0
    """Seconds of the gap before this call the agent waited on purpose."""
    seq: int | None = None
    """Calls the agent had begun, this one included, when it began (event logs record it)."""
    begun: int | None = None
    """Calls the agent had begun when this line was written (at the call's end)."""
    ended: float | None = None
    loose: str | None = None
    """The recorded loose fingerprint, where it differs from ``call``."""
    waits: bool = False
    """Recorded: the call waits on purpose (event logs without arguments)."""
    writes: bool = False
    """Recorded: the call may change things (event logs without arguments)."""

    @property
    def answered(self) -> bool:
        """The trace holds what answered the call (a result, an error, or their fingerprint)."""
        return self.result is not None or self.error is not None or self.outcome is not None


def _fail(where: str, number: int, problem: str) -> TraceError:
    return TraceError(f"{where}:{number}: {problem}")


def read_trace(stream: IO[str], where: str, *, spacing: float = 1.0) -> Iterator[Line]:
    """The lines of one trace, checked, one at a time; a line without ``at`` comes ``spacing`` s after the last.

    Raises:
        TraceError: a line that is not JSON or not of the trace format, with the file and line number.
    """
    previous: Line | None = None
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            entry = json.loads(text)
        except (ValueError, RecursionError) as error:
            raise _fail(where, number, f"not JSON ({error})") from None
        if not isinstance(entry, dict):
            raise _fail(where, number, "expected a JSON object")
        together = (
            previous is not None
            and entry.get("batch") is not None
            and (entry.get("session"), entry.get("batch")) == (previous.session, previous.batch)
        )
        after = None if previous is None else previous.at if together else previous.at + spacing
        line = _line(entry, number, where, after)
        previous = line
        yield line


def _line(entry: Mapping[str, Any], number: int, where: str, after: float | None) -> Line:
    """One line, checked; ``after``: when it begins if it says not (before its ``wait``)."""
    session, tool = entry.get("session"), entry.get("tool")
    if not isinstance(session, str) or not isinstance(tool, str):
        raise _fail(where, number, '"session" and "tool" are required strings')
    arguments = entry.get("arguments", {} if "call" not in entry else None)
    if arguments is not None and not isinstance(arguments, dict):
        raise _fail(where, number, '"arguments" must be an object')
    call = entry.get("call") if arguments is None else None
    if arguments is None and not isinstance(call, str):
        raise _fail(where, number, 'give "arguments" (or "call", a recorded fingerprint)')
    result, error, outcome = entry.get("result"), entry.get("error"), entry.get("outcome")
    if result is not None and not isinstance(result, dict):
        raise _fail(where, number, '"result" must be an object (a CallToolResult)')
    if error is not None and not isinstance(error, dict):
        raise _fail(where, number, '"error" must be an object ({code, message})')
    if outcome is not None and not isinstance(outcome, str):
        raise _fail(where, number, '"outcome" must be a recorded fingerprint')
    wait = entry.get("wait", 0.0)
    if not _seconds(wait) or wait < 0:
        raise _fail(where, number, '"wait" must be a number of seconds, 0 or more')
    at = entry.get("at", (after or 0.0) + wait)
    if not _seconds(at):
        raise _fail(where, number, '"at" must be a number of seconds')
    annotations = entry.get("annotations")
    if annotations is not None and not isinstance(annotations, dict):
        raise _fail(where, number, '"annotations" must be an object')
    server = entry.get("server")
    if server is not None and not isinstance(server, str):
        raise _fail(where, number, '"server" must be a string')
    loose = entry.get("loose")
    if loose is not None and not isinstance(loose, str):
        raise _fail(where, number, '"loose" must be a recorded fingerprint')
    seq, begun, ended = _order(entry, number, where)
    return Line(
        number=number,
        session=session,
        tool=tool,
        arguments=arguments,
        call=call,
        result=result,
        error=error if result is None else None,
        outcome=outcome if result is None and error is None else None,
        is_error=entry.get("isError") is True,
        batch=entry.get("batch"),
        annotations=annotations,
        server=server,
        at=float(at),
        wait=float(wait),
        seq=seq,
        begun=begun,
        ended=ended,
        loose=loose,
        waits=entry.get("waits") is True,
        writes=entry.get("writes") is True,
    )


def _order(entry: Mapping[str, Any], number: int, where: str) -> tuple[int | None, int | None, float | None]:
    """``seq``, ``begun`` and ``ended``: where the call began among the agent's calls, and when it ended."""
    seq, begun, ended = entry.get("seq"), entry.get("begun"), entry.get("ended")
    ordered = isinstance(seq, int) and isinstance(begun, int) and _count(seq) and _count(begun) and begun >= seq
    if (seq is not None or begun is not None) and not ordered:
        raise _fail(where, number, '"seq" and "begun" must be counts, given together, with begun >= seq')
    if ended is not None and not _seconds(ended):
        raise _fail(where, number, '"ended" must be a number of seconds')
    return seq, begun, ended


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def respace(lines: Iterable[Line], spacing: float) -> Iterator[Line]:
    """The trace as a model thinking ``spacing`` seconds per call would have made it, waits kept.

    Calls of one batch (one model response) keep beginning together; a call's duration
    (``ended`` - ``at``) is kept.
    """
    clock: dict[str, float] = {}
    batches: dict[str, tuple[object, float]] = {}
    for line in lines:
        last = batches.get(line.session)
        if line.batch is not None and last is not None and last[0] == line.batch:
            at = last[1]
        else:
            previous = clock.get(line.session)
            at = 0.0 + line.wait if previous is None else previous + spacing + line.wait
        clock[line.session] = at
        batches[line.session] = (line.batch, at)
        ended = None if line.ended is None else at + max(0.0, line.ended - line.at)
        yield dataclasses.replace(line, at=at, ended=ended)
