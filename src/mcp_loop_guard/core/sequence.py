"""The agent's sequence of calls: how one more call, or a whole batch, is folded into the state.

Calls that start before any call of the current batch has completed form a batch (one model
response asking for several tools). When a batch ends, only its last-completing result joins
the sequence, counted once per member that completed with the same call and result; each of
its failures counts toward the same-error streak. A lone call is a batch of one.

The sequence is kept three ways: the last few entries with, per period, how many calls in a
row equalled the call one period earlier (identical calls and cycles); the window of recent
calls as short tokens (the same call with the same result, whatever came between); and the
current streaks of one error and of one result.
"""

from __future__ import annotations

import functools
import re
from typing import Final

from xxhash import xxh3_64

from mcp_loop_guard.core.policy import MAX_WINDOW, Policy
from mcp_loop_guard.core.state import (
    DIGEST,
    MAX_BATCHES,
    MAX_ERRORS,
    MAX_REFUSED,
    TOKEN,
    Batch,
    Entry,
    ErrorStreak,
    SameResult,
    State,
)

__all__ = [
    "MARK_TTL_SECONDS",
    "answered_news",
    "close_idle_window",
    "count_failure",
    "cycle_count",
    "decrement",
    "echoes",
    "expire",
    "failure_of",
    "find",
    "fold",
    "fold_completed",
    "fold_refused",
    "holding",
    "is_cycle",
    "member_token",
    "mentions",
    "open_batch",
    "recurrences",
    "settle",
    "size",
    "uncount",
]

MARK_TTL_SECONDS: Final = 900.0
"""A batch with no member begun or ended for this long was left by a process that died mid-call."""
_MOST: Final = MAX_WINDOW * TOKEN
"""The longest window a state holds (what a store reads back), even between two calls of a batch that
folds several of its members at once; each call then trims it to the session's own length."""
RESULT: Final = TOKEN - DIGEST - 1
"""Hex digits of a result kept in a window token: enough to tell one call's results apart."""
_HELD, _WRITE, _ERROR, _WAIT, _NEW = 1, 2, 4, 8, 16
"""Flags of a window token, as one hex digit after the call and result digits."""
_HEX16: Final = re.compile(r"[0-9a-f]{16}")
_DIGITS: Final = tuple("0123456789abcdefghijklmnopqrstuv")
"""One character of flags per token, 32 combinations."""
_HELDS: Final = frozenset(d for flags, d in enumerate(_DIGITS) if flags & _HELD)
_ERRORS: Final = frozenset(d for flags, d in enumerate(_DIGITS) if flags & _ERROR)
_NEWS_DIGITS: Final = frozenset(d for flags, d in enumerate(_DIGITS) if flags & _NEW)
_NEWS: Final = str.maketrans({d: "!" for flags, d in enumerate(_DIGITS) if flags & _NEW})
_STOPS: Final = {
    True: str.maketrans({d: "!" for flags, d in enumerate(_DIGITS) if flags & _WAIT}),
    False: str.maketrans({d: "!" for flags, d in enumerate(_DIGITS) if flags & (_WAIT | _WRITE)}),
}
"""Flag digits: a held token, an error's; news and the stops of a count (through writes, or not) as
tables that mark them "!" (one ``translate`` and ``find`` at C speed instead of a test per digit)."""


def size(state: State, session: Policy) -> None:
    """Fit what is remembered to the session's longest cycle and window (a new state, or new settings)."""
    wanted = session.cycle_max_period
    if len(state.runs) != wanted:
        state.runs = (state.runs + [0] * wanted)[:wanted]
        del state.history[:-wanted]
    if len(state.window) > session.recurring_window * TOKEN:
        state.window = state.window[-session.recurring_window * TOKEN :]


# --- one entry --------------------------------------------------------------------------------


