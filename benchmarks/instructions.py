"""Instructions per judged call, counted by valgrind: ``python -m benchmarks.instructions [--size smoke|full]``.

A change of a few percent in the guard's per-call work is lost in timings (runs of the same
code move by about 0.05x on a shared machine); an instruction count does not move. The loop
here does in one process, without the event loop, what the stdio relay does with a judged
call: parse the request, ``lifecycle.begin`` (the call's fingerprint, the detector's begin), parse
the answer, ``Call.answered`` (the result's fingerprint, the detector's finish, the durable
write of the agent's state to the default SQLite store's live file), write the answer's line.
Arguments and results differ on every call, so every call is judged and allowed.

It is counted under ``valgrind --tool=cachegrind --cache-sim=no``: N calls minus none,
divided by N. At full size each part is also counted with it taken out (patched in the loop's
process only, as ``unjudged_guard.py`` does; the guard has no switch for it), so the table
says what each costs; what is left is parsing and the relay's own code around them.
At smoke size only the total is counted (``tests/test_benchmarks_smoke.py`` runs each part's
loop without valgrind and checks that the part is gone from it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

SIZES = {"smoke": 50, "full": 2000}
"""Judged calls counted."""
PARTS = ("detector", "state write", "fingerprints")
"""What can be taken out of the loop, each on its own."""
_REPO = Path(__file__).resolve().parent.parent


class NotJudgedError(RuntimeError):
    """A call of the loop was not allowed: the count would not be of the path it claims to count."""


def _take_out(part: str) -> None:
    """Patch one part out of this process: the loop then runs without it."""
    # Imported here, not at the top: the table's process needs none of the guard.
    from mcp_loop_guard.core import detector
    from mcp_loop_guard.core.model import Action, CallKey, ResultKey, Verdict
    from mcp_loop_guard.store.agent import AgentLoop

    if part == "state write":

        async def _unsaved(self: AgentLoop, now: float, *, retry: bool = False) -> None:
            """Stands in for the write of the agent's state."""

        AgentLoop._save = _unsaved  # type: ignore[method-assign]
    elif part == "fingerprints":
        # Distinct keys from their first digit on: the detector's window keeps a result's leading digits only.
        counter = itertools.count()
        detector.call_key = lambda tool, arguments: CallKey(format(next(counter), "016x")[::-1] * 2)
        detector.result_key = lambda result: ResultKey(format(next(counter), "016x")[::-1] * 2)
    elif part == "detector":

        def _begin(state: Any, call: detector.Call, policy: Any, session: Any, now: float) -> Any:
            return detector.Ticket(0, call.tool, call.key, policy), Verdict(Action.ALLOW, call.tool, 0)

        def _finish(state: Any, ticket: detector.Ticket, outcome: Any, session: Any, now: float) -> Verdict:
            return Verdict(Action.ALLOW, ticket.tool, 0)

        detector.begin = _begin
        detector.finish = _finish
    else:
        raise ValueError(f"no part {part!r}: one of {', '.join(PARTS)}")


