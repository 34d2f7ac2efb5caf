"""Database maintenance for ``countersign db …``: schema status without migrating, backup, vacuum.

Both backends: the SQLite file (``COUNTERSIGN_DB``) or PostgreSQL (``COUNTERSIGN_DATABASE_URL``).
Backups are SQLite only: PostgreSQL has ``pg_dump`` (see the README).
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from storage.errors import DatabaseUnreachable, StorageError
from storage.sqlite.migrations import LATEST_VERSION as SQLITE_LATEST


@dataclass(frozen=True)
class SchemaStatus:
    """The database's schema version against the one this code writes."""

    current: int
    latest: int

    @property
    def problem(self) -> str | None:
        """``None`` when they match; else one sentence for the operator."""
        if self.current > self.latest:
            return (
                f"the database's schema version {self.current} is newer than this countersign's {self.latest}: "
                "upgrade countersign (never run an older version on it)"
            )
        if self.current < self.latest:
            return (
                f"the database's schema version {self.current} is older than this countersign's {self.latest}: "
                "run `countersign db migrate`"
            )
        return None


async def _connect_postgres(database_url: str, connect_timeout: float) -> Any:
    """One autocommit connection; :class:`DatabaseUnreachable` when the server does not answer in time."""
    import psycopg

    try:
        return await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, connect_timeout=max(1, math.ceil(connect_timeout))
        )
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DatabaseUnreachable(f"cannot connect to PostgreSQL: {first}") from exc


async def schema_status(db_path: Path, database_url: str | None, *, connect_timeout: float = 10.0) -> SchemaStatus:
    """Read the schema version without changing anything (a missing SQLite file reads as version 0).

    >>> (await schema_status(Path("countersign.db"), None)).problem is None
    True
    """
    if database_url:
        import psycopg

        from storage.postgres.migrations import LATEST_VERSION, schema_version

        try:
            async with await _connect_postgres(database_url, connect_timeout) as conn:
                return SchemaStatus(await schema_version(conn), LATEST_VERSION)
        except psycopg.Error as exc:
            raise StorageError(f"cannot read the PostgreSQL schema: {exc}") from exc
    return await asyncio.to_thread(_sqlite_schema_status, db_path)


def _sqlite_schema_status(db_path: Path) -> SchemaStatus:
    if not db_path.exists():
        return SchemaStatus(0, SQLITE_LATEST)
    try:
        conn = sqlite3.connect(f"file:{quote(str(db_path.resolve()))}?mode=ro", uri=True)
        try:
            has_table = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
            ).fetchone()
            current = 0
            if has_table:
                current = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {db_path}: {exc}") from exc
    return SchemaStatus(int(current), SQLITE_LATEST)


def backup_sqlite(db_path: Path, destination: Path) -> int:
    """Copy the live SQLite file to ``destination`` with SQLite's online backup API; returns its size in bytes.

    The copy is one consistent snapshot: it is taken in a single read transaction, so writers (which
    go to the WAL) keep going and every transaction committed before it started is in it. The
    destination must not exist yet (a backup never overwrites one).

    >>> backup_sqlite(Path("countersign.db"), Path("/backups/countersign-2026-03-02.db"))
    1048576
    """
    if destination.exists():
        raise StorageError(f"{destination} already exists; choose a new file for the backup")
    if not db_path.exists():
        raise StorageError(f"{db_path} does not exist")
    partial = destination.with_name(destination.name + ".partial")
    try:
        source = sqlite3.connect(db_path, timeout=30)
        try:
            target = sqlite3.connect(partial)
            try:
                source.backup(target, pages=-1)  # one step: one read transaction, one snapshot
                target.execute("PRAGMA journal_mode = DELETE")  # a single self-contained file
                problem = target.execute("PRAGMA quick_check").fetchone()[0]
            finally:
                target.close()
        finally:
            source.close()
        if problem != "ok":
            raise StorageError(f"the backup failed its integrity check: {problem}")
        partial.replace(destination)
    except sqlite3.Error as exc:
        raise StorageError(f"backup failed: {exc}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return destination.stat().st_size


async def vacuum(db_path: Path, database_url: str | None, *, connect_timeout: float = 10.0) -> None:
    """Give space freed by pruning back (SQLite: ``VACUUM`` rewrites the file; PostgreSQL: ``VACUUM ANALYZE``)."""
    if database_url:
        import psycopg

        try:
            async with await _connect_postgres(database_url, connect_timeout) as conn:
                await conn.execute("VACUUM (ANALYZE)")
        except psycopg.Error as exc:
            raise StorageError(f"VACUUM failed: {exc}") from exc
        return
    await asyncio.to_thread(_vacuum_sqlite, db_path)


def _vacuum_sqlite(db_path: Path) -> None:
    try:
        conn = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        try:
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"VACUUM failed: {exc}") from exc
