"""Loop-family scenarios played live through the guard, then judged again by ``replay`` from its event log.

A :class:`Scenario` is what an agent does (calls in order, or all at once), what the model
must see at each call (the verdict's action and family in ``_meta``, the ``[loop-guard]``
texts) and how many calls must reach the upstream. The same scenarios run through every
path of the guard (stdio message relay, stdio with several upstreams, HTTP stateful and
keyed); the test modules only start the guard and open the sessions.

Every upstream runs behind the wiretap fixture, so what reached it is counted from what it
was sent, whatever the server.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from mcp import ClientSession, types
from mcp.shared.exceptions import MCPError

from tests.harness import (
    MARKER,
    fixture_command,
    guard_argv,
    guard_notes,
    read_json_lines,
    server_environment,
    tapped,
    verdict,
)

LogForm = Literal["fingerprints", "contents"]
LOG_FORMS: tuple[LogForm, ...] = ("fingerprints", "contents")
"""The two forms of the event log: fingerprints (the default) and ``LOOP_GUARD_LOG_CONTENTS=true``."""

Judgement = tuple[str, str | None, int]
"""(action, family, count) of one call; ``("allow", None, 0)`` when the guard added nothing."""

ALLOW: Judgement = ("allow", None, 0)
WARNING = f"{MARKER} Loop guard warning:"
"""How every warning note starts."""
HELD_BACK = f"{MARKER} Loop guard warning (this call was run, but it should not have been):"
"""How a warn-mode note starts where enforce mode would have refused."""
REFUSAL = f"{MARKER} Refused by the loop guard:"
"""How every refusal starts."""
ABORTING = "The loop guard is closing this session now"
"""What the refusal that closes a session adds."""
PHRASES: Mapping[str, tuple[str, str]] = {
    "identical": ("in a row with the same arguments", "identical call #"),
    "cycle": ("-step cycle", "-step cycle"),
    "same_error": ("with the same error, with different arguments", "with the same error whatever the arguments"),
    "same_result": ("returned the same result", "returned the same result"),
    "burst": ("identical arguments", "identical copy #"),
    "side_effect": ("marked destructive and not idempotent", "destructive and not idempotent"),
}
"""Per family: words its warning and its refusal hold, telling the model which loop it is in."""
CALL_LIMIT = 30.0
"""Seconds a whole scenario's calls may take."""


# --- scenarios -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One tools/call an agent makes, by the upstream's own tool name."""

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    """An agent's calls to one upstream fixture server and what the guard must make of them."""

    name: str
    server: str
    """The fixture server that answers the calls: ``tests/fixtures/<server>_server.py``."""
    calls: tuple[Call, ...]
    expected: tuple[Judgement, ...]
    """What the model sees at each call, in order (for a burst: in any order)."""
    reached: Mapping[str, int]
    """Per tool: how many calls reach the upstream."""
    settings: Mapping[str, str] = field(default_factory=dict)
    """``LOOP_GUARD_*`` settings of the guard, and of the replay."""
    burst: bool = False
    """All calls are issued at once, in one session (one model response)."""
    logged: tuple[Judgement, ...] | None = None
    """What the event log records, where it differs from what the model sees (shadow mode)."""
    held_from: int | None = None
    """Warn mode: the first call (0-based) enforce mode would have refused; it and those after say so."""
    suggests: str | None = None
    """The ``LOOP_GUARD_SCRUB`` value replay suggests from a log with contents."""
    rules: Mapping[str, Any] = field(default_factory=dict)
    """The ``loopGuard`` section of the scenario's server in a config file, where it has one."""

    @property
    def aborts(self) -> bool:
        """The guard closes the session at the last call."""
        return any(action == "abort" for action, _, _ in self.expected)

    @property
    def recorded(self) -> tuple[Judgement, ...]:
        """The verdicts the event log holds for the calls."""
        return self.logged if self.logged is not None else self.expected


def repeat(call: Call, times: int) -> tuple[Call, ...]:
    """The same call made ``times`` times."""
    return (call,) * times


def warns(family: str, counts: Sequence[int]) -> tuple[Judgement, ...]:
    """Warnings of one family at the given counts."""
    return tuple(("warn", family, count) for count in counts)


