"""Where loop state lives: in memory, in an SQLite file (the default), or in Redis/Valkey for fleets."""

from __future__ import annotations

from pathlib import Path

from mcp_loop_guard.redaction import redact_url
from mcp_loop_guard.store.agent import AgentLoop, StoreHealth
from mcp_loop_guard.store.base import KeyInfo, Owner, Store, StoreError, StoreSetupError
from mcp_loop_guard.store.memory import MemoryStore
from mcp_loop_guard.store.sqlite import FILE_NAME, SqliteStore, default_directory

__all__ = [
    "AgentLoop",
    "KeyInfo",
    "MemoryStore",
    "Owner",
    "SqliteStore",
    "Store",
    "StoreError",
    "StoreHealth",
    "StoreSetupError",
    "describe_store",
    "open_store",
    "store_kind",
]


def store_kind(spec: str) -> str:
    """``memory``, ``sqlite`` or ``redis`` for a ``LOOP_GUARD_STATE`` value.

    Raises:
        ValueError: the value is none of the accepted forms.
    """
    if spec == "memory":
        return "memory"
    if spec == "sqlite" or spec.startswith("sqlite:"):
        return "sqlite"
    if spec.startswith(("redis://", "rediss://", "valkey://", "valkeys://", "unix://")):
        return "redis"
    msg = "expected memory, sqlite, sqlite:///path/to/file.sqlite3, redis://host:port/db or rediss://..."
    raise ValueError(msg)


def sqlite_path(spec: str) -> Path:
    """The file a ``sqlite`` or ``sqlite:///path`` value names."""
    if spec == "sqlite":
        return default_directory() / FILE_NAME
    path = spec.removeprefix("sqlite:").removeprefix("//")
    return Path(path).expanduser()


def open_store(spec: str, *, timeout: float) -> Store:
    """The store a ``LOOP_GUARD_STATE`` value names; ``timeout`` bounds each operation.

    Opening a file waits on it: a running guard calls this from a worker thread.

    Raises:
        StoreSetupError: the store cannot be had at all (a missing package, a path another user
            could write); the message names the store asked for.
        StoreError: the store cannot be opened now (a file that cannot be created).
    """
    kind = store_kind(spec)
    try:
        if kind == "memory":
            return MemoryStore()
        if kind == "sqlite":
            return SqliteStore(sqlite_path(spec), timeout=timeout)
        from mcp_loop_guard.store.redis import RedisStore  # noqa: PLC0415 - only fleets need it

        url = spec.replace("valkey://", "redis://", 1).replace("valkeys://", "rediss://", 1)
        return RedisStore(url, timeout=timeout)
    except StoreSetupError as error:
        raise StoreSetupError(f"the state store {describe_store(spec)} cannot be used: {error}") from error


def describe_store(spec: str) -> str:
    """The store for logs and titles: the kind and where, never a user, password or query (``?password=``)."""
    kind = store_kind(spec)
    if kind == "sqlite":
        return f"sqlite ({sqlite_path(spec)})"
    if kind == "redis":
        return f"redis ({redact_url(spec)})"
    return kind
