"""Several upstreams' lists and identities merged into one for the client, and where each listed name routes back.

Tools and prompts are exported as ``server__name`` (:mod:`.catalog`); resources keep their URI
and get a prefixed name; tasks keep their ids. A tool whose exported name collides with another
server's (a restarted server renamed one) is left out of the list with a log line, not allowed
to break the list for everyone; a name keeps the owner it had first, across every session of the
guard. The client is given the guard's own identity, with the servers' capabilities merged and
their instructions each under its server's name.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp_loop_guard import __version__
from mcp_loop_guard.proxy.upstream.catalog import CollisionError, Names, Resources, export_name
from mcp_loop_guard.proxy.wire.eras import HANDSHAKE_PROTOCOL_VERSIONS

__all__ = ["GUARD_INFO", "LISTS", "Catalog", "merged_identity", "serves"]

logger = logging.getLogger(__name__)

GUARD_INFO = {"name": "mcp-loop-guard", "version": __version__}
"""How the guard names itself in front of several servers."""
LISTS = {
    "tools/list": ("tools", "tools"),
    "prompts/list": ("prompts", "prompts"),
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("resourceTemplates", "resources"),
    "tasks/list": ("tasks", "tasks"),
}
"""The list methods merged: the key of their items, and the capability a server needs to be asked."""
MAX_PAGES = 100

Ask = Callable[[str, str, dict[str, Any] | None], Awaitable[dict[str, Any] | None]]
"""(server, method, params) -> the server's answer (its body), None when none came."""


def serves(capabilities: Mapping[str, Any] | None, method: str) -> bool:
    """Whether a server's capabilities allow the list (unknown capabilities allow every list)."""
    if capabilities is None:
        return True
    return capabilities.get(LISTS[method][1]) is not None


