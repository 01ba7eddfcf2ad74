"""Routing for one session of the aggregating proxy: straight through with one upstream, merged with several.

With several upstreams a request goes only to what an upstream listed: a tool name is
routed after that server's tools were listed in this session (the guard lists them itself
when the client did not), a resource URI two servers claim is refused as ambiguous, and a
tool whose exported name collides with another server's (a restarted server renamed one) is
left out of the list with a log line, not allowed to break the list for everyone.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.proxy.relay.catalog import AmbiguousError, CollisionError, Names, Resources, export_name
from mcp_loop_guard.proxy.relay.tools import ToolFacts
from mcp_loop_guard.proxy.upstream.links import Link

logger = logging.getLogger(__name__)

Context = ServerRequestContext[Any, Any]
Handler = Callable[[Context, BaseModel], Awaitable[dict[str, Any]]]


class Relay(Protocol):
    """Sends one request to one upstream on behalf of the client."""

    async def __call__(self, ctx: Context, server: str, method: str, params: BaseModel | None) -> dict[str, Any]:
        """The upstream's raw result."""
        ...


def for_era(ctx: Context, result: dict[str, Any]) -> dict[str, Any]:
    """Every 2026-07-28 result names its type; handshake-era upstreams (and the guard's own results) don't."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
        result["resultType"] = "complete"
    return result


_LISTS = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "name"),
    "resources/templates/list": ("resourceTemplates", "name"),
}
_BY_URI = ("resources/read", "resources/subscribe", "resources/unsubscribe")
_MAX_PAGES = 100
RESOURCE_NOT_FOUND = -32002


class Aggregate:
    """Where each request of one session goes, and how answers are merged."""

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
        self.single = next(iter(links.values())) if len(links) == 1 else None
        self.on_dropped = on_dropped
        self.on_listed = on_listed
        self.owners = owners if owners is not None else {}
        self.tools = Names()
        self.prompts = Names()
        self.resources = Resources()
        self.facts: dict[str, ToolFacts] = {name: ToolFacts() for name in links}

    @property
    def servers(self) -> list[str]:
        """The upstreams' names."""
        return list(self.links)

    def relinked(self) -> None:
        """The links changed (a config reload): forget what came from servers that are gone."""
        self.single = next(iter(self.links.values())) if len(self.links) == 1 else None
        for server in list(self.facts):
            if server not in self.links:
                del self.facts[server]
                for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
                    self._forget(method, server)
        for server in self.links:
            self.facts.setdefault(server, ToolFacts())

    def handler(self, method: str) -> Handler:
        """The handler for one relayed method (tools/call is the proxy's own)."""
        single = self.single
        if single is not None:

            async def straight(ctx: Context, params: BaseModel) -> dict[str, Any]:
                result = await self.relay(ctx, single.name, method, params)
                if method == "tools/list":
                    self._learn(single.name, result.get("tools") or [], first_page=not getattr(params, "cursor", None))
                return result

            return straight
        handler: Handler
        if method in _LISTS:
            handler = lambda ctx, params: self._merged_list(ctx, method)  # noqa: E731
        elif method in _BY_URI:
            handler = lambda ctx, params: self._by_uri(ctx, method, params)  # noqa: E731
        elif method == "prompts/get":
            handler = self._get_prompt
        elif method == "completion/complete":
            handler = self._complete
        elif method == "logging/setLevel":
            handler = self._set_level
        else:
            handler = self._local_ping

        async def answer(ctx: Context, params: BaseModel) -> dict[str, Any]:
            return for_era(ctx, await handler(ctx, params))

        return answer

    async def tool_route(self, ctx: Context, name: str) -> tuple[str, str] | None:
        """(server, upstream tool name) for a name the client called; None when no upstream listed it."""
        if self.single is not None:
            return self.single.name, name
        route = self.tools.routes.get(name)
        if route is None and any(server not in self.tools.listed for server in self.links):
            await self._merged_list(ctx, "tools/list")  # the client called without listing: list now
            route = self.tools.routes.get(name)
        return route

    async def annotations(self, ctx: Context, server: str, tool: str) -> dict[str, Any] | None:
        """The tool's MCP annotations as its server listed them (listed now if nobody has)."""
        facts = self.facts.get(server)
        if facts is None:
            return None
        if not facts.listed and self.links[server].available():
            try:
                await self._list_server(ctx, server, "tools/list")
            except MCPError as exc:
                logger.debug("could not list the tools of %r: %s", server, exc.error.message)
                facts.listed = True
        return facts.annotations(tool)

    # Several upstreams.

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

    async def _list_server(self, ctx: Context, server: str, method: str) -> list[dict[str, Any]]:
        key, _ = _LISTS[method]
        items = await self._list_all(ctx, server, method, key)
        if method == "tools/list":
            self._learn(server, items, first_page=True)
        return items

    def _learn(self, server: str, tools: list[Any], *, first_page: bool) -> None:
        self.facts[server].note(tools, first_page=first_page)
        if self.on_listed is not None:
            self.on_listed(server, [str(tool.get("name")) for tool in tools if isinstance(tool, dict)])

    async def _merged_list(self, ctx: Context, method: str) -> dict[str, Any]:
        key, name_field = _LISTS[method]
        names = self.tools if method == "tools/list" else self.prompts if method == "prompts/list" else None
        previous = {**self.owners, **(names.routes if names is not None else {})}
        listed: list[tuple[str, list[dict[str, Any]]]] = []
        for server, link in self.links.items():
            self._forget(method, server)
            if not link.available() or not _serves(link, method):
                continue
            try:
                listed.append((server, await self._list_server(ctx, server, method)))
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

    async def _by_uri(self, ctx: Context, method: str, params: BaseModel) -> dict[str, Any]:
        uri = str(getattr(params, "uri", ""))
        server = await self._owner(ctx, uri)
        if server is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
        return await self.relay(ctx, server, method, params)

    async def _owner(self, ctx: Context, uri: str) -> str | None:
        with_resources = [s for s, link in self.links.items() if _serves(link, "resources/list")]
        try:
            if not self.resources.complete:
                # Route by what every server listed: a URI listed exactly wins over another's template.
                await self._merged_list(ctx, "resources/list")
                await self._merged_list(ctx, "resources/templates/list")
            server = self.resources.route(uri, with_resources)
        except AmbiguousError as exc:
            raise MCPError(types.INVALID_PARAMS, f"Ambiguous resource: {exc}") from exc
        return server

    async def _prompt_route(self, ctx: Context, name: str) -> tuple[str, str]:
        route = self.prompts.routes.get(name)
        if route is None and any(server not in self.prompts.listed for server in self.links):
            await self._merged_list(ctx, "prompts/list")
            route = self.prompts.routes.get(name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {name}")
        return route

    async def _get_prompt(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        assert isinstance(params, types.GetPromptRequestParams)
        server, name = await self._prompt_route(ctx, params.name)
        return await self.relay(ctx, server, "prompts/get", params.model_copy(update={"name": name}))

    async def _complete(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        assert isinstance(params, types.CompleteRequestParams)
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            server, name = await self._prompt_route(ctx, ref.name)
            forwarded = params.model_copy(update={"ref": ref.model_copy(update={"name": name})})
            return await self.relay(ctx, server, "completion/complete", forwarded)
        found = await self._owner(ctx, str(ref.uri))
        if found is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown resource template: {ref.uri}")
        return await self.relay(ctx, found, "completion/complete", params)

    async def _set_level(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        for server, link in self.links.items():
            caps = link.identity.capabilities if link.identity is not None else None
            if link.available() and caps is not None and caps.logging is not None:
                try:
                    await self.relay(ctx, server, "logging/setLevel", params)
                except MCPError as exc:
                    logger.warning("logging/setLevel on upstream %r failed: %s", server, exc.error.message)
        return {}

    async def _local_ping(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        return {}

    async def roots_changed(self) -> None:
        """Tell every upstream the client's roots changed."""
        for link in self.links.values():
            if not link.available():
                continue
            try:
                async with link.using() as upstream:
                    await upstream.notify(types.RootsListChangedNotification())
            except Exception as exc:
                logger.debug("roots/list_changed to %r failed: %s", link.name, exc)

    def capabilities(self) -> types.ServerCapabilities:
        """The merged capabilities of several upstreams, as one server."""
        identities = [link.identity for link in self.links.values() if link.identity is not None]
        caps = [identity.capabilities for identity in identities]
        return types.ServerCapabilities(
            tools=types.ToolsCapability(list_changed=True),
            prompts=types.PromptsCapability(list_changed=True) if any(c.prompts for c in caps) else None,
            resources=types.ResourcesCapability(
                subscribe=any(c.resources.subscribe for c in caps if c.resources),
                list_changed=True,
            )
            if any(c.resources for c in caps)
            else None,
            logging=types.LoggingCapability() if any(c.logging is not None for c in caps) else None,
            completions=types.CompletionsCapability() if any(c.completions is not None for c in caps) else None,
        )

    def instructions(self) -> str | None:
        """Each upstream's instructions, under its name."""
        parts = [
            f"{name}: {link.identity.instructions}"
            for name, link in self.links.items()
            if link.identity is not None and link.identity.instructions
        ]
        return "\n\n".join(parts) or None


def _exported(server: str, item: dict[str, Any], name_field: str) -> str:
    return export_name(server, str(item.get(name_field, "")))


def _serves(link: Link, method: str) -> bool:
    caps = link.identity.capabilities if link.identity is not None else None
    if caps is None:
        return True
    if method == "tools/list":
        return caps.tools is not None
    if method == "prompts/list":
        return caps.prompts is not None
    return caps.resources is not None
