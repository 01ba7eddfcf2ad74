"""What an upstream says about its tools, learnt from its ``tools/list``: annotations and names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_TOOLS = 10_000
"""Tools remembered per upstream (a server listing more is not judged by annotation beyond these)."""


class ToolFacts:
    """Annotations by tool name, for the side-effect rule, and the names for metric labels."""

    def __init__(self) -> None:
        """Nothing known until a tools/list result is seen."""
        self._annotations: dict[str, dict[str, Any]] = {}
        self.listed = False
        """A complete (first) page has been seen since the last change."""

    def note(self, tools: Iterable[object], *, first_page: bool) -> None:
        """Remember one page of a tools/list result."""
        if first_page:
            self._annotations.clear()
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str) and len(self._annotations) < MAX_TOOLS:
                annotations = tool.get("annotations")
                self._annotations[tool["name"]] = annotations if isinstance(annotations, dict) else {}
        self.listed = True

    def forget(self) -> None:
        """The list changed (``notifications/tools/list_changed``): learn it again."""
        self._annotations.clear()
        self.listed = False

    def known(self, tool: str) -> bool:
        """Whether the upstream listed ``tool``."""
        return tool in self._annotations

    def annotations(self, tool: str) -> dict[str, Any] | None:
        """The tool's annotations as listed, None when it was not listed."""
        return self._annotations.get(tool)

    def side_effect(self, tool: str) -> bool:
        """Annotated destructive (explicitly) and not idempotent: repeating it repeats its effect."""
        annotations = self._annotations.get(tool) or {}
        return annotations.get("destructiveHint") is True and annotations.get("idempotentHint") is not True