def fold(state: State, entry: Entry, copies: int, failures: int | None = None) -> None:
    """Append one call (completed ``copies`` times identically) to the sequence; move every pattern.

    A held entry (a patient repeat) neither lengthens nor breaks the runs it continues.
    ``failures``: how many failures it adds to the same-error streak (a batch's every failure).
    """
    history, runs = state.history, state.runs
    call, result, held, known = entry.call, entry.result, entry.held, len(history)
    for period in range(1, len(runs) + 1):
        step = copies if period == 1 else 1
        prior = history[-period] if known >= period else None
        if prior is not None and prior.call == call and prior.result == result:
            if not held:
                runs[period - 1] += step
        else:
            runs[period - 1] = step - 1
    changed = _remember(state, entry)
    history.append(entry)
    del history[: -len(runs)]
    if entry.error:
        count_failure(state, entry.tool, entry.result, 0 if entry.held else copies if failures is None else failures)
        state.same = None
        return
    if changed:
        state.errors.clear()  # something changed what the failing tools depend on
    elif state.errors and not entry.says_nothing:  # an empty answer does not show the tool working
        state.errors = [e for e in state.errors if e.tool != entry.tool]  # the tool works again
    same = state.same
    if entry.acts:  # a write's acknowledgment ("OK", "staged", "sent") is the same for every item, as it should be
        state.same = None
        return
    if same is not None and same.tool == entry.tool and same.result == entry.result:
        if entry.held:
            return
        same.count += copies
        same.distinct += same.last_call != entry.call
        same.last_call = entry.call
    else:
        state.same = SameResult(entry.tool, entry.result, copies, entry.call, distinct=1)


def _remember(state: State, entry: Entry) -> bool:
    """Add the entry's token to the window. Returns whether the world may have changed for what comes after:
    a wait, or a write that succeeded and was not seen in the window."""
    answer = _fixed(entry.result)[:RESULT]
    mine = _fixed(entry.call) + answer
    fresh_write = entry.acts and not entry.error and not _holds(state.window, mine)
    new = not (entry.error or entry.says_nothing or entry.acts) and not _answered(state.window, answer)
    changed = entry.waits or fresh_write
    flags = (_HELD * entry.held) | (_WRITE * fresh_write) | (_ERROR * entry.error) | (_WAIT * entry.waits)
    flags |= _NEW * new
    state.window = (state.window + mine + _DIGITS[flags])[-_MOST:]  # :func:`size` trims it to the session's
    return changed


@functools.lru_cache(maxsize=64)  # each call's and result's key is asked for several times per call
def _fixed(key: str) -> str:
    """A fingerprint as the window keeps it: 16 lower-case hex digits (a recorded key of another shape is
    hashed to that, so that tokens keep their width)."""
    if len(key) == DIGEST and _HEX16.fullmatch(key):
        return key
    return xxh3_64(key.encode("utf-8", "surrogatepass")).hexdigest()


def _answered(window: str, answer: str) -> bool:
    """A token of the window holds this answer (whatever the call)."""
    position = window.find(answer, DIGEST)
    while position >= 0:
        if position % TOKEN == DIGEST:
            return True
        position = window.find(answer, position + 1)
    return False


def _holds(window: str, prefix: str) -> bool:
    """A token of the window starts with ``prefix``."""
    position = window.find(prefix)
    while position >= 0:
        if position % TOKEN == 0:
            return True
        position = window.find(prefix, position + 1)
    return False


def recurrences(state: State, call: str, *, through_writes: bool = False) -> tuple[int, str, bool]:
    """(count, result, error): the latest result of ``call`` in the window and how many times in a row
    (other calls between) it came back unchanged, patient repeats not counted; (0, "", False) if absent.

    The count stops at a wait, at an answer of the call that differed (polling that moves on), unless
    ``through_writes`` at a write not seen before (what the call reads may have changed since: the same
    answer after new edits is worth a warning, not a refusal), and, for an answer that is no error, at any
    call between that answered something not seen before (browsing back to a results page between new
    products is not a loop; the same failure between new reads is), unless the call has since been asked
    again right after itself (nobody browses back to the page they are on).
    """
    window = state.window
    call = _fixed(call)
    position = window.rfind(call)
    if position < 0:
        return 0, "", False  # the common case, found at C speed
    flags = window[TOKEN - 1 :: TOKEN]
    first = max(flags.translate(_STOPS[through_writes]).rfind("!") * TOKEN, 0)  # 0 when there is none
    news = ""  # the news flags, marked once needed
    count, result, error, stuck = 0, "", False, False
    after = len(flags)
    while position >= first:
        if position % TOKEN == 0:
            index = position // TOKEN
            answer, flag = window[position + DIGEST : position + TOKEN - 1], flags[index]
            if not result:
                result, error = answer, flag in _ERRORS
            elif answer != result:
                break
            if not error and not stuck and index + 1 < after:
                news = news or flags.translate(_NEWS)
                if news.find("!", index + 1, after) >= 0:
                    break  # news came between: a page to come back to, not a loop
            count += flag not in _HELDS
            stuck = stuck or after == index + 1 < len(flags)  # asked again right away: not browsing back
            after = index
        position = window.rfind(call, 0, position + len(call) - 1)
    return count, result, error


