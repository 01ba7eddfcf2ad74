"""The embedded default: one SQLite file shared by every guard of the user.

WAL mode lets many guard processes read and write it at once; each write is one short
transaction, and a busy file is waited on for a bounded time only (then the store reports
itself unavailable and the guard fails open or closed as configured). Expired rows are purged
as the guard goes. A file that is not a database (corrupt, or something else) is set aside
with a log line and a fresh one started.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from mcp_loop_guard.core.state import State
from mcp_loop_guard.store.base import KeyInfo, Owner, StoreError, read_state, wall_clock, write_state

logger = logging.getLogger(__name__)

R = TypeVar("R")

FILE_NAME = "state.sqlite3"
PURGE_EVERY = 60.0
"""Seconds between two purges of expired rows."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (key TEXT PRIMARY KEY, state TEXT NOT NULL, expires REAL NOT NULL);
CREATE INDEX IF NOT EXISTS agents_expires ON agents (expires);
CREATE TABLE IF NOT EXISTS owners (
    key TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, started REAL NOT NULL, lease REAL NOT NULL
);
"""
_UPSERT = (
    "INSERT INTO agents (key, state, expires) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET state = excluded.state, expires = excluded.expires"
)


def default_directory() -> Path:
    """The user's state directory: ``$XDG_STATE_HOME/mcp-loop-guard`` or the platform's equivalent."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "mcp-loop-guard"


class SqliteStore:
    """Agent states in one SQLite file; safe for many guard processes at once."""

    name = "sqlite"
    shared = False

    def __init__(self, path: Path, *, timeout: float = 0.25, clock: Callable[[], float] = wall_clock) -> None:
        """Open (or create) the file; ``timeout`` bounds the wait for a busy file.

        Raises:
            StoreError: the file cannot be created or opened.
        """
        self.path = path
        self._timeout = timeout
        self._clock = clock
        self._next_purge = 0.0
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            msg = f"cannot open the state file {self.path}: {exc}"
            raise StoreError(msg) from exc
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.executescript(_SCHEMA)
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc) and "locked" not in str(exc):
                db.close()
                msg = f"cannot use the state file {self.path}: {exc}"
                raise StoreError(msg) from exc
            logger.warning("the state file %s cannot be written (%s); loop state is kept in memory", self.path, exc)
        except sqlite3.DatabaseError as exc:  # not a database: set it aside, start afresh
            db.close()
            return self._replace_corrupt(exc)
        return db

    def _replace_corrupt(self, exc: Exception) -> sqlite3.Connection:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(self._clock())}")
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                source.replace(Path(f"{aside}{suffix}"))
        logger.error(
            "the state file %s is unreadable (%s); moved it to %s and started a new one", self.path, exc, aside
        )
        return self._open()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Store errors for a busy, read-only or vanished file; a corrupt one is replaced first."""
        try:
            yield
        except sqlite3.OperationalError as exc:  # locked, read-only, disk I/O
            msg = f"state file {self.path}: {exc}"
            raise StoreError(msg) from exc
        except sqlite3.DatabaseError as exc:  # malformed, not a database
            self._db.close()
            self._db = self._replace_corrupt(exc)
            msg = f"state file {self.path} was unreadable and has been replaced"
            raise StoreError(msg) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._errors():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _purge(self, now: float) -> None:
        if now < self._next_purge:
            return
        self._next_purge = now + PURGE_EVERY
        self._db.execute("DELETE FROM agents WHERE expires <= ?", (now,))

    async def load(self, key: str) -> State | None:
        """The key's state, or None when absent, expired or unreadable."""
        with self._errors():
            row = self._db.execute("SELECT state, expires FROM agents WHERE key = ?", (key,)).fetchone()
        if row is None or row[1] <= self._clock():
            return None
        state = read_state(row[0])
        if state is None:
            logger.warning("the stored loop state of one agent was unreadable; it starts afresh")
        return state

    async def save(self, key: str, state: State, ttl: float) -> None:
        """Write the key's state (one short transaction)."""
        now = self._clock()
        with self._errors():
            self._db.execute(_UPSERT, (key, write_state(state), now + ttl))
            self._purge(now)

    async def update(self, key: str, fold: Callable[[State], R], ttl: float) -> tuple[State, R]:
        """Read, fold and write inside one write transaction: no other process can interleave."""
        now = self._clock()
        with self._transaction() as db:
            row = db.execute("SELECT state, expires FROM agents WHERE key = ?", (key,)).fetchone()
            state = (read_state(row[0]) if row is not None and row[1] > now else None) or State()
            result = fold(state)
            db.execute(_UPSERT, (key, write_state(state), now + ttl))
        return state, result

    async def claim(self, base: str, owner: Owner, ttl: float) -> tuple[str, bool]:
        """Claim the first free slot of ``base`` in one transaction, so two guards starting together differ."""
        now = self._clock()
        with self._transaction() as db:
            slot = 1
            while True:
                key = base if slot == 1 else f"{base}#{slot}"
                row = db.execute("SELECT host, pid, started, lease FROM owners WHERE key = ?", (key,)).fetchone()
                held = Owner(str(row[0]), int(row[1]), float(row[2]), float(row[3])) if row is not None else None
                if held is None or not held.alive(now):
                    db.execute(
                        "INSERT INTO owners (key, host, pid, started, lease) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (key) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                        "started = excluded.started, lease = excluded.lease",
                        (key, owner.host, owner.pid, owner.started, owner.lease),
                    )
                    return key, held is not None
                slot += 1

    async def release(self, key: str, owner: Owner) -> None:
        """Delete the ownership row if it is still ``owner``'s."""
        with self._errors():
            self._db.execute("DELETE FROM owners WHERE key = ? AND host = ? AND pid = ?", (key, owner.host, owner.pid))

    async def renew(self, key: str, owner: Owner) -> None:
        """Move the lease on."""
        with self._errors():
            self._db.execute(
                "UPDATE owners SET lease = ? WHERE key = ? AND host = ? AND pid = ?",
                (owner.lease, key, owner.host, owner.pid),
            )

    async def keys(self) -> list[KeyInfo]:
        """Every unexpired key, with its owner."""
        now = self._clock()
        with self._errors():
            rows = self._db.execute(
                "SELECT a.key, a.state, a.expires, o.host, o.pid, o.started, o.lease "
                "FROM agents a LEFT JOIN owners o ON o.key = a.key WHERE a.expires > ? ORDER BY a.key",
                (now,),
            ).fetchall()
        return [
            KeyInfo(
                str(key),
                read_state(text),
                float(expires),
                Owner(str(host), int(pid), float(started), float(lease)) if host is not None else None,
            )
            for key, text, expires, host, pid, started, lease in rows
        ]

    async def reset(self, key: str) -> bool:
        """Delete the key's state."""
        with self._errors():
            return self._db.execute("DELETE FROM agents WHERE key = ?", (key,)).rowcount > 0

    async def aclose(self) -> None:
        """Close the file."""
        self._db.close()
