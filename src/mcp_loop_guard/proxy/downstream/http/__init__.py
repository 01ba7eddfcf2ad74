"""The HTTP front door: streamable HTTP and SSE sessions, sessionless agents, limits and status pages."""
