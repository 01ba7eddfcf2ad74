"""mcp-loop-guard: a transparent MCP proxy that stops tool-call loops."""

__version__ = "0.1.0"
"""The one place the version is written (the build reads it here): no metadata lookup at start."""

__all__ = ["__version__"]