async def _loop(calls: int, count_writes: bool) -> dict[str, Any]:
    """``calls`` judged calls through the relay's own functions, with the guard's default store.

    Returns what they left: the detector's sequence (its last call keys) and, when
    ``count_writes`` (not while counting instructions), how many times the state was written.
    """
    from mcp_loop_guard.config import stdio_command_config
    from mcp_loop_guard.plan import plan as make_plan
    from mcp_loop_guard.proxy.downstream.agents import judge_for, opened_store, stdio_agent
    from mcp_loop_guard.proxy.relay.lifecycle import Call, begin
    from mcp_loop_guard.proxy.wire import messages as wire
    from mcp_loop_guard.settings import Settings

    plan = make_plan(stdio_command_config(["fixture-server"], None), Settings())
    spec = plan.config.servers[0]
    requests = [
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hello %d"},'
        b'"_meta":{"progressToken":%d}}}' % (i, i, i)
        for i in range(calls)
    ]
    answers = [
        b'{"result":{"content":[{"type":"text","text":"Echo: hello %d"}]},"jsonrpc":"2.0","id":%d}' % (i, i)
        for i in range(calls)
    ]
    async with opened_store(plan) as (store, health), stdio_agent(plan, spec, store, health) as agent:
        judge = judge_for(plan, agent, label="instructions", events=None)
        writes = 0
        if count_writes:
            save = store.save

            async def counted(*args: Any, **kwargs: Any) -> None:
                nonlocal writes
                writes += 1
                await save(*args, **kwargs)

            store.save = counted  # type: ignore[method-assign]
        for request, answer in zip(requests, answers, strict=True):
            message = wire.parse(request)
            assert isinstance(message, wire.Message)
            call = await begin(judge, spec.name, message)
            if not isinstance(call, Call):
                raise NotJudgedError(f"call {message.id} was refused: {call.answer.body}")
            reply = wire.parse(answer)
            assert isinstance(reply, wire.Message)
            await call.answered(reply)
            if reply.line() != answer + b"\n":
                raise NotJudgedError(f"the answer to call {message.id} was changed (warned?)")
        return {"sequence": [entry.call for entry in agent.state.history], "writes": writes}


def run_loop(calls: int, without: str | None, *, count_writes: bool = False) -> dict[str, Any]:
    """The loop in this process, with ``without`` taken out; its state in a directory of its own.

    Raises:
        NotJudgedError: a call was refused or its answer changed.
    """
    if without is not None:
        _take_out(without)
    with tempfile.TemporaryDirectory(prefix="mcp-loop-guard-instructions-") as directory:
        os.environ["LOOP_GUARD_STATE"] = f"sqlite:///{directory}/state.db"
        return anyio.run(_loop, calls, count_writes)


def _loop_command(calls: int, without: str | None) -> list[str]:
    command = [sys.executable, "-m", "benchmarks.instructions", "--loop", str(calls)]
    return command + (["--without", without] if without is not None else [])


def _instructions(valgrind: str, command: list[str]) -> int:
    """Instructions the command executed, all of its run (valgrind's ``I refs``)."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "cachegrind.out"
        done = subprocess.run(
            [valgrind, "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", *command],
            cwd=_REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"`{' '.join(command)}` failed under valgrind:\n{done.stderr[-3000:]}")
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"valgrind wrote no summary for `{' '.join(command)}`")


def per_call(valgrind: str, calls: int, without: str | None = None) -> float:
    """Instructions per judged call: ``calls`` calls minus none."""
    counted = _instructions(valgrind, _loop_command(calls, without))
    return (counted - _instructions(valgrind, _loop_command(0, without))) / calls


def main(argv: list[str] | None = None) -> int:
    """Print the table (or, with ``--loop``, be the loop valgrind counts)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--loop", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--without", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--summary", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop is not None:
        left = run_loop(args.loop, args.without, count_writes=args.summary)
        if args.summary:
            print(json.dumps(left))
        return 0
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("error: valgrind is needed to count instructions (apt-get install valgrind)", file=sys.stderr)
        return 2
    # rich is imported here, not at the top: every count runs this module's start-up under valgrind
    # twice (the loop and the loop of none), and rich is a tenth of it.
    from rich.console import Console
    from rich.table import Table

    calls = SIZES[args.size]
    total = per_call(valgrind, calls)
    table = Table(title=f"Instructions per judged call ({calls} calls, valgrind cachegrind)")
    for column in ("what", "instructions per call", "share"):
        table.add_column(column, justify="left" if column == "what" else "right")
    table.add_row("parse and judge a small call, in all", f"{total:,.0f}", "100%")
    rest = total
    parts = PARTS if args.size == "full" else ()
    for part in parts:
        cost = total - per_call(valgrind, calls, part)
        rest -= cost
        table.add_row(f"  {part}", f"{cost:,.0f}", f"{cost / total:.0%}")
    if parts:
        table.add_row("  the rest: parsing, the relay's code around the parts", f"{rest:,.0f}", f"{rest / total:.0%}")
    Console(width=110).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
