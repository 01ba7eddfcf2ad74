"""W3C Trace Context from clients, checked before the guard reads it or passes it on.

A client's ``traceparent`` and ``tracestate`` (in a request's ``_meta`` or its HTTP
headers) go to the upstream and to the guard's own tracer. Unchecked, a client could send
100 KB of ``tracestate``, or control characters, to both. So each value must follow the
spec (https://www.w3.org/TR/trace-context/): a ``traceparent`` of the version-00 form
(later versions: that form's first 55 characters, then ``-`` and more), with non-zero ids
in lower-case hex; a ``tracestate`` of at most 32 list members, each a key of at most 256
characters (``tenant@system`` keys too) and a value of at most 256 printable characters,
no key twice. A ``traceparent`` that fails drops the ``tracestate`` with it (the spec
reads no ``tracestate`` without one); a ``tracestate`` that fails is dropped alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["CARRIER_KEYS", "checked_carrier", "checked_headers", "checked_meta"]

CARRIER_KEYS = ("traceparent", "tracestate")
"""W3C trace context keys, in ``params._meta`` and in HTTP headers."""
MAX_MEMBERS = 32
MAX_FUTURE_TRACEPARENT = 512
"""A later version's ``traceparent`` may carry more fields; this many characters at most."""

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[\x21-\x7e]*)?")
_KEY = r"(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = re.compile(rf"({_KEY})=({_VALUE})")
_NO_TRACE = "0" * 32
_NO_PARENT = "0" * 16


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a ``traceparent`` the spec accepts."""
    if len(value) > MAX_FUTURE_TRACEPARENT or (found := _TRACEPARENT.fullmatch(value)) is None:
        return False
    version, trace, parent, _, more = found.groups()
    if version == "ff" or (version == "00" and more is not None):
        return False
    return trace != _NO_TRACE and parent != _NO_PARENT


def valid_tracestate(value: str) -> bool:
    """Whether ``value`` is a ``tracestate`` the spec accepts (empty list members are allowed)."""
    if len(value) > MAX_MEMBERS * 514:  # no valid list is longer: cut the work on a huge one short
        return False
    keys: set[str] = set()
    for listed in value.split(","):
        member = listed.strip(" \t")
        if not member:
            continue
        found = _MEMBER.fullmatch(member)
        if found is None or found.group(1) in keys:
            return False
        keys.add(found.group(1))
    return len(keys) <= MAX_MEMBERS


def checked_carrier(carrier: Mapping[str, object]) -> dict[str, str]:
    """The trace context entries of ``carrier`` that may be used: none, ``traceparent``, or both."""
    parent = carrier.get("traceparent")
    if not isinstance(parent, str) or not valid_traceparent(parent):
        return {}
    state = carrier.get("tracestate")
    if isinstance(state, str) and valid_tracestate(state):
        return {"traceparent": parent, "tracestate": state}
    return {"traceparent": parent}


def checked_meta(meta: Mapping[str, Any]) -> dict[str, Any] | None:
    """``meta`` without trace context that fails the spec; None when it has none to drop (the common case)."""
    if not any(key in meta for key in CARRIER_KEYS):
        return None
    kept = checked_carrier(meta)
    if all(meta.get(key) == kept.get(key) for key in CARRIER_KEYS):
        return None
    return {**{key: value for key, value in meta.items() if key not in CARRIER_KEYS}, **kept}


def checked_headers(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """HTTP headers with the trace context kept only when it passes (one ``traceparent``; ``tracestate`` joined)."""
    if not any(key in (b"traceparent", b"tracestate") for key, _ in headers):
        return list(headers)
    parents = [value for key, value in headers if key == b"traceparent"]
    states = [value for key, value in headers if key == b"tracestate"]
    others = [(key, value) for key, value in headers if key not in (b"traceparent", b"tracestate")]
    if len(parents) != 1:
        return others  # none, or several (which the spec counts as none)
    carrier = {"traceparent": parents[0].decode("latin-1")}
    if states:
        carrier["tracestate"] = b",".join(states).decode("latin-1")
    return others + [(key.encode(), value.encode("latin-1")) for key, value in checked_carrier(carrier).items()]
