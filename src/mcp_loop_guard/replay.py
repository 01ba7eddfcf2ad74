"""``mcp-loop-guard replay``: run the detector over recorded traces, with any settings.

A trace is JSON Lines, one line per ``tools/call`` in the order the calls started (the
format of the event log, ``LOOP_GUARD_EVENT_LOG``). Replay judges each line as the running
guard would have, with the same settings (flags, environment, ``--config``), so an operator
can record in shadow mode and see what enforcing, or other thresholds, would have done.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations, groupby
from pathlib import Path
from typing import IO, Any

from mcp_loop_guard.core import detector
from mcp_loop_guard.core.detector import Call, Outcome, Ticket
from mcp_loop_guard.core.fingerprint import call_key
from mcp_loop_guard.core.model import Action, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.scrub import PRESETS, ScrubRules
from mcp_loop_guard.core.state import DIGEST, State
from mcp_loop_guard.policies import Rules

__all__ = ["Line", "TraceError", "judge_trace", "read_trace", "suggest_scrub"]


class TraceError(ValueError):
    """A trace line that cannot be read: ``file:line: what is wrong``."""


@dataclass(frozen=True, slots=True)
class Line:
    """One recorded call, read and checked."""

    number: int
    session: str
    tool: str
    call: str
    """The call's 16-hex fingerprint (from ``arguments``, or recorded as ``call``)."""
    arguments: Mapping[str, Any] | None
    result: Mapping[str, Any] | None
    outcome: Outcome | None
    """None: the call ended without an answer (a guard fault, a cancellation)."""
    batch: object
    annotations: Mapping[str, Any] | None
    server: str | None
    at: float
    seq: int | None = None
    """Calls the agent had begun, this one included, when it began (event logs record it)."""
    begun: int | None = None
    """Calls the agent had begun when this line was written (at the call's end)."""
    ended: float | None = None


@dataclass
class Judged:
    """What the detector said about one line."""

    line: Line
    verdict: str
    """``allow``, ``warn``, ``block``, ``abort`` or ``closed`` (the session had already been aborted)."""
    rule: str | None = None
    count: int = 0


def _fail(where: str, number: int, problem: str) -> TraceError:
    return TraceError(f"{where}:{number}: {problem}")


def read_trace(stream: IO[str], where: str) -> Iterator[Line]:
    """The lines of one trace, checked.

    Raises:
        TraceError: a line that is not JSON or not of the trace format, with the file and line number.
    """
    previous = 0.0
    for number, text in enumerate(stream, start=1):
        if not text.strip():
            continue
        try:
            entry = json.loads(text)
        except ValueError as error:
            raise _fail(where, number, f"not JSON ({error})") from None
        if not isinstance(entry, dict):
            raise _fail(where, number, "expected a JSON object")
        line = _line(entry, number, previous + 1.0, where)
        previous = line.at
        yield line


