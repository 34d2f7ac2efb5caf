"""Connections to the database file: one per thread, each statement group in a short transaction.

SQLite allows one writer at a time. Every thread gets its own connection (``threading.local``), so
threads never share a cursor; writers queue on SQLite's lock through ``busy_timeout`` instead of
failing with "database is locked". Write groups open with ``BEGIN IMMEDIATE``: the write lock is
taken before the first read, so a compare-and-set reads and writes the same version of the row and
a WAL reader can never be refused an upgrade (SQLITE_BUSY_SNAPSHOT, which skips the busy handler).
"""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
import threading
import time
import weakref
from abc import ABC, abstractmethod

from sqlite_utils import Database

from storage.errors import StorageError

DEFAULT_BUSY_TIMEOUT = 60.0
"""Seconds a writer waits for the lock before giving up (the brief asks for at least 30)."""

SYNCHRONOUS_MODES = ("FULL", "NORMAL")


def configure(conn: sqlite3.Connection, *, busy_timeout: float, synchronous: str) -> None:
    """Per-connection settings: the busy timeout, foreign keys and how hard commits hit the disk."""
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    conn.execute("PRAGMA foreign_keys = ON")
    # FULL makes each commit durable against power loss too; NORMAL (with WAL) only against crashes
    # of the process, in exchange for cheaper commits.
    conn.execute(f"PRAGMA synchronous = {synchronous}")


class Connector(ABC):
    """Hands out the calling thread's :class:`Database` for reads and for write transactions.

    >>> connector = ThreadLocalConnector("countersign.db")
    >>> with connector.writing() as db:
    ...     db.execute("INSERT INTO events (event_key, seen_at) VALUES (?, ?)", ["e1", 0.0])
    """

    path: str

    @abstractmethod
    def _db(self) -> Database:
        """The calling thread's database."""

    _guard_lock: threading.RLock | None = None
    """Held around every use of the database, when its one connection is shared between threads."""

    def reading(self) -> _Reading:
        """The thread's database for statements that only read (each runs in autocommit)."""
        return _Reading(self)

    def writing(self) -> _Writing:
        """A ``BEGIN IMMEDIATE`` transaction, committed on success and rolled back on any error.

        Nested use joins the outer transaction.
        """
        return _Writing(self)

    def database(self) -> Database:
        """The calling thread's sqlite-utils :class:`Database` (for ad-hoc queries and tests)."""
        lock = self._guard_lock
        if lock is None:
            return self._db()
        with lock:
            return self._db()

    @abstractmethod
    def close(self) -> None:
        """Close every connection; later use raises :class:`StorageError`."""


# The two context managers are classes rather than ``contextlib.contextmanager`` generators: every store
# method enters one (a batch of writes enters several, nested), about fifty per engine conversation on
# the writer thread alone, and a generator-based one costs several times as much to enter and leave.


class _Reading:
    """:meth:`Connector.reading`: the thread's database; SQLite errors inside become :class:`StorageError`."""

    __slots__ = ("_connector", "_lock")

    def __init__(self, connector: Connector) -> None:
        self._connector = connector
        self._lock: threading.RLock | None = None

    def __enter__(self) -> Database:
        lock = self._lock = self._connector._guard_lock
        if lock is None:
            return self._connector._db()
        lock.acquire()
        try:
            return self._connector._db()
        except BaseException:
            lock.release()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._lock is not None:
            self._lock.release()
        if isinstance(exc, sqlite3.Error):
            raise StorageError(f"SQLite error: {exc}") from exc


class _Writing:
    """:meth:`Connector.writing`: a ``BEGIN IMMEDIATE`` transaction, or the one already open (nested)."""

    __slots__ = ("_connector", "_lock", "_db", "_owner")

    def __init__(self, connector: Connector) -> None:
        self._connector = connector
        self._lock: threading.RLock | None = None
        self._owner = False

    def __enter__(self) -> Database:
        lock = self._lock = self._connector._guard_lock
        if lock is not None:
            lock.acquire()
        try:
            db = self._db = self._connector._db()
            if not db.conn.in_transaction:
                try:
                    db.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise StorageError(f"SQLite error: {exc}") from exc
                self._owner = True
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return db

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        try:
            if not self._owner:  # joined an outer transaction: it decides
                return
            db = self._db
            if exc is None:
                try:
                    db.execute("COMMIT")
                    return
                except BaseException as commit_error:
                    exc = commit_error
                    if db.conn.in_transaction:
                        db.execute("ROLLBACK")
                    if isinstance(exc, sqlite3.Error):
                        raise StorageError(f"SQLite error: {exc}") from exc
                    raise
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StorageError(f"SQLite error: {exc}") from exc
        finally:
            if self._lock is not None:
                self._lock.release()


