"""Routing for one session of the aggregating proxy: straight through with one upstream, merged with several.

With several upstreams a request goes only to what an upstream listed: a tool name is
routed after that server's tools were listed in this session (the guard lists them itself
when the client did not), and a resource URI two servers claim is refused as ambiguous.
The lists themselves are merged by :mod:`.merged`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.proxy.relay.context import Context
from mcp_loop_guard.proxy.relay.merged import LISTS, MergedLists, serves
from mcp_loop_guard.proxy.upstream.catalog import AmbiguousError

logger = logging.getLogger(__name__)

Handler = Callable[[Context, BaseModel], Awaitable[dict[str, Any]]]


def for_era(ctx: Context, result: dict[str, Any]) -> dict[str, Any]:
    """Every 2026-07-28 result names its type; handshake-era upstreams (and the guard's own results) don't."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
        result["resultType"] = "complete"
    return result


_BY_URI = ("resources/read", "resources/subscribe", "resources/unsubscribe")
RESOURCE_NOT_FOUND = -32002


class Aggregate:
    """Where each request of one session goes, and how answers are merged."""

    def __init__(self, lists: MergedLists) -> None:
        """Requests go to ``lists``' links, through its relay; lists are merged by it."""
        self.lists = lists
        self.links = lists.links
        self.relay = lists.relay
        self.single = next(iter(self.links.values())) if len(self.links) == 1 else None

    @property
    def servers(self) -> list[str]:
        """The upstreams' names."""
        return list(self.links)

    def relinked(self) -> None:
        """The links changed (a config reload): forget what came from servers that are gone."""
        self.single = next(iter(self.links.values())) if len(self.links) == 1 else None
        self.lists.relinked()

    def handler(self, method: str) -> Handler:
        """The handler for one relayed method (tools/call is the proxy's own)."""
        single = self.single
        if single is not None:

            async def straight(ctx: Context, params: BaseModel) -> dict[str, Any]:
                result = await self.relay(ctx, single.name, method, params)
                if method == "tools/list":
                    self.lists.learn(
                        single.name, result.get("tools") or [], first_page=not getattr(params, "cursor", None)
                    )
                return result

            return straight
        handler: Handler
        if method in LISTS:
            handler = lambda ctx, params: self.lists.merged(ctx, method)  # noqa: E731
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
        route = self.lists.tools.routes.get(name)
        if route is None and any(server not in self.lists.tools.listed for server in self.links):
            await self.lists.merged(ctx, "tools/list")  # the client called without listing: list now
            route = self.lists.tools.routes.get(name)
        return route

    async def annotations(self, ctx: Context, server: str, tool: str) -> dict[str, Any] | None:
        """The tool's MCP annotations as its server listed them (listed now if nobody has)."""
        facts = self.lists.facts.get(server)
        if facts is None:
            return None
        if not facts.listed and self.links[server].available():
            try:
                await self.lists.list_server(ctx, server, "tools/list")
            except MCPError as exc:
                logger.debug("could not list the tools of %r: %s", server, exc.error.message)
                facts.listed = True
        return facts.annotations(tool)

    async def _by_uri(self, ctx: Context, method: str, params: BaseModel) -> dict[str, Any]:
        uri = str(getattr(params, "uri", ""))
        server = await self._owner(ctx, uri)
        if server is None:
            raise MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
        return await self.relay(ctx, server, method, params)

    async def _owner(self, ctx: Context, uri: str) -> str | None:
        with_resources = [s for s, link in self.links.items() if serves(link, "resources/list")]
        try:
            if not self.lists.resources.complete:
                # Route by what every server listed: a URI listed exactly wins over another's template.
                await self.lists.merged(ctx, "resources/list")
                await self.lists.merged(ctx, "resources/templates/list")
            server = self.lists.resources.route(uri, with_resources)
        except AmbiguousError as exc:
            raise MCPError(types.INVALID_PARAMS, f"Ambiguous resource: {exc}") from exc
        return server

    async def _prompt_route(self, ctx: Context, name: str) -> tuple[str, str]:
        route = self.lists.prompts.routes.get(name)
        if route is None and any(server not in self.lists.prompts.listed for server in self.links):
            await self.lists.merged(ctx, "prompts/list")
            route = self.lists.prompts.routes.get(name)
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