def refusals(family: str, counts: Sequence[int], action: str = "block") -> tuple[Judgement, ...]:
    """Refusals of one family at the given counts."""
    return tuple((action, family, count) for count in counts)


def echoes(texts: Sequence[str], calls: int) -> tuple[Call, ...]:
    """``echo`` over the texts in turn: a cycle of ``len(texts)`` calls whose results repeat with them."""
    return tuple(Call("echo", {"text": texts[n % len(texts)]}) for n in range(calls))


CONSTANT = Call("constant")
EMAIL = Call("send_email", {"to": "ops@example.com", "subject": "Deploy done", "body": "v2.4.1 is live."})
PAYMENTS = Call("service_status", {"service": "payments"})
REWORDED = ("card decline", "card declined", "declined card", "payment declined", "decline", "cards", "3ds", "auth")
"""Search queries an agent rewords while the private repository keeps answering 401."""


def burst(size: int) -> Scenario:
    """``size`` identical calls at once: four reach the server, the 3rd and 4th are warned, the rest refused.

    The abort threshold is raised so that every refusal is delivered: at the default the
    3rd refusal closes the session while the burst's forwarded calls are still in flight.
    The 4th warning is the one the burst's last answer gets: four identical results in a row.
    """
    return Scenario(
        f"burst-{size}",
        "counting",
        repeat(CONSTANT, size),
        (ALLOW, ALLOW, ("warn", "burst", 3), ("warn", "identical", 4), *refusals("burst", range(5, size + 1))),
        {"constant": 4},
        settings={"LOOP_GUARD_ABORT_THRESHOLD": "1000"},
        burst=True,
    )


IDENTICAL = Scenario(
    "identical",
    "counting",
    repeat(CONSTANT, 7),
    (ALLOW, ALLOW, *warns("identical", [3, 4]), *refusals("identical", [5, 6]), ("abort", "identical", 7)),
    {"constant": 4},
)
CYCLE_2 = Scenario(
    "cycle-2",
    "counting",
    echoes(["build", "test"], 9),
    (*[ALLOW] * 4, *warns("cycle", [3, 3, 4, 4]), ("block", "cycle", 5)),
    {"echo": 8},
)
CYCLE_3 = Scenario(
    "cycle-3",
    "counting",
    echoes(["read", "edit", "test"], 13),
    (*[ALLOW] * 6, *warns("cycle", [3, 3, 3, 4, 4, 4]), ("block", "cycle", 5)),
    {"echo": 12},
)
SAME_ERROR = Scenario(
    "same-error",
    "tracker",
    tuple(Call("search_issues", {"query": query, "repo": "acme/payments-private"}) for query in REWORDED),
    (ALLOW, ALLOW, *warns("same_error", range(3, 8)), ("block", "same_error", 8)),
    {"search_issues": 7},
)
SAME_RESULT = Scenario(
    "same-result",
    "tracker",
    tuple(Call("search_issues", {"query": f"quantum flux capacitor {n}"}) for n in range(8)),
    (ALLOW, ALLOW, ALLOW, *warns("same_result", range(4, 9))),
    {"search_issues": 8},
)
SIDE_EFFECT = Scenario(
    "side-effect",
    "tracker",
    (
        EMAIL,
        Call("list_issues"),
        EMAIL,  # warned: a read-only call in between changes nothing
        Call("add_comment", {"number": 1, "body": "Deploy v2.4.1 announced."}),
        EMAIL,  # after an action by another tool, sending again may be meant: counted from 1
        Call("list_issues", {"state": "closed"}),
        EMAIL,
        EMAIL,
    ),
    (
        ALLOW,
        ALLOW,
        ("warn", "side_effect", 2),
        ALLOW,
        ALLOW,
        ALLOW,
        ("warn", "side_effect", 2),
        ("block", "side_effect", 3),
    ),
    {"send_email": 4, "list_issues": 2, "add_comment": 1},
)
VOLATILE_UNSCRUBBED = Scenario(
    "volatile-unscrubbed",
    "ops",
    repeat(PAYMENTS, 7),
    (ALLOW,) * 7,
    {"service_status": 7},
    suggests="timestamps,uuids",
)
VOLATILE_SCRUBBED = Scenario(
    "volatile-scrubbed",
    "ops",
    repeat(PAYMENTS, 5),
    (ALLOW, ALLOW, *warns("identical", [3, 4]), ("block", "identical", 5)),
    {"service_status": 4},
    settings={"LOOP_GUARD_SCRUB": "timestamps,uuids"},
)
WARN_MODE = Scenario(
    "warn-mode",
    "counting",
    repeat(CONSTANT, 8),
    (ALLOW, ALLOW, *warns("identical", range(3, 9))),
    {"constant": 8},
    settings={"LOOP_GUARD_MODE": "warn"},
    held_from=4,
)
SHADOW_MODE = Scenario(
    "shadow-mode",
    "counting",
    repeat(CONSTANT, 8),
    (ALLOW,) * 8,
    {"constant": 8},
    settings={"LOOP_GUARD_MODE": "shadow"},
    logged=(
        ALLOW,
        ALLOW,
        *warns("identical", [3, 4]),
        *refusals("identical", [5, 6]),
        *refusals("identical", [7, 8], "abort"),
    ),
)

