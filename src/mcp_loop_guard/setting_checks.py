"""How the process settings' values are read and checked beyond their type (the loop rules' checks are in the core).

Each check takes the typed value and returns the value kept, or raises ValueError with what is
wrong; the registry names each setting's check, and every place a setting may be set applies it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mcp_loop_guard.store import store_kind

__all__ = [
    "Secret",
    "check_hosts",
    "check_listen_host",
    "check_origins",
    "check_state",
    "check_text",
    "check_token",
    "check_tokens",
    "header_name",
    "parse_tokens",
    "split_list",
]


class Secret:
    """A token: kept, compared and hashed as its text, shown as stars in a repr, a log or an error."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        """The token itself, for where it is used."""
        return self._value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __repr__(self) -> str:
        return "Secret('**********')"

    def __str__(self) -> str:
        return "**********"


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HOST = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(:([0-9]{1,5}|\*))?"
_ALLOWED_HOST = re.compile(rf"^{_HOST}$")
_ALLOWED_ORIGIN = re.compile(rf"^[A-Za-z][A-Za-z0-9+.-]*://{_HOST}$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")
_TOKEN_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def split_list(value: object) -> object:
    """A list setting from "a, b,c" or a list: entries trimmed, empty ones dropped."""
    items: Iterable[object]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list | tuple):
        items = value
    else:
        return value
    return tuple(text for item in items if (text := str(item).strip()))


def check_state(value: str) -> str:
    """One of the store forms."""
    store_kind(value.strip())
    return value.strip()


def check_text(value: str | None) -> str | None:
    """An empty value is a mistake, not "unset"."""
    if value is not None and not value.strip():
        msg = "empty (unset it instead)"
        raise ValueError(msg)
    return value


def check_tokens(value: Secret | None) -> Secret | None:
    """name:token pairs, names unique, tokens without spaces."""
    if value is not None:
        parse_tokens(value.get_secret_value())
    return value


def check_listen_host(value: str) -> str:
    """A listen address is one word."""
    if not value or any(char.isspace() for char in value):
        msg = "empty or contains spaces"
        raise ValueError(msg)
    return value


def check_token(value: Secret | None) -> Secret | None:
    """An empty token is a mistake, not "no authentication": fail closed."""
    if value is not None and not _TOKEN.match(value.get_secret_value()):
        msg = "empty or contains spaces or control characters (unset it to turn authentication off)"
        raise ValueError(msg)
    return value


def header_name(value: str) -> str:
    """Header names are RFC 9110 tokens."""
    if not _HEADER_NAME.match(value):
        msg = f"{value!r} is not a header name"
        raise ValueError(msg)
    return value


def check_hosts(value: tuple[str, ...]) -> tuple[str, ...]:
    """Each entry is host, host:port or host:* (no scheme, no path)."""
    for entry in value:
        if not _ALLOWED_HOST.match(entry):
            msg = f"{entry!r} is not host, host:port or host:*"
            raise ValueError(msg)
    return value


def check_origins(value: tuple[str, ...]) -> tuple[str, ...]:
    """Each entry is scheme://host with an optional port or :*; a trailing slash is dropped."""
    origins = tuple(entry.removesuffix("/") for entry in value)
    for entry in origins:
        if not _ALLOWED_ORIGIN.match(entry):
            msg = f"{entry!r} is not an origin like https://host, https://host:port or https://host:*"
            raise ValueError(msg)
    return origins


def parse_tokens(text: str) -> dict[str, str]:
    """``alice:tok-a,bob:tok-b`` as {name: token}.

    Raises:
        ValueError: a pair without a colon, a bad name, a repeated name or token, a token with spaces.
    """
    tokens: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, colon, token = pair.partition(":")
        if not colon or not _TOKEN_NAME.match(name):
            msg = "each entry must be name:token with a name of letters, digits, _ and -"
            raise ValueError(msg)
        if not _TOKEN.match(token):
            msg = f"the token of {name!r} is empty or contains spaces or control characters"
            raise ValueError(msg)
        if name in tokens or token in tokens.values():
            msg = f"{name!r} or its token is given twice"
            raise ValueError(msg)
        tokens[name] = token
    if not tokens:
        msg = "no name:token pairs (unset it to turn named tokens off)"
        raise ValueError(msg)
    return tokens