def _line(entry: Mapping[str, Any], number: int, default_at: float, where: str) -> Line:
    session, tool = entry.get("session"), entry.get("tool")
    if not isinstance(session, str) or not isinstance(tool, str):
        raise _fail(where, number, '"session" and "tool" are required strings')
    arguments = entry.get("arguments", {} if "call" not in entry else None)
    if arguments is not None and not isinstance(arguments, dict):
        raise _fail(where, number, '"arguments" must be an object')
    key = entry.get("call")
    if arguments is not None:
        key = call_key(tool, arguments)[:DIGEST]
    elif not isinstance(key, str):
        raise _fail(where, number, 'give "arguments" (or "call", a recorded fingerprint)')
    result, outcome = entry.get("result"), None
    if result is not None:
        if not isinstance(result, dict):
            raise _fail(where, number, '"result" must be an object (a CallToolResult)')
    elif isinstance(entry.get("error"), dict) and "outcome" not in entry:
        error = entry["error"]
        outcome = detector.error_outcome(error.get("code"), error.get("message"))
    elif isinstance(entry.get("outcome"), str):
        outcome = Outcome(entry["outcome"], bool(entry.get("isError")))
    at = entry.get("at", default_at)
    if not _seconds(at):
        raise _fail(where, number, '"at" must be a number of seconds')
    annotations = entry.get("annotations")
    if annotations is not None and not isinstance(annotations, dict):
        raise _fail(where, number, '"annotations" must be an object')
    server = entry.get("server")
    if server is not None and not isinstance(server, str):
        raise _fail(where, number, '"server" must be a string')
    seq, begun, ended = _order(entry, number, where)
    batch = entry.get("batch")
    return Line(
        number, session, tool, key, arguments, result, outcome, batch, annotations, server, at, seq, begun, ended
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


@dataclass
class _Session:
    state: State = field(default_factory=State)
    closed: bool = False


def judge_trace(lines: Iterable[Line], policies: Rules, server: str = "") -> list[Judged]:
    """Judge every line, session by session, as the live guard would.

    A session whose lines record the order of begins (``seq`` and ``begun``, as the event log
    writes them) is replayed event by event: each call begins when the live guard began it and
    ends where its line stands. Other traces are judged batch by batch (lines sharing a
    ``batch`` begun together). ``server``: the route of lines that name none (a config's only server).
    """
    sessions: dict[str, _Session] = {}
    judged: dict[int, Judged] = {}
    ordered = list(lines)
    if server:
        ordered = [line if line.server is not None else dataclasses.replace(line, server=server) for line in ordered]
    ordered_sessions = {line.session for line in ordered if line.seq is None}
    in_order = [line for line in ordered if line.session not in ordered_sessions]
    by_batch = [line for line in ordered if line.session in ordered_sessions]

    def group_key(line: Line) -> tuple[str, object]:
        return (line.session, line.batch if line.batch is not None else ("alone", line.number))

    for (session_name, _), group in groupby(by_batch, key=group_key):
        session = sessions.setdefault(session_name, _Session())
        for line, outcome in _judge_batch(list(group), session, policies):
            judged[line.number] = outcome
    for session_name in dict.fromkeys(line.session for line in in_order):
        session = sessions.setdefault(session_name, _Session())
        mine = [line for line in in_order if line.session == session_name]
        for line, outcome in _judge_in_order(mine, session, policies):
            judged[line.number] = outcome
    return [judged[line.number] for line in ordered]


def _judge_in_order(lines: list[Line], session: _Session, policies: Rules) -> Iterator[tuple[Line, Judged]]:
    """Begin each call when the live guard did (by ``seq``), end it where its line stands."""
    to_begin = sorted(lines, key=lambda line: line.seq or 0)
    started: dict[int, tuple[Ticket, Policy]] = {}
    next_begin = 0
    for line in lines:
        while next_begin < len(to_begin) and (to_begin[next_begin].seq or 0) <= (line.begun or 0):
            beginning = to_begin[next_begin]
            next_begin += 1
            if session.closed:
                yield beginning, Judged(beginning, "closed")
                continue
            policy = _policy(beginning, policies)
            ticket, verdict = detector.begin(
                session.state, _call(beginning, policy), policy, policies.session, beginning.at
            )
            if ticket is None:
                session.closed = verdict.judged is Action.ABORT
                yield beginning, _judged(beginning, verdict)
            else:
                started[beginning.number] = (ticket, policy)
        begun = started.pop(line.number, None)
        if begun is not None:
            yield line, _end(line, begun[0], begun[1], session, policies)


def _end(line: Line, ticket: Ticket, policy: Policy, session: _Session, policies: Rules) -> Judged:
    """End one begun call with its recorded answer (or without one)."""
    now = line.ended if line.ended is not None else line.at
    outcome = line.outcome
    if outcome is None and line.result is not None:
        outcome = detector.outcome_of(line.result, policy)
    if outcome is None:
        detector.abandon(session.state, ticket, policies.session, now)
        return _judged(line, _shadowed(ticket))
    return _judged(line, detector.finish(session.state, ticket, outcome, policies.session, now))


def _judge_batch(batch: list[Line], session: _Session, policies: Rules) -> Iterator[tuple[Line, Judged]]:
    """Begin every call of a batch, then end them in order: they were in flight together."""
    begun: list[tuple[Line, Ticket | None, Policy]] = []
    for line in batch:
        if session.closed:
            yield line, Judged(line, "closed")
            continue
        policy = _policy(line, policies)
        call = _call(line, policy)
        ticket, verdict = detector.begin(session.state, call, policy, policies.session, line.at)
        if ticket is None and verdict.judged >= Action.BLOCK:
            session.closed = verdict.judged is Action.ABORT
            yield line, _judged(line, verdict)
            continue
        begun.append((line, ticket, policy))
        if ticket is None:
            yield line, _judged(line, verdict)
    for line, ticket, policy in begun:
        if ticket is not None:
            yield line, _end(line, ticket, policy, session, policies)


def _shadowed(ticket: Ticket) -> Verdict:
    """What a call that ended without an answer was judged at its start."""
    if ticket.owed is None:
        return Verdict(Action.ALLOW, ticket.tool, 0)
    family, count, action, text = ticket.owed
    return Verdict(Action.ALLOW, ticket.tool, count, text, family=family, shadow=action)


def _judged(line: Line, verdict: Verdict) -> Judged:
    action = verdict.judged
    return Judged(
        line,
        action.name.lower(),
        verdict.family.value if verdict.family is not None and action is not Action.ALLOW else None,
        verdict.streak if action is not Action.ALLOW else 0,
    )


def _policy(line: Line, policies: Rules) -> Policy:
    if line.server is not None:
        own = line.tool.removeprefix(f"{line.server}__") if policies.prefixed else line.tool
        return policies(line.server, own)
    return policies("", line.tool)


def _call(line: Line, policy: Policy) -> Call:
    """The detector's view of a recorded call (its fingerprint may be all the trace holds)."""
    shaped = detector.call_of(line.tool, None, line.annotations, trusted=policy.trust_annotations)
    return Call(line.tool, line.call, shaped.side_effect, shaped.read_only, shaped.acts)


def suggest_scrub(lines: Sequence[Line]) -> list[str]:
    """Presets that would make repeated calls' results equal where they now differ only in volatile parts.

    For each such pair, the smallest set of presets that does it; their union, in preset order.
    """
    found: set[str] = set()
    last: dict[tuple[str, str], Mapping[str, Any]] = {}
    for line in lines:
        if line.result is None:
            continue
        key = (line.session, line.call)
        previous = last.get(key)
        last[key] = line.result
        if previous is not None and previous != line.result:
            found.update(_smallest_scrub(previous, line.result))
    return [name for name in PRESETS if name in found]


def _smallest_scrub(first: Mapping[str, Any], second: Mapping[str, Any]) -> tuple[str, ...]:
    for size in range(1, len(PRESETS) + 1):
        for names in combinations(PRESETS, size):
            if ScrubRules(presets=names).differs_only_in_volatile(first, second):
                return names
    return ()


def print_timeline(judged: Sequence[Judged], out: IO[str], where: str) -> None:
    """One line per call: number, session, tool, verdict and rule, aligned for reading."""
    width = max((len(item.line.tool) for item in judged), default=4)
    print(f"{where}: {len(judged)} calls", file=out)
    for item in judged:
        note = f"  {item.rule} #{item.count}" if item.rule else ""
        where_in = f"{item.line.number:>5}  {item.line.session[:24]:<24}"
        print(f"  {where_in}  {item.line.tool:<{width}}  {item.verdict:<6}{note}", file=out)


def as_json(item: Judged) -> str:
    """The ``--json`` form of one judged line."""
    body: dict[str, Any] = {
        "line": item.line.number,
        "session": item.line.session,
        "tool": item.line.tool,
        "verdict": item.verdict,
        "rule": item.rule,
    }
    if item.rule:
        body["count"] = item.count
    return json.dumps(body)


def run(paths: Sequence[str], policies: Rules, *, as_lines: bool, server: str = "", out: IO[str] = sys.stdout) -> int:
    """Replay every file (``-`` for stdin); 0 when all were read, 2 with the first unreadable line.

    ``server``: the route of lines that name no server (the config's only server).

    Raises:
        TraceError: a line that cannot be read.
    """
    for path in paths:
        where = "<stdin>" if path == "-" else path
        if path == "-":
            lines = list(read_trace(sys.stdin, where))
        else:
            try:
                with Path(path).open(encoding="utf-8") as stream:
                    lines = list(read_trace(stream, where))
            except OSError as error:
                raise TraceError(f"{where}: cannot read it: {error.strerror or error}") from None
            except UnicodeDecodeError:
                raise TraceError(f"{where}: not UTF-8 text") from None
        judged = judge_trace(lines, policies, server)
        if as_lines:
            for item in judged:
                print(as_json(item), file=out)
        else:
            print_timeline(judged, out, where)
        have = policies.session.scrub.presets
        wanted = suggest_scrub(lines)
        if any(name not in have for name in wanted):
            presets = [name for name in PRESETS if name in have or name in wanted]  # what to set, all of it
            print(
                f"{where}: some repeated calls got results that differ only in volatile parts; "
                f"LOOP_GUARD_SCRUB={','.join(presets)} would count them as the same result",
                file=sys.stderr,
            )
    return 0