SEND_EMAIL_RULE = {"sideEffectWarnThreshold": 0, "sideEffectBlockThreshold": 2}
"""A tool's rule: refused at the 2nd identical call, no warning before."""
SERVER_RULES = {"warnThreshold": 2, "blockThreshold": 3}
"""A server's thresholds: identical calls warned at the 2nd, refused at the 3rd."""
TOOL_OVERRIDE = Scenario(
    "tool-override",
    "tracker",
    repeat(EMAIL, 2),
    (ALLOW, ("block", "side_effect", 2)),
    {"send_email": 1},
    rules={"tools": {"send_email": SEND_EMAIL_RULE}},
)
SERVER_OVERRIDE = Scenario(
    "server-override",
    "tracker",
    repeat(Call("get_issue", {"number": 3}), 3),
    (ALLOW, ("warn", "identical", 2), ("block", "identical", 3)),
    {"get_issue": 2},
    rules=SERVER_RULES,
)
OVERRIDES = (TOOL_OVERRIDE, SERVER_OVERRIDE)
"""Rules from a config file: one tool's, and one server's."""

FAMILIES: tuple[Scenario, ...] = (
    IDENTICAL,
    CYCLE_2,
    CYCLE_3,
    SAME_ERROR,
    SAME_RESULT,
    burst(20),
    burst(60),
    SIDE_EFFECT,
    VOLATILE_UNSCRUBBED,
    VOLATILE_SCRUBBED,
    WARN_MODE,
    SHADOW_MODE,
)
"""Every family, volatile results with and without scrubbing, and the two modes that do not enforce."""


