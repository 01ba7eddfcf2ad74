"""Request routing for one session: straight through with one upstream, merged with several."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp_loop_guard.proxy.catalog import CollisionError, Names, Resources, split_exported

if TYPE_CHECKING:
    from mcp_loop_guard.proxy.server import Context, GuardedProxy


def for_era(ctx: Context, result: dict[str, Any]) -> dict[str, Any]:
    """Every 2026-07-28 result names its type; handshake-era upstreams (and the guard's own results) don't."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and "resultType" not in result:
        result["resultType"] = "complete"
    return result


logger = logging.getLogger(__name__)

Handler = Callable[["Context", BaseModel], Awaitable[dict[str, Any]]]

_LISTS = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "name"),
    "resources/templates/list": ("resourceTemplates", "name"),
}
_BY_URI = ("resources/read", "resources/subscribe", "resources/unsubscribe")
_MAX_PAGES = 100


class Aggregate:
    """Where each request of one session goes, and how answers are merged."""

    def __init__(self, proxy: GuardedProxy) -> None:
        self.proxy = proxy
        self.tools = Names()
        self.prompts = Names()
        self.resources = Resources()

    @property
    def servers(self) -> list[str]:
        return list(self.proxy.links)

    def handler(self, method: str) -> Handler:
        """The handler for one relayed method."""
        single = self.proxy.single
        if single is not None:

            async def relay(ctx: Context, params: BaseModel) -> dict[str, Any]:
                if method == "ping" and not self.proxy._connected:
                    return {}
                return await self.proxy.relay(ctx, single.name, method, params)

            return relay
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

    # One upstream: names are the upstream's own.

    async def tool_route(self, name: str) -> tuple[str, str] | None:
        """(server, upstream tool name) for an exported tool name."""
        if self.proxy.single is not None:
            return self.proxy.single.name, name
        return self.tools.routes.get(name) or split_exported(name, self.servers)

    # Several upstreams.

    async def _list_all(self, ctx: Context, server: str, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor)
            page = await self.proxy.relay(ctx, server, method, params)
            items.extend(item for item in page.get(key) or [] if isinstance(item, dict))
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return items

    async def _merged_list(self, ctx: Context, method: str) -> dict[str, Any]:
        key, name_field = _LISTS[method]
        merged: list[dict[str, Any]] = []
        for server, link in self.proxy.links.items():
            if not link.available() or not self._serves(link, method):
                self._forget(method, server)
                continue
            try:
                items = await self._list_all(ctx, server, method, key)
            except MCPError as exc:
                logger.warning("listing %s of upstream %r failed: %s", key, server, exc.error.message)
                self._forget(method, server)
                continue
            self._forget(method, server)
            for item in items:
                merged.append(self._export(method, server, item, name_field))
        return {key: merged}

    def _export(self, method: str, server: str, item: dict[str, Any], name_field: str) -> dict[str, Any]:
        name = str(item.get(name_field, ""))
        try:
            if method == "tools/list":
                return {**item, name_field: self.tools.add(server, name, prefixed=True)}
            if method == "prompts/list":
                return {**item, name_field: self.prompts.add(server, name, prefixed=True)}
        except CollisionError as exc:
            logger.error("name collision: %s", exc)
            raise MCPError(types.INTERNAL_ERROR, f"name collision between upstreams: {exc}") from exc
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

    @staticmethod
    def _serves(link: Any, method: str) -> bool:
        caps = link.identity.capabilities if link.identity is not None else None
        if caps is None:
            return True
        if method == "tools/list":
            return caps.tools is not None
        if method == "prompts/list":
            return caps.prompts is not None
        return caps.resources is not None

    async def _by_uri(self, ctx: Context, method: str, params: BaseModel) -> dict[str, Any]:
        uri = str(getattr(params, "uri", ""))
        with_resources = [s for s, link in self.proxy.links.items() if self._serves(link, "resources/list")]
        server = self.resources.route(uri, with_resources)
        if server is None:
            await self._merged_list(ctx, "resources/list")
            await self._merged_list(ctx, "resources/templates/list")
            server = self.resources.route(uri, with_resources)
        if server is None:
            raise MCPError(-32002, f"Resource not found: {uri}")
        return await self.proxy.relay(ctx, server, method, params)

    async def _get_prompt(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        assert isinstance(params, types.GetPromptRequestParams)
        route = self.prompts.routes.get(params.name) or split_exported(params.name, self.servers)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        server, name = route
        return await self.proxy.relay(ctx, server, "prompts/get", params.model_copy(update={"name": name}))

    async def _complete(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        assert isinstance(params, types.CompleteRequestParams)
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            route = self.prompts.routes.get(ref.name) or split_exported(ref.name, self.servers)
            if route is None:
                raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {ref.name}")
            server, name = route
            forwarded = params.model_copy(update={"ref": ref.model_copy(update={"name": name})})
            return await self.proxy.relay(ctx, server, "completion/complete", forwarded)
        with_resources = [s for s, link in self.proxy.links.items() if self._serves(link, "resources/list")]
        found = self.resources.route(str(ref.uri), with_resources)
        if found is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown resource template: {ref.uri}")
        return await self.proxy.relay(ctx, found, "completion/complete", params)

    async def _set_level(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        for server, link in self.proxy.links.items():
            caps = link.identity.capabilities if link.identity is not None else None
            if link.available() and caps is not None and caps.logging is not None:
                try:
                    await self.proxy.relay(ctx, server, "logging/setLevel", params)
                except MCPError as exc:
                    logger.warning("logging/setLevel on upstream %r failed: %s", server, exc.error.message)
        return {}

    async def _local_ping(self, ctx: Context, params: BaseModel) -> dict[str, Any]:
        return {}

    async def roots_changed(self) -> None:
        """Tell every upstream the client's roots changed."""
        for link in self.proxy.links.values():
            if link.available():
                try:
                    async with link.using() as upstream:
                        await upstream.notify(types.RootsListChangedNotification())
                except (MCPError, Exception) as exc:
                    logger.debug("roots/list_changed to %r failed: %s", link.name, exc)

    def capabilities(self) -> types.ServerCapabilities:
        """The merged capabilities of several upstreams, as one server."""
        identities = [link.identity for link in self.proxy.links.values() if link.identity is not None]
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
            for name, link in self.proxy.links.items()
            if link.identity is not None and link.identity.instructions
        ]
        return "\n\n".join(parts) or None
