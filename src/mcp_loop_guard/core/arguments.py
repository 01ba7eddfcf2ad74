"""A call's arguments as the detector compares them: trivial differences left out.

An agent stuck on one call often varies it in ways that change nothing: a fresh request id,
idempotency key or ``reason``, an extra space, a trailing slash, ``4182`` for ``"4182"``, a
list in another order, an invisible character. Compared byte for byte, each variant is a new
call and no streak ever forms. Two forms are compared instead of the raw arguments:

- the **key** form (:func:`normalized`): volatile and ignored arguments dropped, short strings
  put in Unicode NFKC form without invisible characters or surrounding spaces, trailing
  slashes removed, numeric strings read as numbers, lists of plain values sorted, and letter
  case folded where the operator asked. Bursts and side effects compare this form: they have
  no result to confirm that two calls were the same.
- the **loose** form (``scrub_values=True``): the key form with runs of spaces collapsed and
  volatile values (timestamps, UUIDs, long hex ids, random tokens) replaced. Only families
  that also require an identical result compare it, so a loose match is never taken on the
  arguments alone.

Strings longer than :data:`SHORT` are content (a file to write, code to run) and stay exact:
their spaces and case mean something.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from mcp_loop_guard.core.scrub import PRESETS, dropper, parse_path

__all__ = ["SHORT", "VOLATILE_NAMES", "ArgumentRules", "forms", "loose_text", "normalized"]

SHORT: Final = 512
"""Longest string normalized; longer ones are content and compared exactly."""
DEPTH: Final = 32
"""Nesting below this depth is compared exactly (the fingerprint itself has no depth limit)."""
VOLATILE_NAMES: Final = frozenset(
    {
        "requestid",
        "clientrequestid",
        "idempotencykey",
        "idempotencytoken",
        "clienttoken",
        "dedupeid",
        "deduplicationid",
        "nonce",
        "correlationid",
        "traceid",
        "spanid",
        "timestamp",
        "reason",
        "reasoning",
        "thought",
        "thoughts",
        "rationale",
        "explanation",
        "justification",
    }
)
"""Top-level argument names (lower case, without ``_`` and ``-``) that never make a call another call:
ids minted per request, and the model's own commentary on why it calls."""
_VALUE_PRESETS: Final = ("timestamps", "uuids", "hexids", "tokens")
_PLACEHOLDER: Final = "\x00"
_MAY_LOOSEN: Final = re.compile(r"\d\d|\s\s|[\t\n\r]|-[0-9a-fA-F]{4}-|_[0-9A-Za-z]{12}")
"""A string the loose form may change: two digits in a row (timestamps, long ids), a UUID's inside, a
prefixed token, or a run of spaces. Most strings have none and skip the volatile patterns."""
_NUMBER: Final = re.compile(r"-?(?:0|[1-9]\d{0,17})(?:\.\d{1,17})?")
_INVISIBLE: Final = frozenset({"Cf", "Cc", "Zl", "Zp"})
"""Unicode categories removed from short strings (zero-width spaces, joiners, BOMs, soft hyphens,
control characters); ordinary whitespace is handled apart."""
ALL: Final = "*"


@dataclass(frozen=True, slots=True)
class ArgumentRules:
    """What an operator says about one tool's arguments (names are top-level argument names)."""

    ignore: tuple[str, ...] = ()
    """Arguments left out of the comparison: names, or JSON paths (``$.options.seed``, ``$..nonce``)."""
    ordered: tuple[str, ...] = ()
    """Lists whose order matters (``*``: every list); other lists of plain values compare as sets."""
    case_insensitive: tuple[str, ...] = ()
    """Arguments compared without letter case (``*``: every short string)."""

    def __post_init__(self) -> None:
        """Reject malformed JSON paths early.

        Raises:
            ValueError: a path that cannot be parsed.
        """
        for name in self.ignore:
            if name.startswith("$"):
                parse_path(name)


NO_RULES: Final = ArgumentRules()


