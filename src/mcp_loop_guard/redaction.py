"""URLs as logs, messages and titles may show them: the place, never the credentials.

A Redis store URL carries its password as ``redis://user:password@host`` or in the query
(``?password=...``), an HTTP upstream's URL may carry a token in its user part or query:
every URL the guard prints goes through :func:`redact_url` first.
"""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)[^/]*@")
"""A URL's user and password: everything up to the last ``@`` before the path (a password may hold ``#`` or ``?``),
after the scheme, whatever the slashes (a mistyped ``redis:/`` too)."""


def redact_url(url: str) -> str:
    """``url`` with its user, password, query and fragment taken out: scheme, host, port and path are left."""
    return _USERINFO.sub(r"\1", url).partition("?")[0].partition("#")[0]