def echoes(state: State, result: str) -> tuple[int, int]:
    """(answers, calls): how many times this result came back in the window, counting back from the
    latest, and for how many different calls; patient repeats not counted.

    The count stops at a wait, at a write not seen before, and at any answer between that told something
    not seen before, as :func:`recurrences` does. The window is searched for the answer at C speed: only
    the tokens holding it are looked at.
    """
    window = state.window
    answer = _fixed(result)[:RESULT]
    position = window.rfind(answer, DIGEST)
    if position < 0:
        return 0, 0
    flags = window[TOKEN - 1 :: TOKEN]
    stop = flags.translate(_STOPS[False]).rfind("!")  # -1 when there is none
    news = ""
    count, after = 0, len(flags)
    calls: set[str] = set()
    while position >= DIGEST:
        index = position // TOKEN
        if index <= stop:
            break
        if position % TOKEN == DIGEST:
            if index + 1 < after:
                news = news or flags.translate(_NEWS)
                if news.find("!", index + 1, after) >= 0:
                    break
            if flags[index] not in _HELDS:
                count += 1
                calls.add(window[position - DIGEST : position])
            after = index
        position = window.rfind(answer, DIGEST, position + RESULT - 1)
    return count, len(calls)


def answered_news(state: State) -> bool:
    """The window's latest call (the one just folded in) answered what no call before it in the window had."""
    return state.window[-1:] in _NEWS_DIGITS


def mentions(state: State, key: str, *, answer: bool = False) -> int:
    """How many times a call's fingerprint (or, ``answer``, a result's) shows in the window: at least as many
    as the tokens holding it, so that a count below a threshold rules a warning out without a walk.

    Tokens holding it are ``TOKEN`` apart, further than its length: each shows it once, or is hidden by
    one showing astride tokens (``count`` does not overlap), and no two are hidden by the same one.
    """
    fixed = _fixed(key)
    return state.window.count(fixed[:RESULT] if answer else fixed)


# --- cycles -----------------------------------------------------------------------------------


def is_cycle(history: list[Entry], period: int, run: int) -> bool:
    """A cycle has repeated in full at least once, is made of different calls, and waits nowhere.

    One call repeated with alternating results is polling, not a cycle; nor is a status checked
    again after each call to a ``wait`` tool.
    """
    if run < period:
        return False
    last = history[-period:]
    first = last[0].call
    return any(entry.call != first for entry in last) and not any(entry.waits for entry in last)


