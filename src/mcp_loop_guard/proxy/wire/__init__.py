"""The bytes on the wire: JSON-RPC lines, their framing and parsing, and the errors the spec prescribes.

Nothing here imports the MCP SDK: the stdio relay is built on it alone.
"""
