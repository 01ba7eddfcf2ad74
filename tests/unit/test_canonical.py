"""Canonical JSON: one encoding per JSON value, for any depth, number or string."""

from __future__ import annotations

import json
import math
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mcp_loop_guard.core import _canonical
from mcp_loop_guard.core._canonical import _encode_c, _encode_fast, encode, encode_slow
from mcp_loop_guard.core.fingerprint import canonical_json

TEXT = st.text(st.characters() | st.characters(categories=["Cs"]))
"""Any string, lone surrogates included."""

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.floats(min_value=-1e20, max_value=1e20).map(round).map(float)
    | TEXT
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT | st.just("_meta"), inner, max_size=4),
    max_leaves=25,
)


def nested(depth: int, *, as_object: bool) -> Any:
    """A value nested ``depth`` levels deep, built without recursion."""
    value: Any = 0
    for _ in range(depth):
        value = {"k": value} if as_object else [value]
    return value


def test_compact_with_keys_sorted_at_every_level() -> None:
    """Keys are sorted recursively and there is no whitespace."""
    assert canonical_json({"b": {"d": 3, "c": [2, {"z": 1, "y": None}]}, "a": 1}) == (
        b'{"a":1,"b":{"c":[2,{"y":null,"z":1}],"d":3}}'
    )


def test_equal_numbers_encode_alike_but_booleans_stay_booleans() -> None:
    """1 and 1.0 are one number; true is not 1."""
    assert canonical_json(1) == canonical_json(1.0) == b"1"
    assert canonical_json(-0.0) == canonical_json(0) == b"0"
    assert canonical_json(True) == b"true"
    assert canonical_json([True, 1]) == b"[true,1]"
    assert canonical_json(1.5) == b"1.5"


def test_integral_floats_beyond_2_to_53_print_their_exact_value() -> None:
    """1e16 as a float and 10**16 as an int are equal numbers, so they encode alike."""
    assert canonical_json(1e16) == canonical_json(10**16) == b"10000000000000000"
    assert canonical_json(1e300) == str(int(1e300)).encode()


def test_huge_integers_print_past_the_interpreter_digit_limit() -> None:
    """10**5000 has more digits than int-to-str allows by default; it still encodes in full."""
    assert canonical_json(10**5000) == b"1" + b"0" * 5000
    assert canonical_json({"n": -(10**5000)}).startswith(b'{"n":-1000')


def test_nan_and_infinities_encode_deterministically() -> None:
    """NaN, Infinity and -Infinity have fixed encodings; NaN equals NaN here."""
    assert canonical_json([math.nan, math.inf, -math.inf]) == b"[NaN,Infinity,-Infinity]"
    assert canonical_json(float("nan")) == canonical_json(math.nan)


def test_unicode_and_lone_surrogates_encode() -> None:
    """Non-ASCII text is UTF-8; a lone surrogate does not crash and differs from a pair."""
    assert canonical_json("é\n") == '"é\\n"'.encode()
    lone = canonical_json("\ud83d\ude00")
    assert lone != canonical_json("\U0001f600")
    assert canonical_json(["\udc80"]) != canonical_json(["\udc81"])


@pytest.mark.parametrize("as_object", [False, True])
def test_ten_thousand_levels_of_nesting_encode(as_object: bool) -> None:
    """Depth is limited by memory, not by the recursion limit."""
    encoded = canonical_json(nested(10_000, as_object=as_object))
    assert encoded.count(b"[" if not as_object else b"{") == 10_000


def test_non_string_keys_are_coerced_deterministically() -> None:
    """Non-JSON keys encode as json.dumps would name them, in an order independent of insertion."""
    assert canonical_json({2: "b", 10: "a"}) == b'{"2":"b","10":"a"}'
    assert canonical_json({1: "x", "1": "y"}) == canonical_json({"1": "y", 1: "x"})


def test_tuples_are_arrays_and_mappings_are_objects() -> None:
    """Any sequence type of JSON arrays and any Mapping encode as their JSON form."""
    assert canonical_json((1, (2,))) == canonical_json([1, [2]])
    assert canonical_json(MappingProxyType({"b": 1, "a": 2})) == b'{"a":2,"b":1}'


def test_values_that_are_not_json_are_rejected() -> None:
    """Sets, bytes and objects raise TypeError; a cycle raises ValueError."""
    for value in ({1, 2}, b"raw", object()):
        with pytest.raises(TypeError):
            canonical_json({"x": [value]})
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="contains itself"):
        canonical_json(cycle)


def test_meta_is_dropped_only_when_asked() -> None:
    """_meta members vanish at any depth with drop_meta, and stay without it."""
    value = {"_meta": 1, "a": [{"_meta": {"x": 1}, "b": 2}]}
    assert encode(value, drop_meta=True) == b'{"a":[{"b":2}]}'
    assert canonical_json(value) == b'{"_meta":1,"a":[{"_meta":{"x":1},"b":2}]}'


@given(JSON, st.booleans())
@example(1.0, False)
@example({"v": "1.0"}, False)
@example({"_meta": 0}, True)
@example(10**5000, False)
@example({"v": 1e-05, "w": [0.0001, 1e16, 1.5e300, -0.0, 5e-324]}, False)
@example([math.nan, None, "null", math.inf], False)
@example({'\x7f\x1f\u2028\n"\\': "\x00\x08\x0c\r\t\u00e9\U0001f600"}, False)
@example({"é": 1, "z": 2, "\U0001f600": 3, "a": 4}, False)
@example(2**64 - 1, False)
@example([2**64, -(2**63) - 1], False)
def test_fast_paths_agree_with_the_iterative_encoder(value: Any, drop_meta: bool) -> None:
    """When a compiled encoder's output is used, it is byte for byte what the iterative one gives."""
    slow = encode_slow(value, drop_meta=drop_meta)
    fast = _encode_fast(value, drop_meta=drop_meta)
    assert fast is None or fast == slow
    c_encoded = _encode_c(value, drop_meta=drop_meta)
    assert c_encoded is None or c_encoded == slow
    assert encode(value, drop_meta=drop_meta) == slow


def test_orjson_encodes_the_common_case_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arguments of strings, ints, booleans and nesting never reach the C encoder (the fast path is live)."""

    def not_called(value: object, *, drop_meta: bool) -> bytes | None:
        raise AssertionError("the C encoder was asked")

    monkeypatch.setattr(_canonical, "_encode_c", not_called)
    value = {"path": "notes/a b.txt", "n": -3, "all": True, "tags": ["x", {"é": "\n"}]}
    assert encode(value, drop_meta=True) == encode_slow(value, drop_meta=True)


@given(JSON)
def test_output_parses_back_as_json_when_finite(value: Any) -> None:
    """Canonical JSON of values without NaN/infinity or surrogates is valid JSON."""
    encoded = canonical_json(value)
    try:
        text = encoded.decode("utf-8")
    except UnicodeDecodeError:  # a lone surrogate: valid only as surrogatepass bytes
        return
    if b"NaN" in encoded or b"Infinity" in encoded:
        return
    json.loads(text)
