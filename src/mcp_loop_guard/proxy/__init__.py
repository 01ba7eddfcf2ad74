"""MCP plumbing around the pure detection core."""
