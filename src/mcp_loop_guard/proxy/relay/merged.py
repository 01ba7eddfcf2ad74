"""The lists of several upstreams merged into one for the client: tools, prompts, resources, templates.

Tools and prompts are exported under prefixed names (see :mod:`.catalog`). A tool whose
exported name collides with another server's (a restarted server renamed one) is left out
of the list with a log line, not allowed to break the list for everyone; a name keeps the
owner it had first, across every session of the guard.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError

from mcp_loop_guard.proxy.relay.context import Context, Relay
from mcp_loop_guard.proxy.relay.tools import ToolFacts
from mcp_loop_guard.proxy.upstream.catalog import CollisionError, Names, Resources, export_name
from mcp_loop_guard.proxy.upstream.links import Link

logger = logging.getLogger(__name__)

LISTS = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "name"),
    "resources/templates/list": ("resourceTemplates", "name"),
}
"""The list methods merged, each with the key of its items and the field that names one."""
_MAX_PAGES = 100


class MergedLists:
    """What each upstream of one session listed, merged, and where each listed name routes."""

    def __init__(
        self,
        links: Mapping[str, Link],
        relay: Relay,
        *,
        on_dropped: Callable[[str, str], None] | None = None,
        on_listed: Callable[[str, list[str]], None] | None = None,
        owners: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """``on_dropped(server, tool)``: told when a colliding tool is left out of a list;
        ``on_listed(server, names)``: told the names of tools a server listed; ``owners``: exported name ->
        (server, name) first given it, shared by every session of the guard, so a name keeps its owner."""
        self.links = links
        self.relay = relay
        self.on_dropped = on_dropped
        self.on_listed = on_listed
        self.owners = owners if owners is not None else {}
        self.tools = Names()
        self.prompts = Names()
        self.resources = Resources()
        self.facts: dict[str, ToolFacts] = {name: ToolFacts() for name in links}

    def relinked(self) -> None:
        """The links changed (a config reload): forget what came from servers that are gone."""
        for server in list(self.facts):
            if server not in self.links:
                del self.facts[server]
                for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
                    self._forget(method, server)
        for server in self.links:
            self.facts.setdefault(server, ToolFacts())

    async def _list_all(self, ctx: Context, server: str, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor)
            page = await self.relay(ctx, server, method, params)
            items.extend(item for item in page.get(key) or [] if isinstance(item, dict))
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return items

    async def list_server(self, ctx: Context, server: str, method: str) -> list[dict[str, Any]]:
        """Every page of one server's list, as it named the items."""
        key, _ = LISTS[method]
        items = await self._list_all(ctx, server, method, key)
        if method == "tools/list":
            self.learn(server, items, first_page=True)
        return items

    def learn(self, server: str, tools: list[Any], *, first_page: bool) -> None:
        """Remember a server's listed tools: annotations for the judge, names for the metrics."""
        self.facts[server].note(tools, first_page=first_page)
        if self.on_listed is not None:
            self.on_listed(server, [str(tool.get("name")) for tool in tools if isinstance(tool, dict)])

    async def merged(self, ctx: Context, method: str) -> dict[str, Any]:
        """List every server that can answer ``method`` and merge the answers under exported names."""
        key, name_field = LISTS[method]
        names = self.tools if method == "tools/list" else self.prompts if method == "prompts/list" else None
        previous = {**self.owners, **(names.routes if names is not None else {})}
        listed: list[tuple[str, list[dict[str, Any]]]] = []
        for server, link in self.links.items():
            self._forget(method, server)
            if not link.available() or not serves(link, method):
                continue
            try:
                listed.append((server, await self.list_server(ctx, server, method)))
            except MCPError as exc:
                logger.warning("listing %s of upstream %r failed: %s", key, server, exc.error.message)
        # A name keeps the owner it had: a server that renamed a tool into another's name loses it.
        order = sorted(
            ((server, index, item) for server, items in listed for index, item in enumerate(items)),
            key=lambda entry: (
                previous.get(_exported(entry[0], entry[2], name_field)) != (entry[0], str(entry[2].get(name_field, "")))
            ),
        )
        exported: dict[tuple[str, int], dict[str, Any]] = {}
        for server, index, item in order:
            made = self._export(method, server, item, name_field)
            if made is not None:
                exported[(server, index)] = made
                if names is not None:
                    self.owners.setdefault(str(made[name_field]), (server, str(item.get(name_field, ""))))
        for server, _ in listed:
            self._listed(method, server)
        if method == "resources/list":
            self.resources.uris_listed = True
        elif method == "resources/templates/list":
            self.resources.templates_listed = True
        merged = [
            exported[(server, index)]
            for server, items in listed
            for index in range(len(items))
            if (server, index) in exported
        ]
        return {key: merged}

    def _export(self, method: str, server: str, item: dict[str, Any], name_field: str) -> dict[str, Any] | None:
        name = str(item.get(name_field, ""))
        try:
            if method == "tools/list":
                return {**item, name_field: self.tools.add(server, name, prefixed=True)}
            if method == "prompts/list":
                return {**item, name_field: self.prompts.add(server, name, prefixed=True)}
        except CollisionError as exc:
            logger.error("name collision, %r of %r left out of the list: %s", name, server, exc)
            if self.on_dropped is not None:
                self.on_dropped(server, name)
            return None
        if method == "resources/list":
            self.resources.add_uri(server, str(item.get("uri", "")))
        else:
            self.resources.add_template(server, str(item.get("uriTemplate", "")))
        return {**item, name_field: f"{server}__{name}"}

    def _forget(self, method: str, server: str) -> None:
        if method == "tools/list":
            self.tools.forget(server)
        elif method == "prompts/list":
            self.prompts.forget(server)
        elif method == "resources/list":
            self.resources.forget_uris(server)
        else:
            self.resources.forget_templates(server)

    def _listed(self, method: str, server: str) -> None:
        if method == "tools/list":
            self.tools.listed.add(server)
        elif method == "prompts/list":
            self.prompts.listed.add(server)


def _exported(server: str, item: dict[str, Any], name_field: str) -> str:
    return export_name(server, str(item.get(name_field, "")))


def serves(link: Link, method: str) -> bool:
    """Whether an upstream's capabilities allow the list (unknown capabilities allow every list)."""
    caps = link.identity.capabilities if link.identity is not None else None
    if caps is None:
        return True
    if method == "tools/list":
        return caps.tools is not None
    if method == "prompts/list":
        return caps.prompts is not None
    return caps.resources is not None
