"""The MCP conformance suite against our fixture server (and, through it, the guard)."""
