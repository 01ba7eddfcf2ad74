"""Request ids rewritten on the wire: a message keeps its bytes when its top-level id can be found in them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.proxy.wire import messages as wire
from mcp_loop_guard.proxy.wire.messages import Message

ids = st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=20))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["id", "a", "jsonrpc"]), inner, max_size=3)
    ),
    max_leaves=10,
)


def _parsed(raw: bytes) -> Message:
    parsed = wire.parse(raw)
    assert isinstance(parsed, Message)
    return parsed


@pytest.mark.parametrize(
    "raw",
    [
        b'{"jsonrpc":"2.0","id":7,"result":{"id":3,"content":[]}}',  # the Python SDK's order
        b'{"result":{"content":[{"id":1}]},"jsonrpc":"2.0","id":7}',  # the TypeScript SDK's order
        b'{"id":7,"jsonrpc":"2.0","result":{}}',
    ],
)
def test_the_rest_of_the_bytes_stay_as_they_came(raw: bytes) -> None:
    rewritten = wire.with_id(_parsed(raw), "guard-1")
    assert rewritten.raw is not None, "not written anew"
    assert rewritten.raw == raw.replace(b"7", b'"guard-1"')
    assert json.loads(rewritten.line()) == {**json.loads(raw), "id": "guard-1"}


def test_an_id_in_the_middle_is_written_anew() -> None:
    raw = b'{"result":{"x":{"id":7}},"id":7,"jsonrpc":"2.0"}'
    rewritten = wire.with_id(_parsed(raw), 8)
    assert json.loads(rewritten.line()) == {"result": {"x": {"id": 7}}, "id": 8, "jsonrpc": "2.0"}


@given(ident=ids, new=ids, result=json_values, last=st.booleans())
def test_the_top_level_id_alone_changes(ident: object, new: object, result: object, last: bool) -> None:
    body = (
        {"result": {"value": result}, "jsonrpc": "2.0", "id": ident}
        if last
        else {"jsonrpc": "2.0", "id": ident, "result": {"value": result}}
    )
    raw = json.dumps(body, separators=(",", ":")).encode()
    rewritten = wire.with_id(_parsed(raw), new)  # type: ignore[arg-type]
    assert json.loads(rewritten.line()) == {**body, "id": new}
    assert wire.response_id(rewritten.line()) == new