class Catalog:
    """What each upstream of one client listed, merged, and where each listed name routes."""

    def __init__(
        self,
        owners: dict[str, tuple[str, str]] | None = None,
        *,
        on_listed: Callable[[str, list[str]], None] | None = None,
        on_dropped: Callable[[str, str], None] | None = None,
    ) -> None:
        """``owners``: exported name -> the (server, name) first given it, shared by every session of the guard.

        ``on_listed(server, names)``: told the tools a server listed; ``on_dropped(server, tool)``:
        told of a colliding tool left out (both for metrics).
        """
        self.owners = owners if owners is not None else {}
        self.on_listed = on_listed
        self.on_dropped = on_dropped
        self.tools = Names()
        self.prompts = Names()
        self.resources = Resources()

    def forget(self, server: str, method: str | None = None) -> None:
        """A server's list (every list, without ``method``) is to be read again, or the server went away."""
        if method in (None, "tools/list"):
            self.tools.forget(server)
        if method in (None, "prompts/list"):
            self.prompts.forget(server)
        if method in (None, "resources/list"):
            self.resources.forget_uris(server)
            self.resources.uris_listed = False
        if method in (None, "resources/templates/list"):
            self.resources.forget_templates(server)
            self.resources.templates_listed = False

    async def merged(
        self, method: str, servers: Mapping[str, Mapping[str, Any] | None], ask: Ask, meta: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Every page of ``method`` from each server that serves it (``servers``: name -> capabilities), merged.

        ``meta``: the client's ``_meta`` envelope (2026-07-28), sent with each page's request.
        """
        key = LISTS[method][0]
        names = self.tools if method == "tools/list" else self.prompts if method == "prompts/list" else None
        previous = {**self.owners, **(names.routes if names is not None else {})}
        listed: list[tuple[str, list[dict[str, Any]]]] = []
        for server, capabilities in servers.items():
            self.forget(server, method)
            if not serves(capabilities, method):
                continue
            items = await self._pages(server, method, key, ask, meta)
            if items is not None:
                listed.append((server, items))
        # A name keeps the owner it had: a server that renamed a tool into another's name loses it.
        order = sorted(
            ((server, index, item) for server, items in listed for index, item in enumerate(items)),
            key=lambda entry: previous.get(_exported(entry[0], entry[2])) != (entry[0], str(entry[2].get("name", ""))),
        )
        exported: dict[tuple[str, int], dict[str, Any]] = {}
        for server, index, item in order:
            made = self._export(method, server, item)
            if made is not None:
                exported[(server, index)] = made
        for server, _ in listed:
            if names is not None:
                names.listed.add(server)
        if method == "resources/list":
            self.resources.uris_listed = True
        elif method == "resources/templates/list":
            self.resources.templates_listed = True
        merged = [exported[(s, i)] for s, items in listed for i in range(len(items)) if (s, i) in exported]
        return {key: merged}

    async def _pages(
        self, server: str, method: str, key: str, ask: Ask, meta: dict[str, Any] | None
    ) -> list[dict[str, Any]] | None:
        """Every page of one server's list; None when it did not answer."""
        items: list[dict[str, Any]] = []
        cursor: object = None
        for _ in range(MAX_PAGES):
            params: dict[str, Any] = {"cursor": cursor} if cursor else {}
            if meta:
                params["_meta"] = meta
            answer = await ask(server, method, params or None)
            result = (answer or {}).get("result")
            if not isinstance(result, dict):
                error = (answer or {}).get("error")
                said = error.get("message") if isinstance(error, dict) else "no answer"
                logger.warning("listing %s of upstream %r failed: %s", key, server, said)
                return items or None
            items.extend(item for item in result.get(key) or [] if isinstance(item, dict))
            cursor = result.get("nextCursor")
            if not cursor:
                break
        if method == "tools/list" and self.on_listed is not None:
            self.on_listed(server, [str(item.get("name")) for item in items])
        return items

    def _export(self, method: str, server: str, item: dict[str, Any]) -> dict[str, Any] | None:
        name = str(item.get("name", ""))
        try:
            if method == "tools/list":
                exported = self.tools.add(server, name, prefixed=True)
            elif method == "prompts/list":
                exported = self.prompts.add(server, name, prefixed=True)
            else:
                if method == "resources/list":
                    self.resources.add_uri(server, str(item.get("uri", "")))
                elif method == "resources/templates/list":
                    self.resources.add_template(server, str(item.get("uriTemplate", "")))
                return {**item, "name": f"{server}__{name}"} if "name" in item else item
        except CollisionError as exc:
            logger.error("name collision, %r of %r left out of the list: %s", name, server, exc)
            if self.on_dropped is not None:
                self.on_dropped(server, name)
            return None
        self.owners.setdefault(exported, (server, name))
        return {**item, "name": exported}


def _exported(server: str, item: dict[str, Any]) -> str:
    return export_name(server, str(item.get("name", "")))


def merged_identity(results: Mapping[str, dict[str, Any]], asked: object) -> dict[str, Any]:
    """One ``initialize`` result for the client from each server's (``results``: name -> result).

    The protocol version is the one the client asked for when every server chose it, else the
    oldest any server chose: each server then speaks to the client in an era it knows.
    """
    chosen = {str(result.get("protocolVersion")) for result in results.values()}
    known = [version for version in HANDSHAKE_PROTOCOL_VERSIONS if version in chosen]
    version = asked if chosen == {asked} or not known else known[0]
    identity: dict[str, Any] = {
        "protocolVersion": version,
        "capabilities": merged_capabilities(results.values()),
        "serverInfo": GUARD_INFO,
    }
    instructions = "\n\n".join(
        f"{name}: {result['instructions']}" for name, result in results.items() if result.get("instructions")
    )
    if instructions:
        identity["instructions"] = instructions
    return identity


def merged_discovery(results: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """One ``server/discover`` result (2026-07-28) from each server's: the versions they all speak."""
    versions: list[Any] | None = None
    for result in results.values():
        theirs = result.get("supportedVersions") or []
        versions = list(theirs) if versions is None else [v for v in versions if v in theirs]
    found: dict[str, Any] = {
        "supportedVersions": versions or [],
        "capabilities": merged_capabilities(results.values()),
        "serverInfo": GUARD_INFO,
    }
    instructions = "\n\n".join(
        f"{name}: {result['instructions']}" for name, result in results.items() if result.get("instructions")
    )
    if instructions:
        found["instructions"] = instructions
    return found


def merged_capabilities(results: Any) -> dict[str, Any]:
    """The capabilities of several servers as one: what any of them offers (tasks and experimental ones merged)."""
    capabilities = [result.get("capabilities") or {} for result in results]
    merged: dict[str, Any] = {"tools": {"listChanged": True}}
    if any(caps.get("prompts") is not None for caps in capabilities):
        merged["prompts"] = {"listChanged": True}
    resources = [caps["resources"] for caps in capabilities if isinstance(caps.get("resources"), dict)]
    if resources:
        merged["resources"] = {"subscribe": any(r.get("subscribe") for r in resources), "listChanged": True}
    for name in ("logging", "completions"):
        if any(caps.get(name) is not None for caps in capabilities):
            merged[name] = {}
    for name in ("tasks", "experimental"):
        found = [caps[name] for caps in capabilities if isinstance(caps.get(name), dict)]
        if found:
            merged[name] = _union(found)
    return merged


def _union(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Dictionaries merged key by key, nested ones too."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = _union([merged[key], value])
            else:
                merged.setdefault(key, value)
    return merged
