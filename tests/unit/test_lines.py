"""Newline framing: any chunking of a stream gives back its lines, and lines over the limit are dropped whole."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from mcp_loop_guard.proxy.wire.lines import LineReader, Oversized

LIMIT = 300
LINES = st.lists(st.binary(max_size=2 * LIMIT).map(lambda raw: raw.replace(b"\n", b" ")), max_size=8)


def framed(reader: LineReader, stream: bytes, cuts: list[int]) -> list[bytes | Oversized]:
    """Feed ``stream`` cut at ``cuts``, then the end of the stream."""
    out: list[bytes | Oversized] = []
    start = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        out += reader.feed(stream[start:cut])
        start = cut
    return out


@given(LINES, st.lists(st.integers(min_value=0, max_value=5000), max_size=12))
def test_any_chunking_gives_back_the_lines_and_drops_the_long_ones(lines: list[bytes], cuts: list[int]) -> None:
    """Short lines come back byte for byte; a line over the limit comes back as its size."""
    stream = b"".join(line + b"\n" for line in lines)
    got = framed(LineReader(LIMIT), stream, [cut for cut in cuts if cut <= len(stream)])
    expected = [line if len(line) <= LIMIT else Oversized(len(line), None) for line in lines]
    assert [g if isinstance(g, bytes) else Oversized(g.size, None) for g in got] == expected


@given(st.integers(min_value=1, max_value=400), st.sampled_from([7, 4096]), st.booleans())
def test_an_oversized_line_keeps_its_id_read_from_either_end(chunk: int, ident: int, id_last: bool) -> None:
    """The id of a dropped message is read from its first or last bytes, however it was cut."""
    padding = "x" * 5000
    body = (
        {"result": {"text": padding}, "jsonrpc": "2.0", "id": ident}
        if id_last
        else {
            "jsonrpc": "2.0",
            "id": ident,
            "result": {"text": padding},
        }
    )
    stream = json.dumps(body, separators=(",", ":")).encode() + b'\n{"jsonrpc":"2.0","id":2,"result":{}}\n'
    got = framed(LineReader(LIMIT), stream, list(range(chunk, len(stream), chunk)))
    assert got[0] == Oversized(len(stream) - len(b'{"jsonrpc":"2.0","id":2,"result":{}}\n') - 1, ident)
    assert got[1:] == [b'{"jsonrpc":"2.0","id":2,"result":{}}']
