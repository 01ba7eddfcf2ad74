"""W3C Trace Context as the guard checks it: what the spec accepts passes, the rest is dropped."""

from __future__ import annotations

import pytest

from mcp_loop_guard.trace_context import checked_carrier, checked_headers, checked_meta, valid_tracestate

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("traceparent", "valid"),
    [
        (PARENT, True),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", True),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later-fields", True),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", False),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
        (PARENT.upper(), False),
        (f"00-{'0' * 32}-00f067aa0ba902b7-01", False),
        (f"00-4bf92f3577b34da6a3ce929d0e0e4736-{'0' * 16}-01", False),
        (PARENT[:-1], False),
        (PARENT + "\r\n", False),
        (" " + PARENT, False),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + "x" * 600, False),
    ],
)
def test_traceparent_forms(traceparent: str, valid: bool) -> None:
    """Version 00 exactly; a later version may add fields; hex in lower case, ids not all zero; no version ff."""
    assert bool(checked_carrier({"traceparent": traceparent})) is valid


@pytest.mark.parametrize(
    ("tracestate", "valid"),
    [
        ("congo=t61rcWkgMzE", True),
        ("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE ,", True),
        ("tenant1@vendor=v, a_b-c*d/e=x y", True),
        (",".join(f"k{n}=v" for n in range(32)), True),
        ("k=" + "v" * 256, True),
        (",".join(f"k{n}=v" for n in range(33)), False),
        ("k=" + "v" * 257, False),
        ("k" * 257 + "=v", False),
        ("k=v,k=w", False),
        ("K=v", False),
        ("k=a=b", False),
        ("k=v ", True),
        ("k= ", False),
        ("k=v\r\nX-Other: y", False),
        ("k=v\x00", False),
        ("a=" + "x" * 100_000, False),
    ],
)
def test_tracestate_forms(tracestate: str, valid: bool) -> None:
    """At most 32 members, keys and values of at most 256 characters, printable values without , or =, no key twice."""
    assert valid_tracestate(tracestate) is valid


def test_a_bad_traceparent_takes_its_tracestate_with_it() -> None:
    """The spec reads no tracestate without a valid traceparent."""
    assert checked_carrier({"traceparent": "junk", "tracestate": "k=v"}) == {}
    assert checked_carrier({"traceparent": PARENT, "tracestate": "k=a=b"}) == {"traceparent": PARENT}


def test_meta_keeps_everything_else_and_is_left_alone_when_valid() -> None:
    """Only the failing trace keys go; a valid context, or none, changes nothing (None: keep the message's bytes)."""
    assert checked_meta({"progressToken": 1}) is None
    assert checked_meta({"traceparent": PARENT, "tracestate": "k=v"}) is None
    assert checked_meta({"progressToken": 1, "traceparent": PARENT, "tracestate": "k=\n"}) == {
        "progressToken": 1,
        "traceparent": PARENT,
    }
    assert checked_meta({"tracestate": "k=v"}) == {}


def test_headers_keep_one_valid_context() -> None:
    """Repeated tracestate headers are one list; two traceparent headers are none; other headers are untouched."""
    accept = (b"accept", b"application/json")
    parent = (b"traceparent", PARENT.encode())
    assert checked_headers([accept]) == [accept]
    assert checked_headers([accept, parent, (b"tracestate", b"a=1"), (b"tracestate", b"b=2")]) == [
        accept,
        parent,
        (b"tracestate", b"a=1,b=2"),
    ]
    assert checked_headers([accept, parent, parent]) == [accept]
    assert checked_headers([parent, (b"tracestate", b"a=1,a=2")]) == [parent]
