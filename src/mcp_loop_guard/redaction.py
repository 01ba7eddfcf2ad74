"""URLs and commands as logs, messages and titles may show them: the place or the program, never the secrets.

A Redis store URL carries its password as ``redis://user:password@host`` or in the query
(``?password=...``), an HTTP upstream's URL may carry a token in its user part or query:
every URL the guard prints goes through :func:`redact_url` first. A command's arguments may
hold a path or a token: a server started as ``-- COMMAND`` is named to clients by its
program alone (:func:`program_name`).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

__all__ = ["program_name", "program_stem", "redact_url", "without_urls"]

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:/*)[^/]*@")
"""A URL's user and password: everything up to the last ``@`` before the path (a password may hold ``#`` or ``?``),
after the scheme, whatever the slashes (a mistyped ``redis:/`` too)."""


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def without_urls(text: str) -> str:
    """``text`` (an error's message, say) with every URL in it replaced by ``<URL>``: a path may hold a key too."""
    return _URL.sub("<URL>", text)


def redact_url(url: str) -> str:
    """``url`` with its user, password, query and fragment taken out: scheme, host, port and path are left."""
    return _USERINFO.sub(r"\1", url).partition("?")[0].partition("#")[0]


def program_stem(program: str) -> str:
    """A program's file name without its directory or a script or executable suffix."""
    name = PurePosixPath(program.replace("\\", "/")).name
    return re.sub(r"\.(exe|cmd|bat|py|js|mjs)$", "", name, flags=re.IGNORECASE)


def program_name(program: str) -> str:
    """The program's own name (``npx``, ``python3``, ``mcp-server-time``): no directory, no argument."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", program_stem(program))[:64] or "upstream"