# --- upstreams -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upstream:
    """A fixture server behind a wiretap, so the calls that reached it can be counted."""

    name: str
    server: str
    log: Path

    @property
    def command(self) -> list[str]:
        """The argv running the server behind the wiretap."""
        return [*fixture_command("wiretap", str(self.log), "--"), *fixture_command(f"{self.server}_server")]

    def entry(self, loop_guard: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The server's entry in an mcpServers config file, with its own ``loopGuard`` rules if given."""
        command = self.command
        found: dict[str, Any] = {"command": command[0], "args": command[1:]}
        if loop_guard:
            found["loopGuard"] = dict(loop_guard)
        return found

    def reached(self) -> Counter[str]:
        """Per tool, the tools/call that reached the server."""
        return Counter(message["params"]["name"] for message in tapped(self.log, "server", "tools/call"))


def upstream(directory: Path, name: str, server: str) -> Upstream:
    """The fixture server ``server`` named ``name``, its wiretap log in directory."""
    return Upstream(name, server, directory / f"wiretap-{name}.jsonl")


def alternating_forms(named: Sequence[tuple[str, Any]]) -> list[Any]:
    """``pytest.param(value, form)`` for each named value, the log forms taken in turn.

    Paths that share the event log's code (and run both forms through another path) need
    not run every value in both forms; alternating keeps each form covered on each path.
    """
    return [
        pytest.param(value, LOG_FORMS[index % len(LOG_FORMS)], id=f"{name}-{LOG_FORMS[index % len(LOG_FORMS)]}")
        for index, (name, value) in enumerate(named)
    ]


def log_settings(log: Path, form: LogForm) -> dict[str, str]:
    """The settings writing the event log to ``log`` in one form."""
    return {"LOOP_GUARD_EVENT_LOG": str(log), "LOOP_GUARD_LOG_CONTENTS": "true" if form == "contents" else "false"}


# --- what the model sees -----------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What the model got for one call: a result, or a JSON-RPC error."""

    answer: types.CallToolResult | MCPError

    @property
    def judgement(self) -> Judgement:
        """The verdict in ``_meta`` as (action, family, count); ``allow`` when there is none, ``error`` for an error."""
        if isinstance(self.answer, MCPError):
            return "error", str(self.answer), 0
        found = verdict(self.answer)
        if found is None:
            return ALLOW
        return found["action"], found.get("family"), found["streak"]

    @property
    def result(self) -> types.CallToolResult:
        """The result (the call was answered with one)."""
        assert isinstance(self.answer, types.CallToolResult), self.answer
        return self.answer


async def play(session: ClientSession, scenario: Scenario, prefix: str = "") -> list[Seen]:
    """Makes the scenario's calls (in order, or all at once for a burst); what the model got, call by call.

    ``prefix`` goes before tool names (``server__`` where a guard exports several upstreams).
    """
    seen: list[Seen | None] = [None] * len(scenario.calls)

    async def call(index: int) -> None:
        made = scenario.calls[index]
        try:
            seen[index] = Seen(await session.call_tool(prefix + made.tool, dict(made.arguments)))
        except MCPError as error:
            seen[index] = Seen(error)

    with anyio.fail_after(CALL_LIMIT):
        if scenario.burst:
            async with anyio.create_task_group() as group:
                for index in range(len(scenario.calls)):
                    group.start_soon(call, index)
        else:
            for index in range(len(scenario.calls)):
                await call(index)
    return [found for found in seen if found is not None]


def _same_burst(got: Sequence[Judgement], expected: Sequence[Judgement]) -> bool:
    """The same refusals with the same counts, in any order; each copy's family burst or identical.

    Where the guard handles requests concurrently (the SDK paths), answers can come back while
    copies are still arriving: a copy begun after every earlier one was answered is, rightly, an
    identical sequential call, and a copy answered while a later one is still in flight gets no
    sequential warning (only a batch's last answer does). Which copies those are depends on
    timing; the refusals and their counts do not, nor the last forwarded copy's warning.
    """

    def counted(judgements: Sequence[Judgement], actions: set[str]) -> list[tuple[str, int]]:
        return sorted((action, count) for action, _, count in judgements if action in actions)

    families = {family for action, family, _ in got if action != "allow"}
    refused = {"block", "abort"}
    forwarded = [found for found in got if found[0] not in refused]
    return (
        counted(got, refused) == counted(expected, refused)
        and len(forwarded) == len([found for found in expected if found[0] not in refused])
        and max(counted(got, {"warn"}), default=None) == max(counted(expected, {"warn"}), default=None)
        and families <= {"burst", "identical"}
    )


def check_model(scenario: Scenario, seen: Sequence[Seen], prefix: str = "") -> None:
    """The model saw the expected verdicts, each with the texts of its family, and what the mode adds or hides."""
    judged = [found.judgement for found in seen]
    if scenario.burst:
        assert _same_burst(judged, scenario.expected), judged
    else:
        assert judged == list(scenario.expected), judged
    for found in seen:
        check_texts(found, prefix)
    mode = scenario.settings.get("LOOP_GUARD_MODE")
    if mode == "warn":
        assert scenario.held_from is not None
        held = [bool(notes := guard_notes(found.result)) and notes[0].startswith(HELD_BACK) for found in seen]
        assert held == [index >= scenario.held_from for index in range(len(seen))], held
    elif mode == "shadow":
        first = seen[0].result.model_dump(by_alias=True)
        assert all(found.result.model_dump(by_alias=True) == first for found in seen), "shadow mode changes nothing"


def check_texts(found: Seen, prefix: str = "") -> None:
    """The ``[loop-guard]`` texts match the verdict: none, one note after the real content, or one refusal."""
    result = found.result
    action, family, _ = found.judgement
    notes = guard_notes(result)
    meta = verdict(result)
    if action == "allow":
        assert meta is None
        assert notes == []
        return
    assert meta is not None
    assert family is not None
    assert meta["tool"].startswith(prefix)
    warning_words, refusal_words = PHRASES[family]
    assert len(notes) == 1, notes
    note = notes[0]
    assert f"`{meta['tool']}`" in note, note
    if action == "warn":
        assert result.is_error == (family == "same_error"), "a warned result keeps the upstream's isError"
        last = result.content[-1]
        assert isinstance(last, types.TextContent)
        assert last.text == note, "the warning comes after the real content"
        assert len(result.content) > 1, "the real content is kept"
        if note.startswith(HELD_BACK):
            assert refusal_words in note, note
        else:
            assert note.startswith(WARNING), note
            assert warning_words in note, note
        return
    assert result.is_error
    assert len(result.content) == 1, "a refused call has nothing of the upstream's"
    assert note.startswith(REFUSAL), note
    assert refusal_words in note, note
    assert (ABORTING in note) == (action == "abort"), note


def check_reached(scenario: Scenario, reached: Mapping[str, int]) -> None:
    """Exactly the expected calls reached the upstream."""
    assert dict(reached) == dict(scenario.reached)


# --- the event log and its replay --------------------------------------------------------------


def logged(line: Mapping[str, Any]) -> Judgement:
    """The verdict of an event log (or replay) line as (action, family, count)."""
    action = str(line["verdict"])
    if action == "allow":
        return ALLOW
    return action, line.get("rule"), int(line.get("count", 0))


def event_lines(log: Path) -> list[dict[str, Any]]:
    """The lines of an event log."""
    return read_json_lines(log)


def check_logged(scenario: Scenario, lines: Sequence[Mapping[str, Any]], form: LogForm) -> None:
    """One line per call in the requested form, with the verdicts the rules gave (what enforce would do, in shadow)."""
    recorded = [logged(line) for line in lines]
    if scenario.burst:
        assert _same_burst(recorded, scenario.recorded), recorded
    else:
        assert recorded == list(scenario.recorded), recorded
    shadow = scenario.settings.get("LOOP_GUARD_MODE") == "shadow"
    for line in lines:
        refused = line["verdict"] in {"block", "abort"} and not shadow
        assert line.get("shadow", False) == (shadow and line["verdict"] != "allow"), line
        if form == "contents":
            assert isinstance(line["arguments"], dict), line
            assert "call" not in line, line
            assert ("result" in line or "error" in line) != refused, line
        else:
            assert "arguments" not in line, line
            assert "result" not in line, line
            assert isinstance(line["call"], str), line
            assert ("outcome" in line) != refused, line


@dataclass(frozen=True)
class Replayed:
    """What ``replay --json`` printed: one judged line per input line, and its advice on stderr."""

    lines: list[dict[str, Any]]
    stderr: str


async def replay(log: Path, settings: Mapping[str, str], *, config: Path | None, directory: Path) -> Replayed:
    """``python -m mcp_loop_guard replay --json [--config F] LOG``, with the settings in its environment."""
    argv = [*guard_argv(), "replay", "--json", *(["--config", str(config)] if config else [])]
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [*argv, str(log)], env=server_environment("replay", settings), cwd=directory, check=False
        )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr
    return Replayed([json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()], stderr)


def check_replayed(
    lines: Sequence[Mapping[str, Any]], replayed: Replayed, scenarios: Sequence[Scenario], form: LogForm
) -> None:
    """Replay judges every line of the event log as the live guard did, and suggests scrubbing where it helps."""
    assert [line["line"] for line in replayed.lines] == list(range(1, len(lines) + 1))
    differing = [
        f"line {number}: {line['tool']} live {logged(line)} replayed {logged(again)}"
        for number, (line, again) in enumerate(zip(lines, replayed.lines, strict=True), start=1)
        if (line["session"], line["tool"], logged(line)) != (again["session"], again["tool"], logged(again))
    ]
    assert not differing, "\n".join(differing)
    for scenario in scenarios:
        if form == "contents" and scenario.suggests is not None:
            assert f"LOOP_GUARD_SCRUB={scenario.suggests} would count them" in replayed.stderr, replayed.stderr