class ThreadLocalConnector(Connector):
    """One connection per thread to a database file; many threads and processes may share the file."""

    def __init__(
        self, path: str | pathlib.Path, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, synchronous: str = "FULL"
    ) -> None:
        if synchronous not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
        self.path = str(path)
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._local = threading.local()
        # Weak, so that the connection of a thread that has ended is closed with its thread-local.
        self._open: weakref.WeakSet[Database] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    def _db(self) -> Database:
        db = getattr(self._local, "db", None)
        if db is not None:
            return db
        with self._lock:
            if self._closed:
                raise StorageError(f"storage {self.path!r} is closed")
            # isolation_level=None: no implicit transactions; every group is an explicit BEGIN IMMEDIATE.
            # check_same_thread=False only so that close() may close it from another thread.
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False)
            configure(conn, busy_timeout=self._busy_timeout, synchronous=self._synchronous)
            db = Database(conn, execute_plugins=False)
            self._open.add(db)
        self._local.db = db
        return db

    def close(self) -> None:
        with self._lock:
            self._closed = True
            open_now = list(self._open)
            if open_now:
                checkpoint(open_now[0])
            for db in open_now:
                db.close()
            self._open.clear()
        self._local = threading.local()


def checkpoint(db: Database) -> None:
    """Merge the write-ahead log into the database file and empty it (``wal_checkpoint(TRUNCATE)``).

    Done on a clean close, so that the file alone holds everything (a copy of ``countersign.db`` without its
    ``-wal`` file is then complete). SQLite merges the log by itself only when the very last connection to the
    file closes; a reader elsewhere (another process, ``sqlite3`` in a terminal) prevents that. Best effort: a
    checkpoint that cannot finish (a reader mid-transaction) leaves the log for the next one.
    """
    with contextlib.suppress(sqlite3.Error):
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


class SharedConnector(Connector):
    """One connection used by every thread in turn (an in-memory database, or a caller's Database)."""

    def __init__(self, db: Database, *, owned: bool = False) -> None:
        self.path = ":memory:" if db.memory else str(db.conn.execute("PRAGMA database_list").fetchone()[2])
        self._shared = db
        self._owned = owned
        self._lock = threading.RLock()
        self._guard_lock = self._lock
        self._closed = False

    def _db(self) -> Database:
        if self._closed:
            raise StorageError(f"storage {self.path!r} is closed")
        return self._shared

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._owned:
                self._shared.close()


def connector_for(
    path_or_db: object, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, synchronous: str = "FULL"
) -> tuple[Connector, bool]:
    """A migrated connector for a path, a sqlite-utils Database, or anything with a ``connector``.

    Returns the connector and whether the caller owns it (must close it). A file gets WAL mode
    (persistent, set once) and is migrated to the latest schema.
    """
    from storage.sqlite.migrations import migrate

    shared = getattr(path_or_db, "connector", None)
    if isinstance(shared, Connector):
        return shared, False
    if isinstance(path_or_db, Database):
        path_or_db.conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        path_or_db.conn.execute("PRAGMA foreign_keys = ON")
        if not path_or_db.memory:
            path_or_db.enable_wal()
        migrate(path_or_db)
        return SharedConnector(path_or_db), False
    if not isinstance(path_or_db, (str, pathlib.Path)):
        raise TypeError(f"expected a path, a sqlite-utils Database or a Storage, not {type(path_or_db).__name__}")
    if str(path_or_db) == ":memory:":
        # Each connection to ":memory:" is a separate database, so every thread shares one.
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        configure(conn, busy_timeout=busy_timeout, synchronous=synchronous)
        db = Database(conn, execute_plugins=False)
        migrate(db)
        return SharedConnector(db, owned=True), True
    connector = ThreadLocalConnector(path_or_db, busy_timeout=busy_timeout, synchronous=synchronous)
    try:
        db = connector.database()
        _enable_wal(db.conn, busy_timeout)
        migrate(db)
    except sqlite3.Error as exc:
        connector.close()
        raise StorageError(f"cannot open {connector.path!r}: {exc}") from exc
    except BaseException:
        connector.close()
        raise
    return connector, True


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Switch the file to WAL (persistent), once, even when several processes open a new file at once."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        # Changing the journal mode needs an exclusive lock, and SQLite may refuse it at once instead of
        # waiting, so retry until the mode is WAL (possibly set by another process meanwhile).
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
                return
            if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() == "wal":
                return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
        if time.monotonic() > deadline:
            raise StorageError("could not switch the database to WAL mode: it stayed locked")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
