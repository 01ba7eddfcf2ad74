"""Upstream servers: child processes, connections, restarts and supervision."""
