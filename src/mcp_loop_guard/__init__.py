"""mcp-loop-guard: a transparent MCP proxy that stops tool-call loops."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mcp-loop-guard")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