def cycle_count(run: int, period: int) -> int:
    """Occurrences of one position of a cycle: 1 + ceil(run / period) (period 1: the streak)."""
    return 1 + -(-run // period)


# --- batches ----------------------------------------------------------------------------------


def find(state: State, ident: int) -> Batch | None:
    """The open batch with this id, if it is still open."""
    for batch in state.batches:
        if batch.id == ident:
            return batch
    return None


def open_batch(state: State, session: Policy) -> Batch:
    """A new batch. What earlier batches have completed joins the sequence first."""
    while len(state.batches) >= MAX_BATCHES:
        settle(state, state.batches[0], session, state.batches[0].touched)
    fold_completed(state)
    batch = Batch(state.next_batch)
    state.next_batch += 1
    state.batches.append(batch)
    return batch


def fold_completed(state: State) -> None:
    """What earlier batches have completed joins the sequence: a call made after another one has
    completed saw that result, even while a long call of its batch is still running. Its copies
    still in flight, and refused ones, go on counting as copies."""
    for earlier in state.batches:
        entry = earlier.last
        if entry is None:
            continue
        _fold_batch(state, earlier, entry)
        earlier.held = False  # its patience is spent; later completions continue the streak
        for done, count in earlier.done.items():
            uncount(earlier, done[:DIGEST], count)
        earlier.last = None
        earlier.done.clear()
        earlier.failed.clear()


def _fold_batch(state: State, batch: Batch, entry: Entry) -> None:
    """Fold what a batch completed: its last result and its copies into the sequence, every other member
    into the window, and every failure into the same-error streak it continues."""
    copies = batch.done.get(batch.last_done, 1)
    failures = None
    if batch.failed:  # most batches end without a failure
        last = failure_key(entry.tool, entry.result)
        for failed, count in batch.failed.items():
            if failed != last:
                tool, result = failed.split("\x00", 1)
                count_failure(state, tool, result, count)
        failures = batch.failed.get(last, copies) if entry.error else None
    entry.held = entry.held or batch.held
    state.window = (state.window + batch.seen)[-_MOST:]
    batch.seen = ""
    fold(state, entry, copies, failures)


def count_failure(state: State, tool: str, result: str, count: int) -> None:
    """``count`` more failures of ``tool`` with this error. A tool failing another way ends this error's run
    (warnings follow runs), not its count: an agent alternating between two wrong calls is no nearer to
    working, and the count ends only when the tool works or something changes. Other tools' failures are kept."""
    found = next((e for e in state.errors if e.tool == tool and e.result == result), None)
    for other in state.errors:
        if other.tool == tool and other is not found:
            other.run = 0
    state.errors = [e for e in state.errors if e is not found]
    if found is None:
        found = ErrorStreak(tool, result, 0, 0)
    found.count += count
    found.run += count
    state.errors.append(found)
    del state.errors[:-MAX_ERRORS]


def failure_of(state: State, tool: str, result: str) -> ErrorStreak | None:
    """The count of one tool's one error, if it is counted."""
    return next((e for e in state.errors if e.tool == tool and e.result == result), None)


def member_token(entry: Entry) -> str:
    """The window token of a batch member that did not complete its batch (no write seen: a batch is one step)."""
    flags = (_HELD * entry.held) | (_ERROR * entry.error) | (_WAIT * entry.waits) | _NEW
    return _fixed(entry.call) + _fixed(entry.result)[:RESULT] + _DIGITS[flags]


def failure_key(tool: str, result: str) -> str:
    """A batch's count of one tool's one failure."""
    return f"{tool}\x00{result}"


def uncount(batch: Batch, call: str, count: int) -> None:
    """``count`` members with this call are no longer copies in flight."""
    decrement(batch.members, call, count)


def decrement(counts: dict[str, int], key: str, count: int) -> None:
    """Take ``count`` off a key's count, forgetting the key at zero."""
    left = counts.get(key, 0) - count
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def holding(state: State, call: str) -> Batch | None:
    """The latest unsettled batch with copies of ``call`` in flight."""
    for batch in reversed(state.batches):
        if call in batch.members:
            return batch
    return None


def settle(state: State, batch: Batch, session: Policy, now: float, *, keep_refused: bool = False) -> Entry | None:
    """End a batch: fold its last-completing result into the sequence. Returns that entry.

    Its refused copies then lengthen the streak (``keep_refused``: the caller does that, after
    judging the last answer on the copies that were answered).
    """
    state.batches.remove(batch)
    entry = batch.last
    if entry is not None:
        _fold_batch(state, batch, entry)
    if not keep_refused:
        fold_refused(state, batch)
    if not state.batches:
        state.idle_since = now
    del session  # the session's rules do not change how a batch ends
    return entry


def fold_refused(state: State, batch: Batch) -> None:
    """A batch's refused copies of the call that ended the sequence count in its streak: the agent made them."""
    history = state.history
    for call, count in batch.refused.items():
        if history and state.runs and history[-1].call == call:
            state.runs[0] += count
    batch.refused.clear()


def expire(state: State, session: Policy, now: float) -> None:
    """Settle batches left by a process that died mid-call."""
    for batch in list(state.batches):
        if now - batch.touched >= MARK_TTL_SECONDS:
            settle(state, batch, session, batch.touched + MARK_TTL_SECONDS)


def close_idle_window(state: State, session: Policy, now: float) -> None:
    """Start a new request window after ``reset_after_seconds`` with nothing going on.

    Refusals start over, side effects are forgotten, and each call refused in the window that
    ends may go through once more: the world may have changed since (the user's next request).
    """
    idle_since = state.idle_since
    if idle_since is not None and now - idle_since >= session.reset_after_seconds:
        state.blocks = 0
        state.effects.clear()
        state.probes = state.refused[-MAX_REFUSED:]
        state.refused = []
