"""The embedded default: one SQLite file shared by every guard of the user.

WAL mode lets many guard processes read and write it at once; each write is one short
transaction, and a busy file is waited on for a bounded time only (then the store reports
itself unavailable and the guard fails open or closed as configured). Expired rows are purged
as the guard goes. A file that is not a database (corrupt, or something else) is set aside
with a log line and a fresh one started.

A key claimed by a guard (a stdio guard's agent) is written to its live file instead, one
system call per event (:mod:`.live`), and to its row when the guard lets it go. A guard that
died holding a key leaves the file: the next claim of that key, or any guard's claim once a
purge is due, folds it into the row.

No SQLite call waits on the event loop: another process holding the file's lock makes a
call wait (then fail with a store error) in a worker thread, one call at a time, so
``/healthz`` and the other agents' calls go on meanwhile. A call waits at most the store's
timeout in all, its turn included. A state's plain read or write is tried on the event loop
first, told not to wait for a lock, when no call is in a thread: a locked file refuses it at
once, and only then does it go to a thread. The hop there and back costs more than the write
itself (0.3 ms a call alone, about 1 ms of CPU in an HTTP guard under load on two cores,
through the GIL's hand-overs). A held key's live-file write (one ``pwrite`` into the page
cache) never leaves the event loop.

The file, its directory and its live files are this user's alone
(:mod:`mcp_loop_guard.private_files`): a path another user could write is refused when the
store is opened, and a row that does not read as a state (planted, or of another version) is
an absent one.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from mcp_loop_guard.core.state import State
from mcp_loop_guard.private_files import UnsafePathError, check_private_file, open_private, private_directory
from mcp_loop_guard.store.base import (
    KeyInfo,
    Owner,
    StoreError,
    StoreSetupError,
    read_owner,
    read_state,
    real_number,
    state_bytes,
    stored_state,
    wall_clock,
    write_state,
)
from mcp_loop_guard.store.live import LiveFile, LiveFiles, Record

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
        """Open (or create) the file; ``timeout`` bounds each wait for a busy file.

        This waits on the file: a running guard calls it from a worker thread.

        Raises:
            StoreSetupError: the file, its directory or its live files could be written by another user.
            StoreError: the file cannot be created or opened.
        """
        self.path = path
        self._timeout = timeout
        self._clock = clock
        self._next_purge = 0.0
        self._next_sweep = 0.0
        self._live = LiveFiles(path.with_name(f"{path.name}-live"))
        self._db = self._open()
        self._held: dict[str, LiveFile] = {}
        """Keys this store claimed, written to their live files."""
        self._turn = anyio.Lock()
        """Held while a worker thread uses the connection."""

    def _open(self) -> sqlite3.Connection:
        self._busy = self._timeout
        """SQLite's wait for a locked file now, in seconds (cut short for a call that waited for its turn)."""
        try:
            self._check_files()
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False)
        except UnsafePathError as exc:
            raise StoreSetupError(str(exc)) from exc
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

    def _check_files(self) -> None:
        """The directory (made 0700 if missing), the file (made 0600), its companions and live files: ours alone.

        SQLite opens the file and its companions (``-wal``, ``-shm``) by name, following links:
        in a directory only this user can write, nobody can plant or swap them.
        """
        private_directory(self.path.parent)
        os.close(open_private(self.path, os.O_RDONLY | os.O_CREAT))
        for suffix in ("-wal", "-shm", "-journal"):
            check_private_file(Path(f"{self.path}{suffix}"))
        if os.path.isdir(self._live.directory) or os.path.islink(self._live.directory):
            private_directory(self._live.directory, create=False)  # anything else: no live files (a warning at claim)

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

    async def _run_here_first(self, work: Callable[[], R]) -> R:
        """``work`` on the event loop, told not to wait for a lock; refused for one, as ``_run`` (it runs again there).

        Raises:
            StoreError: as ``_run``.
        """
        if not self._turn.locked():  # no call in a thread uses the connection, and none queued before this one
            if self._busy != 0:
                with self._errors():
                    self._db.execute("PRAGMA busy_timeout = 0")
                self._busy = 0.0
            try:
                return work()
            except StoreError as exc:
                if not _locked(exc.__cause__):
                    raise
        return await self._run(work)

    async def _run(self, work: Callable[[], R]) -> R:
        """``work`` (SQLite calls) in a worker thread, after the calls before it, all within the store's timeout.

        The wait for a turn and SQLite's wait for a locked file together take at most the
        timeout: calls queued behind one waiting on another process's lock fail with it,
        rather than each waiting in turn.

        Raises:
            StoreError: no turn in time (the file is busy), or ``work``'s own.
        """
        deadline = anyio.current_time() + self._timeout
        acquired = False
        with anyio.move_on_after(self._timeout):
            await self._turn.acquire()
            acquired = True
        if not acquired:
            msg = f"state file {self.path}: busy (earlier calls are still waiting on it)"
            raise StoreError(msg)
        try:
            return await anyio.to_thread.run_sync(self._within, deadline - anyio.current_time(), work)
        finally:
            self._turn.release()

    def _within(self, seconds: float, work: Callable[[], R]) -> R:
        """Run ``work`` with SQLite's wait for a locked file cut to ``seconds`` (the full timeout when most is left)."""
        wait = self._timeout if seconds >= 0.9 * self._timeout else max(0.0, seconds)
        if wait != self._busy:
            with self._errors():
                self._db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
            self._busy = wait
        return work()

    async def load(self, key: str) -> State | None:
        """The key's state, or None when absent, expired or unreadable."""
        return await self._run_here_first(partial(self._load, key))

    def _load(self, key: str) -> State | None:
        with self._errors():
            row = self._db.execute("SELECT state, expires FROM agents WHERE key = ?", (key,)).fetchone()
        return _row_state(key, row, self._clock())

    async def save(self, key: str, state: State, ttl: float) -> None:
        """Write the key's state: to its live file when this store claimed it, else its row (one short transaction)."""
        now = self._clock()
        held = self._held.get(key)
        if held is not None:
            try:
                held.write(now + ttl, state_bytes(state))
            except OSError as exc:
                logger.warning("cannot write %s (%s); the agent's state goes to the state file", held.path, exc)
                del self._held[key]
                held.close(remove=True)
            else:
                return
        await self._run_here_first(partial(self._save, key, write_state(state), now, now + ttl))

    def _save(self, key: str, text: str, now: float, expires: float) -> None:
        with self._errors():
            self._db.execute(_UPSERT, (key, text, expires))
            self._purge(now)

    async def update(self, key: str, fold: Callable[[State], R], ttl: float) -> tuple[State, R]:
        """Read, fold and write inside one write transaction: no other process can interleave."""
        return await self._run(partial(self._update, key, fold, ttl))

    def _update(self, key: str, fold: Callable[[State], R], ttl: float) -> tuple[State, R]:
        now = self._clock()
        with self._transaction() as db:
            row = db.execute("SELECT state, expires FROM agents WHERE key = ?", (key,)).fetchone()
            state = _row_state(key, row, now) or State()
            result = fold(state)
            db.execute(_UPSERT, (key, write_state(state), now + ttl))
        return state, result

    async def claim(self, base: str, owner: Owner, ttl: float) -> tuple[str, bool]:
        """Claim the first free slot of ``base`` in one transaction, so two guards starting together differ."""
        return await self._run(partial(self._claim, base, owner))

    def _claim(self, base: str, owner: Owner) -> tuple[str, bool]:
        now = self._clock()
        with self._transaction() as db:
            slot = 1
            while True:
                key = base if slot == 1 else f"{base}#{slot}"
                held = self._owner_of(key)
                if held is None or not held.alive(now):
                    db.execute(
                        "INSERT INTO owners (key, host, pid, started, lease) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT (key) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                        "started = excluded.started, lease = excluded.lease",
                        (key, owner.host, owner.pid, owner.started, owner.lease),
                    )
                    self._fold(db, self._live.read(key), now)  # what a guard that died holding it wrote last
                    self._hold(key)
                    self._sweep(db, now)
                    return key, held is not None
                slot += 1

    def _hold(self, key: str) -> None:
        """Write ``key`` to its live file from now on (to its row when the file cannot be made)."""
        if key in self._held:
            return
        try:
            self._held[key] = self._live.open(key)
        except OSError as exc:
            logger.warning("cannot create a live file in %s (%s); writing to the state file", self._live.directory, exc)

    @staticmethod
    def _fold(db: sqlite3.Connection, record: Record | None, now: float) -> None:
        """Write a live file's record into its row (an expired one is not worth keeping, nor one that never expires)."""
        if record is not None and now < record.expires < math.inf:
            db.execute(_UPSERT, (record.key, record.state, record.expires))

    def _sweep(self, db: sqlite3.Connection, now: float) -> None:
        """Fold and delete the live files of keys no live guard holds (their guards died), once per purge period.

        Runs inside a claim's transaction: a key claimed meanwhile has a live owner row, and is left alone.
        """
        if now < self._next_sweep:
            return
        self._next_sweep = now + PURGE_EVERY
        for path, record in self._live.records():
            if record is None or record.key in self._held:
                continue  # unreadable: being rewritten by its guard right now, or cut short (its row stands)
            holder = self._owner_of(record.key)
            if holder is not None and holder.alive(now):
                continue
            self._fold(db, record, now)
            path.unlink(missing_ok=True)

    async def release(self, key: str, owner: Owner) -> None:
        """Write a held key's live state to its row and delete the file, then the ownership row if still ``owner``'s.

        When the file cannot be written, the live file stays: the next claim of the key folds it.
        """
        await self._run(partial(self._release, key, owner))

    def _release(self, key: str, owner: Owner) -> None:
        held = self._held.pop(key, None)
        try:
            with self._transaction() as db:
                if held is not None:
                    self._fold(db, held.last, self._clock())
                db.execute("DELETE FROM owners WHERE key = ? AND host = ? AND pid = ?", (key, owner.host, owner.pid))
        except StoreError:
            if held is not None:
                held.close(remove=False)
            raise
        if held is not None:
            held.close(remove=True)

    async def renew(self, key: str, owner: Owner) -> None:
        """Move the lease on."""
        await self._run(partial(self._renew, key, owner))

    def _renew(self, key: str, owner: Owner) -> None:
        with self._errors():
            self._db.execute(
                "UPDATE owners SET lease = ? WHERE key = ? AND host = ? AND pid = ?",
                (owner.lease, key, owner.host, owner.pid),
            )

    async def keys(self) -> list[KeyInfo]:
        """Every unexpired key, with its owner; a key in a live file as its guard wrote it last."""
        return await self._run(self._keys)

    def _keys(self) -> list[KeyInfo]:
        now = self._clock()
        with self._errors():
            rows = self._db.execute(
                "SELECT a.key, a.state, a.expires, o.host, o.pid, o.started, o.lease "
                "FROM agents a LEFT JOIN owners o ON o.key = a.key WHERE a.expires > ? ORDER BY a.key",
                (now,),
            ).fetchall()
            found: dict[str, KeyInfo] = {}
            for key, text, expires, host, pid, started, lease in rows:
                until = real_number(expires)  # a row whose expiry is not a number is shown, and unreadable
                state = read_state(text) if until is not None else None
                found[str(key)] = KeyInfo(str(key), state, until or now, read_owner(host, pid, started, lease))
            for _, record in self._live.records():
                if record is None or not now < record.expires < math.inf:
                    continue
                owner = found[record.key].owner if record.key in found else self._owner_of(record.key)
                found[record.key] = KeyInfo(record.key, read_state(record.state), record.expires, owner)
        return [found[key] for key in sorted(found)]

    def _owner_of(self, key: str) -> Owner | None:
        """Who holds ``key`` as the owners table says (inside a transaction, if one is open)."""
        row = self._db.execute("SELECT host, pid, started, lease FROM owners WHERE key = ?", (key,)).fetchone()
        return read_owner(*row) if row is not None else None

    async def reset(self, key: str) -> bool:
        """Delete the key's state (its row, and its live file)."""
        return await self._run(partial(self._reset, key))

    def _reset(self, key: str) -> bool:
        held = self._held.pop(key, None)
        if held is not None:
            held.close(remove=False)
        with self._errors():
            had_row = self._db.execute("DELETE FROM agents WHERE key = ?", (key,)).rowcount > 0
        return self._live.remove(key) or had_row

    async def aclose(self) -> None:
        """Write the keys still held to their rows (their live files go), then close the file.

        Waits for the call in progress, if any (each is bounded by the busy timeout).
        """
        async with self._turn:
            await anyio.to_thread.run_sync(self._within, self._timeout, self._close)

    def _close(self) -> None:
        held, self._held = self._held, {}
        for live in held.values():
            try:
                with self._transaction() as db:
                    self._fold(db, live.last, self._clock())
            except StoreError:
                live.close(remove=False)  # the next claim of the key folds it
            else:
                live.close(remove=True)
        self._db.close()


def _locked(error: BaseException | None) -> bool:
    """Whether SQLite refused for another connection's lock (busy or locked), not for a fault of the file."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(error, sqlite3.OperationalError) and code is not None and code & 0xFF in _LOCK_CODES


_LOCK_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
"""Primary result codes of a lock held elsewhere (extended codes add high bits: SQLITE_BUSY_SNAPSHOT, ...)."""


def _row_state(key: str, row: tuple[Any, Any] | None, now: float) -> State | None:
    """A row's state: None when there is none, it has expired, or it does not read (a planted row is an absent one)."""
    if row is None:
        return None
    text, expires = row
    until = real_number(expires)
    if until is not None and until <= now:
        return None
    return stored_state(key, text if until is not None else b"")  # an expiry that is no number: unreadable too
