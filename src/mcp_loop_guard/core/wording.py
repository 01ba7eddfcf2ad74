"""What the model reads: one warning and one refusal text per loop family.

Texts name the tool and the pattern, never argument values (every copy of a pattern in the
context makes repeating it more likely), and say what to do instead, not only what not to do.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp_loop_guard.core.model import Family

INSTEAD = (
    "Change your approach (another tool or other arguments), or give your final answer if you already "
    "have what you need."
)


def _tools(tools: Sequence[str]) -> str:
    return " -> ".join(f"`{tool}`" for tool in tools)


def _when(count: int, block: int, noun: str, nouns: str) -> str:
    """When refusals start: ``noun`` for the next one, ``nouns`` (its plural) for the later ones."""
    if not block:
        return ""
    if count >= block - 1:
        return f" The next {noun} will be refused."
    return f" {nouns[0].upper()}{nouns[1:]} will be refused from call #{block}."


def warning(family: Family, tool: str, count: int, block: int, cycle: Sequence[str] = ()) -> str:  # noqa: PLR0911 - a text per family
    """The note appended to a real result once a pattern reaches its warning threshold."""
    if family is Family.CYCLE:
        return (
            f"Loop guard warning: the same {len(cycle)}-step cycle ({_tools(cycle)}) has now repeated {count} "
            f"times with the same results each time, so it is not making progress."
            f"{_when(count, block, 'repetition of the cycle', 'repetitions of the cycle')} Break the cycle. {INSTEAD}"
        )
    if family is Family.RECURRING:
        return (
            f"Loop guard warning: `{tool}` has now been called {count} times with the same arguments among your "
            f"recent calls, with other calls in between, and returned the same result each time, so repeating it "
            f"is not making progress.{_when(count, block, 'identical call', 'identical calls')} Use the answer you "
            f"already have. {INSTEAD}"
        )
    if family is Family.SAME_ERROR:
        return (
            f"Loop guard warning: `{tool}` has now failed {count} times with the same error, with different "
            f"arguments or other calls between. Rewording the arguments is not fixing it: read the error, check "
            f"its cause (permissions, paths, credentials, the tool's purpose), or use another approach."
            f"{_when(count, block, 'call to this tool', 'calls to this tool')}"
        )
    if family is Family.SAME_RESULT:
        return (
            f"Loop guard warning: `{tool}` has returned the same result {count} times among its recent calls, "
            f"for different arguments. Varying the arguments is not changing the outcome: try another tool or "
            f"source, or conclude with what you have.{_when(count, block, 'call to this tool', 'calls to this tool')}"
        )
    if family is Family.BURST:
        return (
            f"Loop guard warning: this response asked for `{tool}` with identical arguments {count} times at "
            f"once. One call gives the answer; the copies are waste."
            f"{_when(count, block, 'identical copy', 'identical copies')} "
            "Ask for each distinct call once."
        )
    if family is Family.SIDE_EFFECT:
        return (
            f"Loop guard warning: `{tool}` changes things outside (it is marked destructive and not idempotent) "
            f"and has now been called {count} times with identical arguments, which may have repeated its "
            f"effect. Check whether the earlier call already did what you wanted before calling it again."
            f"{_when(count, block, 'identical call', 'identical calls')}"
        )
    return (
        f"Loop guard warning: `{tool}` has now been called {count} times in a row with the same arguments "
        f"and returned the same result each time.{_when(count, block, 'identical call', 'identical calls')} {INSTEAD}"
    )


def refusal(family: Family, tool: str, count: int, cycle: Sequence[str] = ()) -> str:  # noqa: PLR0911 - a text per family
    """The text of an ``isError`` result standing in for a refused call."""
    if family is Family.CYCLE:
        return (
            f"Refused by the loop guard: this call would repeat the same {len(cycle)}-step cycle "
            f"({_tools(cycle)}) for the {_nth(count)} time, and every repetition returned the same results, so it "
            f"was not run. Do not continue the cycle: {INSTEAD}"
        )
    if family is Family.RECURRING:
        return (
            f"Refused by the loop guard: this would be call #{count} to `{tool}` with the same arguments among "
            f"your recent calls; the last {count - 1} all returned the same result, whatever you did in between, "
            f"so this call was not run. Use the answer you already have. {INSTEAD}"
        )
    if family is Family.SAME_ERROR:
        return (
            f"Refused by the loop guard: `{tool}` failed {count - 1} times with the same error whatever "
            "the arguments, so calling it again right away is refused. Read the error and address its cause "
            "(check what it depends on, change something), or use another approach."
        )
    if family is Family.SAME_RESULT:
        return (
            f"Refused by the loop guard: `{tool}` returned the same result {count - 1} times in a row for "
            f"different arguments, so this call was not run. {INSTEAD}"
        )
    if family is Family.BURST:
        return (
            f"Refused by the loop guard: this is identical copy #{count} of a call to `{tool}` in one response; "
            "the first copies already ask for the same thing, so this one was not run. Ask for each distinct "
            "call once."
        )
    if family is Family.SIDE_EFFECT:
        return (
            f"Refused by the loop guard: `{tool}` is destructive and not idempotent, and it was already called "
            f"{count - 1} times with these exact arguments, so this call was not run to avoid repeating its "
            "effect. If the earlier calls did not do what you wanted, find out why before trying anything else."
        )
    return (
        f"Refused by the loop guard: this is identical call #{count} to `{tool}`. The last {count - 1} identical "
        "calls (same tool, same arguments, up to ids, spacing and other trivial differences) all returned the "
        "same result, so this call was not run. Do not "
        "repeat it: change the tool, the arguments or your approach, or give your final answer with what you "
        "have."
    )


def held_back(family: Family, tool: str, count: int, cycle: Sequence[str] = ()) -> str:
    """Warn mode: the warning for a call that enforce mode would have refused (it was run)."""
    return (
        refusal(family, tool, count, cycle)
        .replace("Refused by the loop guard:", "Loop guard warning (this call was run, but it should not have been):")
        .replace(" was not run", " repeats a loop")
        .replace(" are refused", " are pointless")
    )


ABORTING = " The loop guard is closing this session now to stop the loop."


def _nth(count: int) -> str:
    suffix = "th" if 10 <= count % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(count % 10, "th")
    return f"{count}{suffix}"
