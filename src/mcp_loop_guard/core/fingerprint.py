"""Fingerprints of tool calls and tool results.

A call is identified by its tool name and its arguments in canonical JSON; a result by a
streaming hash over everything the model sees in it (text, image and audio bytes,
embedded resources, resource links, ``structuredContent`` and ``isError``), never ``_meta``.

The hash is XXH3-128, not a cryptographic one: a key only tells whether a call or a result
is the same as an earlier one of the same session, the detector keeps 64 bits of it, and a
party able to forge a collision (the upstream, for a result) could as well send the same
bytes again. SHA-256 cost a megabyte result 0.55 ms, as much as parsing it; XXH3 costs
0.02 ms.

Large string fields (``text``, ``data``, ``blob``) are fed to the hash as length-prefixed
UTF-8 instead of being escaped into JSON first, which keeps big results cheap: the cost is
one encode. Everything else goes through :func:`canonical_json`: about 25 ms per MB of
structured JSON, up to 90 ms per MB when it is full of integral floats, which need the
pure-Python encoder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from xxhash import xxh3_128

from mcp_loop_guard.core._canonical import META, encode
from mcp_loop_guard.core.model import CallKey, ResultKey

__all__ = ["call_key", "canonical_json", "result_key"]


def canonical_json(value: Any) -> bytes:
    """Encode JSON-like ``value`` canonically: sorted keys, no spaces, UTF-8.

    Numerically equal numbers encode alike (``1`` and ``1.0``) but booleans stay booleans;
    NaN and infinities become ``NaN``/``Infinity``/``-Infinity``; lone surrogates survive;
    ints print in full however long. Nesting depth is limited only by memory.

    Raises:
        TypeError: ``value`` holds something that is not JSON-like.
        ValueError: ``value`` contains itself.
    """
    return encode(value, drop_meta=False)


def call_key(tool: str, arguments: Mapping[str, Any] | None) -> CallKey:
    """Fingerprint of one call; missing arguments and ``{}`` are the same call."""
    payload = canonical_json([tool, {} if arguments is None else arguments])
    return CallKey(xxh3_128(payload).hexdigest())


def result_key(result: Mapping[str, Any]) -> ResultKey:
    """Fingerprint of what the model sees in a ``tools/call`` result in wire form.

    Every piece goes to the hash as a tagged, length-prefixed frame, so two results share
    a key only when their visible parts are equal. Malformed parts are hashed as they are.
    """
    digest = xxh3_128()
    if not isinstance(result, dict | Mapping):
        _frame(digest, b"R", encode(result, drop_meta=True))
        return ResultKey(digest.hexdigest())
    content = result.get("content")
    if isinstance(content, list):
        for item in content:
            _hash_item(digest, item)
    elif content is not None:
        _frame(digest, b"C", encode(content, drop_meta=True))
    structured = result.get("structuredContent")
    if structured is not None:
        _frame(digest, b"S", encode(structured, drop_meta=True))
    is_error = result.get("isError")
    if is_error is True:
        _frame(digest, b"E", b"")
    elif is_error is not None and is_error is not False:
        _frame(digest, b"e", encode(is_error, drop_meta=True))
    rest = {k: v for k, v in result.items() if k not in _RESULT_FIELDS}
    if rest:
        _frame(digest, b"X", encode(rest, drop_meta=True))
    return ResultKey(digest.hexdigest())


_RESULT_FIELDS: Final = frozenset({"content", "structuredContent", "isError", META})
_PLAIN_TEXT: Final = b'{"type":"text"}'
"""The canonical JSON of a text item's small fields, when it has no others."""
_ITEM_BIG_FIELDS: Final = (("text", b"t"), ("data", b"d"), ("blob", b"b"))
_RESOURCE_BIG_FIELDS: Final = (("text", b"T"), ("blob", b"B"))


def _hash_item(digest: xxh3_128, item: object) -> None:
    """Hash one content item: its small fields as canonical JSON, its big strings raw."""
    if type(item) is dict and len(item) == 2 and item.get("type") == "text" and type(item.get("text")) is str:
        _frame(digest, b"I", _PLAIN_TEXT)  # the most common item, framed as the general case below frames it
        _frame_text(digest, b"t", item["text"])
        return
    if not isinstance(item, dict | Mapping):
        _frame(digest, b"J", encode(item, drop_meta=True))
        return
    small = {k: v for k, v in item.items() if k != META}
    big: list[tuple[bytes, str]] = []
    for name, tag in _ITEM_BIG_FIELDS:
        value = small.get(name)
        if isinstance(value, str):
            big.append((tag, value))
            del small[name]
    resource = small.get("resource")
    if isinstance(resource, dict | Mapping):
        resource = {k: v for k, v in resource.items() if k != META}
        for name, tag in _RESOURCE_BIG_FIELDS:
            value = resource.get(name)
            if isinstance(value, str):
                big.append((tag, value))
                del resource[name]
        small["resource"] = resource
    _frame(digest, b"I", encode(small, drop_meta=True))
    for tag, value in big:
        _frame_text(digest, tag, value)


_SLICE: Final = 1 << 18
"""Characters encoded at a time for ASCII text: a piece is hashed while in cache, and no megabyte is allocated."""


def _frame_text(digest: xxh3_128, tag: bytes, value: str) -> None:
    """A text frame; the same bytes as ``_frame(digest, tag, value.encode())``, cheaper when large."""
    if len(value) <= _SLICE or not value.isascii():
        _frame(digest, tag, value.encode("utf-8", "surrogatepass"))
        return
    digest.update(tag + len(value).to_bytes(8, "big"))  # ASCII: one byte per character
    for start in range(0, len(value), _SLICE):
        digest.update(value[start : start + _SLICE].encode("ascii"))


def _frame(digest: xxh3_128, tag: bytes, payload: bytes) -> None:
    """Feed one tag + length + payload frame, so frame boundaries cannot be forged."""
    digest.update(tag + len(payload).to_bytes(8, "big"))
    digest.update(payload)
