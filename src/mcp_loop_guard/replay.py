"""``mcp-loop-guard replay``: run the detector over recorded traces, with any settings.

Replay judges each line of a trace (:mod:`mcp_loop_guard.traces`) as the running guard would
have, with the same settings (flags, environment, ``--config``), so an operator can record in
shadow mode and see what enforcing, or other thresholds, would have done. It streams: lines
are judged and printed as they are read, whatever the trace's length.

A line that records no answer (a call the recording guard refused, or one that ended without
an answer) is shown as ``unknown`` when replay would have let it through: what the upstream
would have said cannot be known, so it is not judged as if it had answered.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import IO, Any

from mcp_loop_guard.core import detector
from mcp_loop_guard.core.detector import Call, Outcome, Ticket
from mcp_loop_guard.core.fingerprint import call_key
from mcp_loop_guard.core.model import Action, Verdict
from mcp_loop_guard.core.policy import Policy
from mcp_loop_guard.core.scrub import PRESETS, ScrubRules
from mcp_loop_guard.core.state import State
from mcp_loop_guard.policies import Rules
from mcp_loop_guard.traces import Line, TraceError, read_trace

LOOKAHEAD = 10_000
"""Lines read ahead at most to find the calls an event log line says were begun before it ended."""

__all__ = ["Judged", "ScrubAdvisor", "TraceError", "judge_lines", "judge_trace", "read_trace", "run", "suggest_scrub"]


@dataclass
class Judged:
    """What the detector said about one line."""

    line: Line
    verdict: str
    """``allow``, ``warn``, ``block``, ``abort``, ``closed`` (the session had already been aborted) or
    ``unknown`` (let through, but the trace records no answer to judge)."""
    rule: str | None = None
    count: int = 0


@dataclass
class _Session:
    state: State = field(default_factory=State)
    closed: bool = False
    ordered: bool = False
    """Lines record the order of begins (``seq``, ``begun``): replayed event by event."""
    waiting: dict[int, Line] = field(default_factory=dict)
    """Ordered sessions: lines read but not yet begun, by ``seq``."""
    started: dict[int, tuple[Ticket, Policy]] = field(default_factory=dict)
    """Ordered sessions: begun calls by line number, waiting for their line to end them."""
    next_seq: int = 1
    """Ordered sessions: every call before this ``seq`` has been begun."""


def judge_trace(lines: Iterable[Line], policies: Rules, server: str = "") -> list[Judged]:
    """Every line judged, in file order (see :func:`judge_lines`)."""
    return list(judge_lines(lines, policies, server))


def judge_lines(lines: Iterable[Line], policies: Rules, server: str = "") -> Iterator[Judged]:
    """Judge every line, session by session, as the live guard would; yield them in file order.

    A session whose lines record the order of begins (``seq`` and ``begun``, as the event log
    writes them) is replayed event by event: each call begins when the live guard began it and
    ends where its line stands (reading ahead as far as the calls then in flight). Other traces
    are judged batch by batch (lines sharing a ``batch`` begun together). ``server``: the route
    of lines that name none (a config's only server).
    """
    judge = _Replay(iter(lines), policies, server)
    yield from judge.run()


class _Replay:
    """One pass over a trace, with as little read ahead as the order of begins needs."""

    def __init__(self, source: Iterator[Line], policies: Rules, server: str) -> None:
        self.source = source
        self.policies = policies
        self.server = server
        self.sessions: dict[str, _Session] = {}
        self.ahead: deque[Line] = deque()
        self.judged: dict[int, Judged] = {}
        self.order: deque[int] = deque()
        """Line numbers read, in file order, not yet yielded."""

    def _read(self) -> Line | None:
        """The next line of the trace, remembered for the ordering of output."""
        line = next(self.source, None)
        if line is None:
            return None
        if self.server and line.server is None:
            line = _with_server(line, self.server)
        session = self.sessions.get(line.session)
        if session is None:
            session = self.sessions[line.session] = _Session(ordered=line.seq is not None)
        if session.ordered and line.seq is not None:
            session.waiting[line.seq] = line
        self.order.append(line.number)
        return line

    def _next(self) -> Line | None:
        return self.ahead.popleft() if self.ahead else self._read()

    def run(self) -> Iterator[Judged]:
        while (line := self._next()) is not None:
            session = self.sessions[line.session]
            if session.ordered and line.seq is not None:
                self._ordered(line, session)
            else:
                group = [line]
                while line.batch is not None:
                    if not self.ahead and (following := self._read()) is not None:
                        self.ahead.append(following)
                    if not self.ahead or (self.ahead[0].session, self.ahead[0].batch) != (line.session, line.batch):
                        break
                    group.append(self.ahead.popleft())
                self._batch(group, session)
            yield from self._flush()
        yield from self._flush()

    def _flush(self) -> Iterator[Judged]:
        while self.order and self.order[0] in self.judged:
            yield self.judged.pop(self.order.popleft())

    def _ordered(self, line: Line, session: _Session) -> None:
        """Begin each call when the live guard did (by ``seq``), end this one where its line stands."""
        wanted = line.begun or 0
        while not _all_read(session, wanted) and len(self.ahead) < LOOKAHEAD:
            following = self._read()
            if following is None:
                break
            self.ahead.append(following)
        session.next_seq = max(session.next_seq, wanted + 1)
        for seq in sorted(s for s in session.waiting if s <= wanted):
            beginning = session.waiting.pop(seq)
            if session.closed:
                self.judged[beginning.number] = Judged(beginning, "closed")
                continue
            policy = self._policy(beginning)
            ticket, verdict = detector.begin(
                session.state, _call(beginning, policy), policy, self.policies.session, beginning.at
            )
            if ticket is None:
                session.closed = verdict.judged is Action.ABORT
                self.judged[beginning.number] = _judged(beginning, verdict)
            else:
                session.started[beginning.number] = (ticket, policy)
        begun = session.started.pop(line.number, None)
        if begun is not None:
            self.judged[line.number] = self._end(line, begun[0], begun[1], session)
        elif line.number not in self.judged:
            self.judged[line.number] = Judged(line, "closed" if session.closed else "unknown")

    def _batch(self, batch: list[Line], session: _Session) -> None:
        """Begin every call of a batch, then end them in order: they were in flight together."""
        begun: list[tuple[Line, Ticket, Policy]] = []
        for line in batch:
            if session.closed:
                self.judged[line.number] = Judged(line, "closed")
                continue
            policy = self._policy(line)
            ticket, verdict = detector.begin(session.state, _call(line, policy), policy, self.policies.session, line.at)
            if ticket is None:
                session.closed = verdict.judged is Action.ABORT
                self.judged[line.number] = _judged(line, verdict)
                continue
            begun.append((line, ticket, policy))
        for line, ticket, policy in begun:
            self.judged[line.number] = self._end(line, ticket, policy, session)

    def _end(self, line: Line, ticket: Ticket, policy: Policy, session: _Session) -> Judged:
        """End one begun call with its recorded answer; without one, it is let go and shown as unknown."""
        now = line.ended if line.ended is not None else line.at
        outcome = _outcome(line, policy)
        if outcome is None:
            detector.abandon(session.state, ticket, self.policies.session, now)
            return Judged(line, "unknown")
        return _judged(line, detector.finish(session.state, ticket, outcome, self.policies.session, now))

    def _policy(self, line: Line) -> Policy:
        if line.server is not None:
            own = line.tool.removeprefix(f"{line.server}__") if self.policies.prefixed else line.tool
            return self.policies(line.server, own)
        return self.policies("", line.tool)


def _all_read(session: _Session, wanted: int) -> bool:
    """Every call up to ``wanted`` that is still to begin has been read."""
    return all(seq in session.waiting for seq in range(session.next_seq, wanted + 1))


def _with_server(line: Line, server: str) -> Line:
    import dataclasses  # noqa: PLC0415 - only for configs with one server

    return dataclasses.replace(line, server=server)


def _outcome(line: Line, policy: Policy) -> Outcome | None:
    """What answered the call, as the detector sees it; None when the trace does not say."""
    if line.result is not None:
        if line.result.get("resultType") not in (None, "complete"):
            return None  # an interim answer (a task handle, input_required): the guard let the call go too
        return detector.outcome_of(line.result, policy)
    if line.error is not None:
        return detector.error_outcome(line.error.get("code"), line.error.get("message"))
    if line.outcome is not None:
        return Outcome(line.outcome, line.is_error)
    return None


def _call(line: Line, policy: Policy) -> Call:
    """The detector's view of a recorded call: from its arguments under these rules, or as recorded."""
    if line.arguments is not None:
        return detector.call_of(
            line.tool, line.arguments, line.annotations, trusted=policy.trust_annotations, rules=policy.arguments
        )
    shaped = detector.call_of(line.tool, None, line.annotations, trusted=policy.trust_annotations)
    key = line.call or shaped.key
    return Call(
        line.tool,
        key,
        shaped.side_effect,
        shaped.read_only,
        shaped.acts or line.writes,
        line.loose or key,
        shaped.waits or line.waits,
    )


def _judged(line: Line, verdict: Verdict) -> Judged:
    action = verdict.judged
    return Judged(
        line,
        action.name.lower(),
        verdict.family.value if verdict.family is not None and action is not Action.ALLOW else None,
        verdict.streak if action is not Action.ALLOW else 0,
    )


# --- scrub suggestions ------------------------------------------------------------------------


class ScrubAdvisor:
    """Which presets would make repeated calls' results equal where they now differ only in volatile parts.

    Fed one line at a time; remembers the last result of each (session, call) only. A pair of
    results is first tried with every preset at once (two scrubs), and only a pair that this
    makes equal is searched for the smallest set of presets that does it.
    """

    def __init__(self) -> None:
        """Nothing seen yet."""
        self.found: set[str] = set()
        self._last: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._all = ScrubRules(presets=tuple(PRESETS))

    def feed(self, line: Line) -> None:
        """One more line."""
        if line.result is None or len(self.found) == len(PRESETS):
            return
        call = call_key(line.tool, line.arguments) if line.arguments is not None else line.call or ""
        key = (line.session, call)
        previous = self._last.get(key)
        self._last[key] = line.result
        if previous is None or previous == line.result:
            return
        if self._all.apply(previous) != self._all.apply(line.result):
            return
        self.found.update(_smallest_scrub(previous, line.result))

    def presets(self) -> list[str]:
        """The presets found, in preset order."""
        return [name for name in PRESETS if name in self.found]


def suggest_scrub(lines: Iterable[Line]) -> list[str]:
    """Presets that would make repeated calls' results equal where they now differ only in volatile parts.

    For each such pair, the smallest set of presets that does it; their union, in preset order.
    """
    advisor = ScrubAdvisor()
    for line in lines:
        advisor.feed(line)
    return advisor.presets()


def _smallest_scrub(first: Mapping[str, Any], second: Mapping[str, Any]) -> tuple[str, ...]:
    for size in range(1, len(PRESETS) + 1):
        for names in combinations(PRESETS, size):
            if ScrubRules(presets=names).differs_only_in_volatile(first, second):
                return names
    return ()


# --- the command ------------------------------------------------------------------------------


def timeline_line(item: Judged, width: int) -> str:
    """One aligned line of the timeline: number, session, tool, verdict and rule."""
    note = f"  {item.rule} #{item.count}" if item.rule else ""
    where_in = f"{item.line.number:>5}  {item.line.session[:24]:<24}"
    return f"  {where_in}  {item.line.tool:<{width}}  {item.verdict:<7}{note}"


def as_json(item: Judged) -> str:
    """The ``--json`` form of one judged line."""
    import json  # noqa: PLC0415 - the timeline form needs none

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


def run(
    paths: Sequence[str],
    policies: Rules,
    *,
    as_lines: bool,
    server: str = "",
    spacing: float = 1.0,
    out: IO[str] = sys.stdout,
) -> int:
    """Replay every file (``-`` for stdin), streaming; 0 when all were read.

    ``server``: the route of lines that name no server (the config's only server); ``spacing``:
    seconds between lines that record no time.

    Raises:
        TraceError: a line that cannot be read.
    """
    for path in paths:
        where = "<stdin>" if path == "-" else path
        try:
            stream = sys.stdin if path == "-" else Path(path).open(encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError as error:
            raise TraceError(f"{where}: cannot read it: {error.strerror or error}") from None
        try:
            _replay_one(stream, where, policies, as_lines=as_lines, server=server, spacing=spacing, out=out)
        except UnicodeDecodeError:
            raise TraceError(f"{where}: not UTF-8 text") from None
        finally:
            if stream is not sys.stdin:
                stream.close()
    return 0


def _replay_one(
    stream: IO[str], where: str, policies: Rules, *, as_lines: bool, server: str, spacing: float, out: IO[str]
) -> None:
    advisor = ScrubAdvisor()
    calls = 0

    def fed(lines: Iterator[Line]) -> Iterator[Line]:
        for line in lines:
            advisor.feed(line)
            yield line

    if not as_lines:
        print(f"{where}:", file=out)
    for item in judge_lines(fed(read_trace(stream, where, spacing=spacing)), policies, server):
        calls += 1
        print(as_json(item) if as_lines else timeline_line(item, 24), file=out)
    if not as_lines:
        print(f"{where}: {calls} calls", file=out)
    have = policies.session.scrub.presets
    wanted = advisor.presets()
    if any(name not in have for name in wanted):
        presets = [name for name in PRESETS if name in have or name in wanted]  # what to set, all of it
        print(
            f"{where}: some repeated calls got results that differ only in volatile parts; "
            f"LOOP_GUARD_SCRUB={','.join(presets)} would count them as the same result",
            file=sys.stderr,
        )
