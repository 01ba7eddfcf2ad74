"""Call and result fingerprints: what makes two calls or two results the same."""

from __future__ import annotations

import random
from types import MappingProxyType
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from mcp_loop_guard.core import call_key, result_key

from .test_canonical import JSON, TEXT, nested

JSON_FINITE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=25,
)
"""JSON values without NaN, so that Python's == can serve as the reference equality."""


def text(value: str, **extra: Any) -> dict[str, Any]:
    """A wire-form result with one text item."""
    return {"content": [{"type": "text", "text": value}], **extra}


def image(data: str, caption: str = "Screenshot", mime: str = "image/png") -> dict[str, Any]:
    """A wire-form result with a caption and an image."""
    return {"content": [{"type": "text", "text": caption}, {"type": "image", "mimeType": mime, "data": data}]}


def shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        items = [(key, shuffled(member, rng)) for key, member in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [shuffled(member, rng) for member in value]
    return value


def normal(value: Any) -> Any:
    """A comparable form in which == is JSON equality (booleans are not numbers)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, dict):
        return ("object", frozenset((key, normal(member)) for key, member in value.items()))
    if isinstance(value, list):
        return ("array", tuple(normal(member) for member in value))
    return value


def test_key_order_never_matters() -> None:
    """The issue's example: nested key order does not change the call."""
    assert call_key("t", {"a": 1, "b": {"c": 2, "d": 3}}) == call_key("t", {"b": {"d": 3, "c": 2}, "a": 1})


def test_array_order_matters() -> None:
    """[1, 2] and [2, 1] are different arguments."""
    assert call_key("t", {"a": [1, 2]}) != call_key("t", {"a": [2, 1]})


def test_numbers_compare_by_value_and_booleans_are_not_numbers() -> None:
    """1 and 1.0 make the same call; true and 1 do not."""
    assert call_key("t", {"n": 1}) == call_key("t", {"n": 1.0})
    assert call_key("t", {"n": True}) != call_key("t", {"n": 1})


def test_missing_arguments_are_empty_arguments() -> None:
    """None and {} are the same call."""
    assert call_key("t", None) == call_key("t", {})


def test_the_tool_is_part_of_the_call() -> None:
    """Same arguments to another tool are another call."""
    assert call_key("read", {"p": 1}) != call_key("write", {"p": 1})


def test_images_with_the_same_caption_and_different_bytes_differ() -> None:
    """The reference's blind spot: two screenshots with one caption are different results."""
    assert result_key(image("iVBORw0KGgoAAAA=")) != result_key(image("iVBORw0KGgoBBBB="))
    assert result_key(image("AAAA")) == result_key(image("AAAA"))
    assert result_key(image("AAAA", mime="image/png")) != result_key(image("AAAA", mime="image/jpeg"))


def test_audio_bytes_are_part_of_the_result() -> None:
    """Audio items differ by their data."""
    audio = [{"content": [{"type": "audio", "mimeType": "audio/wav", "data": d}]} for d in ("UklG", "UklH")]
    assert result_key(audio[0]) != result_key(audio[1])


def test_embedded_resources_and_links_are_part_of_the_result() -> None:
    """Resource text, blob, uri and resource-link fields all change the fingerprint."""

    def resource(**fields: Any) -> dict[str, Any]:
        return {"content": [{"type": "resource", "resource": {"uri": "file:///a", **fields}}]}

    keys = {
        result_key(resource(text="one")),
        result_key(resource(text="two")),
        result_key(resource(blob="b25l")),
        result_key(resource(blob="dHdv")),
        result_key({"content": [{"type": "resource", "resource": {"uri": "file:///b", "text": "one"}}]}),
        result_key({"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}]}),
        result_key({"content": [{"type": "resource_link", "uri": "file:///a", "name": "b"}]}),
    }
    assert len(keys) == 7


def test_structured_content_and_is_error_are_part_of_the_result() -> None:
    """structuredContent and isError change the fingerprint; absent isError is false."""
    assert result_key(text("x", structuredContent={"n": 1})) != result_key(text("x", structuredContent={"n": 2}))
    assert result_key(text("x", structuredContent={"n": 1})) != result_key(text("x"))
    assert result_key(text("x", isError=True)) != result_key(text("x"))
    assert result_key(text("x", isError=False)) == result_key(text("x"))


def test_meta_is_ignored_at_every_level() -> None:
    """_meta on the result, an item, a resource or inside structuredContent changes nothing."""
    plain = {
        "content": [{"type": "resource", "resource": {"uri": "u", "text": "t"}}],
        "structuredContent": {"a": {"b": 1}},
    }
    with_meta = {
        "_meta": {"progressToken": 7},
        "content": [{"type": "resource", "_meta": 1, "resource": {"uri": "u", "text": "t", "_meta": 2}}],
        "structuredContent": {"a": {"b": 1, "_meta": 3}},
    }
    assert result_key(plain) == result_key(with_meta)


def test_text_split_differently_across_items_differs() -> None:
    """["ab", "c"] and ["a", "bc"] are different results: fields are length-framed."""
    two = [
        {"content": [{"type": "text", "text": a}, {"type": "text", "text": b}]} for a, b in (("ab", "c"), ("a", "bc"))
    ]
    assert result_key(two[0]) != result_key(two[1])


def test_the_same_string_in_different_fields_differs() -> None:
    """A string as text, as image data or as a resource blob gives three different results."""
    keys = {
        result_key({"content": [{"type": "x", "text": "AAAA"}]}),
        result_key({"content": [{"type": "x", "data": "AAAA"}]}),
        result_key({"content": [{"type": "x", "resource": {"blob": "AAAA"}}]}),
        result_key({"content": [{"type": "x", "resource": {"text": "AAAA"}}]}),
    }
    assert len(keys) == 4


def test_unknown_item_types_are_hashed() -> None:
    """An item type this guard does not know still counts with all its fields."""
    widget = [{"content": [{"type": "widget", "spec": {"w": n}}]} for n in (1, 2)]
    assert result_key(widget[0]) != result_key(widget[1])
    assert result_key(widget[0]) == result_key({"content": [{"spec": {"w": 1}, "type": "widget"}]})


def test_malformed_results_are_hashed_as_they_are() -> None:
    """Content that is not a list, items that are not objects, odd fields: no crash, distinct keys."""
    odd = [
        {"content": "just a string"},
        {"content": ["a", 1, None]},
        {"content": [["nested"]]},
        {"content": [{"type": "text", "text": 5}]},
        {"content": [{"type": "text", "text": "5"}]},
        {"isError": "yes"},
        {"unexpected": {"field": True}},
        {},
    ]
    keys = {result_key(result) for result in odd}
    assert len(keys) == len(odd)
    assert result_key(["not", "a", "dict"]) != result_key({})  # type: ignore[arg-type]


def test_a_big_text_result_is_fingerprinted() -> None:
    """10 MB of text with one changed character gets another key (speed is in the docstring)."""
    big = "x" * 10_000_000
    assert result_key(text(big)) != result_key(text(big[:-1] + "y"))


@given(JSON_FINITE, st.randoms(use_true_random=False))
def test_call_key_ignores_key_order(arguments: Any, rng: random.Random) -> None:
    """Any permutation of object keys, at any depth, is the same call and the same result."""
    again = shuffled(arguments, rng)
    assert call_key("t", {"v": arguments}) == call_key("t", {"v": again})
    assert result_key({"structuredContent": arguments}) == result_key({"structuredContent": again})


@given(JSON_FINITE, JSON_FINITE)
@example(1, True)
@example({"a": 1}, {"a": 1.0})
@example("\ud83d\ude00", "\U0001f600")
@example(10**5000, 10**5000 + 1)
def test_keys_differ_exactly_when_the_json_values_differ(first: Any, second: Any) -> None:
    """Distinct JSON values never share a call key; equal ones always do."""
    same = normal(first) == normal(second)
    assert (call_key("t", {"v": first}) == call_key("t", {"v": second})) is same
    first_result, second_result = text("r", structuredContent=first), text("r", structuredContent=second)
    assert (result_key(first_result) == result_key(second_result)) is same


@given(TEXT, TEXT)
def test_distinct_texts_give_distinct_results(first: str, second: str) -> None:
    """Two text results share a key only when their texts are equal."""
    assert (result_key(text(first)) == result_key(text(second))) is (first == second)


@given(JSON)
def test_odd_json_never_crashes(value: Any) -> None:
    """Huge ints, NaN, infinities and lone surrogates anywhere fingerprint without error."""
    call_key("t", {"v": value})
    result_key({"content": [value, {"type": "text", "text": "x", "extra": value}], "structuredContent": value})


def test_deep_nesting_fingerprints() -> None:
    """10,000 levels of nesting in arguments and in structuredContent."""
    deep = nested(10_000, as_object=True)
    assert call_key("t", deep) != call_key("t", nested(9_999, as_object=True))
    assert result_key({"structuredContent": nested(10_000, as_object=False)})


@given(TEXT)
@example("")
@example("x" * 300_000)
def test_a_plain_text_item_is_fingerprinted_as_any_other_item(value: str) -> None:
    """Plain text items take a shortcut; their key must be the one the general path gives."""
    general = {"content": [MappingProxyType({"type": "text", "text": value})]}
    assert result_key(text(value)) == result_key(general)
    assert result_key(text(value)) != result_key({"content": [{"type": "text", "text": value, "x": 1}]})
