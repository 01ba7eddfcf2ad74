"""What an HTTP request's head may carry: the checks every header the guard writes upstream passes.

A CR or LF in a header ends it, and a blank line ends the request: whoever chose the text
would write requests of their own to the upstream, with the guard's credentials. So text
from a client that becomes a header (a 2026-07-28 request's method and protocol version)
is refused when the message is read, and the HTTP client checks every header and target it
writes, whatever their source (a client, an upstream's answer, the config).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["UnsafeHeaderError", "check_headers", "check_request_line", "has_control"]

_CONTROL_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Unicode control characters (C0, DEL, C1): none belongs in a name or version a header carries."""
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name (an RFC 9110 token)."""
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""What no header value may hold (a tab may; bytes above 0x7f are the value's own, as UTF-8 or Latin-1 text)."""
_TARGET = re.compile(rb"/[\x21-\x7e\x80-\xff]*")
"""A request target in origin form: no space, no control character."""


class UnsafeHeaderError(ValueError):
    """A header or request target that would break the request's framing; the text never quotes the value."""


def has_control(text: str) -> bool:
    """Whether text holds a control character (CR, LF, NUL, tab, DEL, C1...)."""
    return _CONTROL_TEXT.search(text) is not None


def check_headers(headers: Sequence[tuple[bytes, bytes]]) -> None:
    """Refuse a header whose name is not a token or whose value holds a control character.

    Raises:
        UnsafeHeaderError: naming the header, never its value (it may be a credential).
    """
    for key, value in headers:
        if _TOKEN.fullmatch(key) is None:
            raise UnsafeHeaderError(f"a header name is not an HTTP token ({key[:40]!r})")
        if _CONTROL.search(value) is not None:
            raise UnsafeHeaderError(f"the {key.decode()} header's value holds a control character")


def check_request_line(method: str, target: bytes) -> None:
    """Refuse a method that is not a word or a target with a space or control character.

    Raises:
        UnsafeHeaderError: the request line would not be one line of three parts.
    """
    if not method.isalpha() or _TARGET.fullmatch(target) is None:
        raise UnsafeHeaderError("the request's method or target holds a space or a control character")