def forms(arguments: Mapping[str, Any] | None, rules: ArgumentRules) -> tuple[dict[str, Any], dict[str, Any]]:
    """The key form and the loose form of a call's arguments (new values; the input is not changed).

    The loose form is the key form itself, not a copy, when no short string in it could loosen.
    """
    if not arguments:
        return {}, {}
    drop = _ignored(rules.ignore)
    kept = {k: v for k, v in arguments.items() if _folded_name(k) not in VOLATILE_NAMES and k not in drop.names}
    if drop.paths:
        kept = drop.paths(kept)
    loosens: list[bool] = []
    key: dict[str, Any] = {}
    for name, value in kept.items():
        ordered = ALL in rules.ordered or name in rules.ordered
        fold = ALL in rules.case_insensitive or name in rules.case_insensitive
        key[name] = _value(value, loosens, ordered=ordered, fold=fold, depth=0)
    if not loosens:
        return key, key
    return key, {name: _loosen(value, depth=0) for name, value in key.items()}


def normalized(arguments: Mapping[str, Any] | None, rules: ArgumentRules, *, scrub_values: bool) -> dict[str, Any]:
    """The key form (or, with ``scrub_values``, the loose form) of a call's arguments."""
    key, loose = forms(arguments, rules)
    return loose if scrub_values else key


@cache
def _folded_name(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def _value(value: Any, loosens: list[bool], *, ordered: bool, fold: bool, depth: int) -> Any:
    """The key form of one value; notes in ``loosens`` a short string the loose form would change."""
    if isinstance(value, str):
        if len(value) > SHORT:
            return value
        normal = _key_text(value)
        if isinstance(normal, str):
            if fold:
                normal = normal.casefold()
            if not loosens and _MAY_LOOSEN.search(normal):
                loosens.append(True)
        return normal
    if depth >= DEPTH:
        return value
    if isinstance(value, Mapping):
        return {k: _value(v, loosens, ordered=ordered, fold=fold, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        items = [_value(v, loosens, ordered=ordered, fold=fold, depth=depth + 1) for v in value]
        if not ordered and all(_plain(item) for item in items):
            items.sort(key=_order)
        return items
    return value


def _loosen(value: Any, *, depth: int) -> Any:
    """The loose form of a value already in key form."""
    if isinstance(value, str):
        return value if len(value) > SHORT else loose_text(value)
    if depth >= DEPTH:
        return value
    if isinstance(value, Mapping):
        return {k: _loosen(v, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_loosen(v, depth=depth + 1) for v in value]
    return value


def _plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _order(value: object) -> tuple[str, str]:
    """A total order over plain values of mixed types."""
    return type(value).__name__, repr(value)


def _key_text(value: str) -> Any:
    """One short string in the key form: NFKC, no invisible characters, trimmed, a number if it is one."""
    if not value.isascii():
        value = unicodedata.normalize("NFKC", value)
        value = "".join(ch for ch in value if unicodedata.category(ch) not in _INVISIBLE or ch in "\t\n\r")
    value = value.strip()
    if len(value) > 1 and value.endswith("/"):
        value = value.rstrip("/") or "/"
    if _NUMBER.fullmatch(value):
        return float(value) if "." in value else int(value)
    return value


def loose_text(value: str) -> str:
    """A text with runs of spaces collapsed and volatile values replaced (an error that echoes its call's
    arguments, or a request id, reads the same whatever the variant)."""
    return _VOLATILE_VALUES.sub(_PLACEHOLDER, " ".join(value.split()))


_VOLATILE_VALUES: Final = re.compile("|".join(f"(?:{PRESETS[name]})" for name in _VALUE_PRESETS))


@dataclass(frozen=True, slots=True)
class _Drop:
    names: frozenset[str]
    paths: Callable[[dict[str, Any]], dict[str, Any]] | None


@cache
def _ignored(ignore: tuple[str, ...]) -> _Drop:
    """The names and JSON paths of ``ignoreArgs``, compiled once per rule set."""
    names = frozenset(name for name in ignore if not name.startswith("$"))
    paths = tuple(name for name in ignore if name.startswith("$"))
    return _Drop(names, dropper(paths) if paths else None)
