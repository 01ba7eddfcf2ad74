"""Names as the client sees them, and where each one lives upstream.

With one upstream nothing is renamed. With several, tools and prompts are
exported as ``server__name`` and resources keep their URI (a URI is an address,
not a label) but get a prefixed ``name``; reads are routed by URI, or by the
longest literal prefix of a resource template.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

SEPARATOR = "__"
_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")


class CollisionError(Exception):
    """Two upstream names would be exported under the same name."""


def export_name(server: str, name: str) -> str:
    """``server__name``, made valid (``^[a-zA-Z0-9_-]{1,64}$``) without losing uniqueness."""
    exported = f"{server}{SEPARATOR}{name}"
    if _VALID.match(exported):
        return exported
    digest = hashlib.sha256(exported.encode()).hexdigest()[:8]
    cleaned = _INVALID_CHAR.sub("_", exported)
    if len(cleaned) > 64 or cleaned != exported:
        cleaned = f"{cleaned[: 64 - len(digest) - 1]}_{digest}"
    return cleaned


@dataclass
class Names:
    """One kind of name (tools or prompts): exported -> (server, upstream name)."""

    routes: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add(self, server: str, name: str, *, prefixed: bool) -> str:
        exported = export_name(server, name) if prefixed else name
        existing = self.routes.get(exported)
        if existing is not None and existing != (server, name):
            raise CollisionError(
                f"{exported!r} would name both {existing[1]!r} of {existing[0]!r} and {name!r} of {server!r}; "
                "rename one of the servers"
            )
        self.routes[exported] = (server, name)
        return exported

    def forget(self, server: str) -> None:
        self.routes = {k: v for k, v in self.routes.items() if v[0] != server}


@dataclass
class Resources:
    """Resource URIs and template prefixes -> server."""

    uris: dict[str, str] = field(default_factory=dict)
    templates: dict[str, str] = field(default_factory=dict)
    """Literal prefix of a URI template (up to its first ``{``) -> server."""

    def add_uri(self, server: str, uri: str) -> None:
        self.uris[uri] = server

    def add_template(self, server: str, template: str) -> None:
        self.templates[template.split("{", 1)[0]] = server

    def route(self, uri: str, servers: Sequence[str]) -> str | None:
        """The server that owns ``uri``; with one candidate server, that one."""
        if uri in self.uris:
            return self.uris[uri]
        matches = [prefix for prefix in self.templates if prefix and uri.startswith(prefix)]
        if matches:
            return self.templates[max(matches, key=len)]
        return servers[0] if len(servers) == 1 else None

    def forget(self, server: str) -> None:
        self.uris = {k: v for k, v in self.uris.items() if v != server}
        self.templates = {k: v for k, v in self.templates.items() if v != server}


def split_exported(exported: str, servers: Sequence[str]) -> tuple[str, str] | None:
    """Best-effort route for a prefixed name never listed (a client calling without listing)."""
    server, sep, name = exported.partition(SEPARATOR)
    if sep and server in servers and name:
        return server, name
    return None
