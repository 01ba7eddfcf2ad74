"""Benchmarks of mcp-loop-guard against a direct connection and other MCP proxies.

Run them with ``python -m benchmarks.run`` from the repository root; see README.md here.
"""
