"""Upgrading to the hash-chained audit log chains the entries already there, on both backends."""

from __future__ import annotations

import psycopg
from sqlite_utils import Database

from storage import open_storage
from storage.postgres import open_postgres_storage
from storage.postgres.migrations import _AUDIT_CHAIN
from storage.postgres.migrations import MIGRATIONS as POSTGRES_MIGRATIONS
from storage.postgres.migrations import migrate as migrate_postgres
from storage.sqlite.migrations import MIGRATIONS as SQLITE_MIGRATIONS
from storage.sqlite.migrations import _audit_chain
from storage.sqlite.migrations import migrate as migrate_sqlite

# The versions just before the audit chain (other branches may add migrations before or after it).
SQLITE_BEFORE_CHAIN = SQLITE_MIGRATIONS.index(_audit_chain)
POSTGRES_BEFORE_CHAIN = POSTGRES_MIGRATIONS.index(_AUDIT_CHAIN)

OLD_ENTRIES = [
    (1_700_000_000.25, "U_ANA", "paused", "run-1", '{"approvals": ["a-1"]}'),
    (1_700_000_100.5, "U_BOB", "approved", "a-1", '{"tool": "delete_file"}'),
    (1_700_000_200.0, "U_ADMIN", "policy set", "delete_file", '{"mode":   "always"}'),
]


def test_sqlite_upgrade_chains_existing_entries(tmp_path):
    path = tmp_path / "cs.db"
    db = Database(path)
    migrate_sqlite(db, target=SQLITE_BEFORE_CHAIN)
    db.conn.executemany(
        "INSERT INTO audit (at, actor, action, subject, details_json) VALUES (?, ?, ?, ?, ?)", OLD_ENTRIES
    )
    db.conn.commit()
    db.close()
    with open_storage(path) as storage:
        result = storage.audit.verify()
        assert result.ok, result.problems
        assert (result.checked, result.last_id) == (3, 3)
        storage.audit.append("U_ANA", "paused", "run-2", {})
        assert storage.audit.verify().checked == 4


async def test_postgres_upgrade_chains_existing_entries(postgres_schemas):
    url = postgres_schemas.take(migrated=False)
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await migrate_postgres(conn, target=POSTGRES_BEFORE_CHAIN)
            for at, actor, action, subject, details in OLD_ENTRIES:
                await conn.execute(
                    "INSERT INTO audit (at, actor, action, subject, details_json) "
                    "VALUES (to_timestamp(%s), %s, %s, %s, %s)",
                    [at, actor, action, subject, details],
                )
        storage = await open_postgres_storage(url)
        try:
            result = await storage.audit.verify()
            assert result.ok, result.problems
            assert (result.checked, result.last_id) == (3, 3)
            await storage.audit.append("U_ANA", "paused", "run-2", {})
            assert (await storage.audit.verify()).checked == 4
        finally:
            await storage.aclose()
    finally:
        postgres_schemas.release(url)
