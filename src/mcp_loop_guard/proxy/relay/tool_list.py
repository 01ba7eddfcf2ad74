"""The stdio relay's upstream tools: their annotations for the judge, and the list the client was given.

A ``tools/call`` before any ``tools/list`` makes the guard list the tools itself, so the
side-effect rule sees the tool's annotations. After a restart the guard lists them again,
so the client can be told when the new child has other tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_loop_guard.plan import Limits
from mcp_loop_guard.proxy.upstream.channel import Channel
from mcp_loop_guard.proxy.upstream.tool_facts import ToolFacts

RESERVED_META = "io.modelcontextprotocol/"


class ToolList:
    """What one stdio upstream listed, as the relay saw it."""

    def __init__(self, upstream: Channel, limits: Limits, facts: ToolFacts | None = None) -> None:
        """Nothing known until the upstream's tools are listed (``facts``: what others learnt, shared)."""
        self.upstream = upstream
        self.limits = limits
        self.facts = facts or ToolFacts()
        self.listed: list[Any] | None = None
        """The tools the client was last given (all pages), to tell it when a restarted upstream has others."""

    async def annotations(self, tool: str, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """The tool's annotations; the first call before any tools/list fetches the list itself.

        The guard's own request carries the client's 2026-07-28 envelope (protocol version,
        client info), so an upstream speaking that era answers it as it answers the client.
        """
        if not self.facts.listed and self.upstream.down_reason() is None:
            meta = params.get("_meta")
            envelope = {k: v for k, v in meta.items() if k.startswith(RESERVED_META)} if isinstance(meta, dict) else {}
            await self._learn(envelope)
        return self.facts.annotations(tool)

    async def _learn(self, envelope: dict[str, Any]) -> None:
        cursor: object = None
        for page in range(20):
            params: dict[str, Any] = {"cursor": cursor} if cursor else {}
            if envelope:
                params["_meta"] = envelope
            answer = await self.upstream.request("tools/list", params or None, within=self.limits.call_timeout or 10.0)
            result = (answer or {}).get("result")
            if not isinstance(result, dict):
                self.facts.listed = True  # nothing to learn from this server (no tools, or no answer)
                return
            self.facts.note(result.get("tools") or [], first_page=page == 0)
            self.upstream.learn_tools(result.get("tools") or [])
            cursor = result.get("nextCursor")
            if not cursor:
                return

    def seen(self, tools: list[Any], *, first_page: bool) -> None:
        """One page of a tools/list answer on its way to the client."""
        self.facts.note(tools, first_page=first_page)
        self.upstream.learn_tools(tools)
        self.listed = list(tools) if first_page or self.listed is None else [*self.listed, *tools]

    async def changed_on_restart(self) -> bool:
        """List the tools of a new child; True when they differ from what the client was given."""
        if self.listed is None:
            return False
        tools: list[Any] = []
        cursor: object = None
        for _ in range(20):
            answer = await self.upstream.request(
                "tools/list", {"cursor": cursor} if cursor else None, within=self.limits.call_timeout or 10.0
            )
            result = (answer or {}).get("result")
            if not isinstance(result, dict):
                return False
            tools.extend(result.get("tools") or [])
            cursor = result.get("nextCursor")
            if not cursor:
                break
        self.facts.note(tools, first_page=True)
        self.upstream.learn_tools(tools)
        if tools == self.listed:
            return False
        self.listed = tools
        return True
