"""Names as the client sees them, and where each one lives upstream.

With one upstream nothing is renamed. With several, tools and prompts are exported as
``server__name`` and resources keep their URI (a URI is an address, not a label) but get a
prefixed ``name``. Requests are routed only to what was listed: a name no upstream listed
is unknown, and a URI two upstreams claim is refused as ambiguous where it arises, rather
than quietly sent to one of them.
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


class AmbiguousError(Exception):
    """A URI that several upstreams claim."""

    def __init__(self, uri: str, servers: Sequence[str]) -> None:
        """``servers``: every upstream that claims ``uri``."""
        self.uri = uri
        self.servers = tuple(servers)
        super().__init__(f"{uri} is served by several upstreams ({', '.join(servers)}); rename or disable one")


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
    listed: set[str] = field(default_factory=set)
    """Servers whose names have been listed in this session."""

    def add(self, server: str, name: str, *, prefixed: bool) -> str:
        """Record one listed name; returns the exported name.

        Raises:
            CollisionError: another server's name is already exported under it.
        """
        exported = export_name(server, name) if prefixed else name
        existing = self.routes.get(exported)
        if existing is not None and existing != (server, name):
            msg = (
                f"{exported!r} would name both {existing[1]!r} of {existing[0]!r} and {name!r} of {server!r}; "
                "rename one of the servers"
            )
            raise CollisionError(msg)
        self.routes[exported] = (server, name)
        return exported

    def forget(self, server: str) -> None:
        """A server's list is about to be read again (or it went away)."""
        self.routes = {k: v for k, v in self.routes.items() if v[0] != server}
        self.listed.discard(server)


@dataclass
class Resources:
    """Resource URIs and template prefixes, each with every server that listed it."""

    uris: dict[str, list[str]] = field(default_factory=dict)
    templates: dict[str, list[str]] = field(default_factory=dict)
    """Literal prefix of a URI template (up to its first ``{``) -> servers."""
    uris_listed: bool = False
    templates_listed: bool = False

    @property
    def complete(self) -> bool:
        """Both resources and templates have been listed in this session."""
        return self.uris_listed and self.templates_listed

    def add_uri(self, server: str, uri: str) -> None:
        """Record a listed URI."""
        servers = self.uris.setdefault(uri, [])
        if server not in servers:
            servers.append(server)

    def add_template(self, server: str, template: str) -> None:
        """Record a listed URI template by its literal prefix."""
        servers = self.templates.setdefault(template.split("{", 1)[0], [])
        if server not in servers:
            servers.append(server)

    def route(self, uri: str, servers: Sequence[str]) -> str | None:
        """The server that owns ``uri``; with one candidate server, that one; None when nobody listed it.

        A URI listed exactly wins over templates; among templates the longest literal prefix wins.

        Raises:
            AmbiguousError: several servers listed the URI, or the best-matching templates.
        """
        exact = self.uris.get(uri)
        if exact:
            if len(exact) > 1:
                raise AmbiguousError(uri, exact)
            return exact[0]
        matches = [prefix for prefix in self.templates if prefix and uri.startswith(prefix)]
        if matches:
            longest = max(len(prefix) for prefix in matches)
            owners = sorted({s for prefix in matches if len(prefix) == longest for s in self.templates[prefix]})
            if len(owners) > 1:
                raise AmbiguousError(uri, owners)
            return owners[0]
        return servers[0] if len(servers) == 1 else None

    def forget_uris(self, server: str) -> None:
        """A server's resources are about to be listed again."""
        _drop(self.uris, server)

    def forget_templates(self, server: str) -> None:
        """A server's resource templates are about to be listed again."""
        _drop(self.templates, server)


def _drop(table: dict[str, list[str]], server: str) -> None:
    for key in list(table):
        remaining = [s for s in table[key] if s != server]
        if remaining:
            table[key] = remaining
        else:
            del table[key]
