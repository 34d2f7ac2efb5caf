"""Gauges, the readiness probe and retention on PostgreSQL: :class:`PostgresOperations`."""

from __future__ import annotations

from typing import Any, LiteralString, cast

from storage.errors import StorageError
from storage.postgres.database import PostgresDatabase, instant
from storage.postgres.migrations import LATEST_VERSION
from storage.protocols import TERMINAL_RUN_STATUSES, Instant, PruneCounts

_ACTIVE = "('running', 'paused', 'resuming')"
# Every status a run ends in (from the definition, so a status added later is pruned too).
_TERMINAL = cast(LiteralString, "(" + ", ".join(f"'{status}'" for status in TERMINAL_RUN_STATUSES) + ")")

# The same selections as storage/sqlite/ops.py (see there, and the Operations protocol, for what is kept and why).
_OLD_RUNS = (
    f"SELECT run_id FROM runs WHERE status IN {_TERMINAL} AND updated_at < %(cutoff)s "
    "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.run_id AND a.status = 'pending')"
)
_OLD_APPROVALS = f"SELECT approval_id FROM approvals WHERE run_id IN ({_OLD_RUNS})"
_OLD_THREADS = (
    "SELECT chat_history_id FROM messages GROUP BY chat_history_id HAVING MAX(created_at) < %(cutoff)s "
    f"EXCEPT SELECT chat_history_id FROM runs WHERE status IN {_ACTIVE} "
    "EXCEPT SELECT chat_history_id FROM inbox"
)
_OLD_LEDGER = (
    f"SELECT tool_call_id FROM ledger WHERE status <> 'executing' AND (run_id IN ({_OLD_RUNS}) "
    "OR (COALESCE(finished_at, started_at) < %(cutoff)s AND NOT EXISTS "
    f"(SELECT 1 FROM runs r WHERE r.run_id = ledger.run_id AND r.status IN {_ACTIVE})))"
)
_OLD_OUTBOX = "SELECT key FROM outbox WHERE delivered_at IS NOT NULL AND delivered_at < %(cutoff)s"


class PostgresOperations:
    """Counts for ``/metrics``, the ``/readyz`` probe and retention, as :class:`storage.sqlite.ops.SQLiteOperations`."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def pending_by_tool(self) -> dict[str, int]:
        """How many approvals wait for a decision, per tool."""
        rows = await self.db.fetchall(
            "SELECT tool_name, COUNT(*) FROM approvals WHERE status = 'pending' GROUP BY tool_name"
        )
        return {name: int(count) for name, count in rows}

    async def inbox_depth(self) -> int:
        """How many messages wait in thread inboxes."""
        row = await self.db.fetchone("SELECT COUNT(*) FROM inbox")
        return int(row[0])

    async def readiness_problem(self) -> str | None:
        """``None`` when the schema is this code's and a write goes through (rolled back); else what is wrong."""
        try:
            async with self.db.transaction() as conn:
                cursor = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
                row = await cursor.fetchone()
                version = int(row[0]) if row else 0
                if version != LATEST_VERSION:
                    return f"database: schema version {version}, this countersign needs {LATEST_VERSION}"
                # A read-only server (a hot standby, default_transaction_read_only) refuses this.
                await conn.execute("SAVEPOINT probe")
                await conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (-1, now())")
                await conn.execute("ROLLBACK TO SAVEPOINT probe")
        except StorageError as exc:
            return f"database: {exc}"
        return None

    async def drop_snapshots(self, finished_before: Instant) -> int:
        """Drop the snapshots of runs that ended before ``finished_before``; returns how many."""
        return await self.db.execute(
            f"UPDATE runs SET snapshot_json = NULL WHERE status IN {_TERMINAL} "
            "AND updated_at < %s AND snapshot_json IS NOT NULL",
            [instant(finished_before)],
        )

    async def prune(self, older_than: Instant, *, dry_run: bool = False) -> PruneCounts:
        """Delete what retention allows, older than ``older_than`` (one transaction); ``dry_run`` only counts."""
        params: dict[str, Any] = {"cutoff": instant(older_than)}
        async with self.db.transaction() as conn:

            async def count(select: LiteralString) -> int:
                cursor = await conn.execute(f"SELECT COUNT(*) FROM ({select}) AS selected", params)
                row = await cursor.fetchone()
                return int(row[0]) if row else 0

            counts = PruneCounts(
                runs=await count(_OLD_RUNS),
                approvals=await count(_OLD_APPROVALS),
                ledger=await count(_OLD_LEDGER),
                messages=await count(f"SELECT 1 FROM messages WHERE chat_history_id IN ({_OLD_THREADS})"),
                outbox=await count(_OLD_OUTBOX),
            )
            if dry_run:
                return counts
            for statement in (
                f"DELETE FROM votes WHERE approval_id IN ({_OLD_APPROVALS})",
                f"DELETE FROM approval_places WHERE approval_id IN ({_OLD_APPROVALS})",
                f"DELETE FROM ledger WHERE tool_call_id IN ({_OLD_LEDGER})",
                f"DELETE FROM approvals WHERE approval_id IN ({_OLD_APPROVALS})",
                f"DELETE FROM messages WHERE chat_history_id IN ({_OLD_THREADS})",
                f"DELETE FROM outbox WHERE key IN ({_OLD_OUTBOX})",
                f"DELETE FROM runs WHERE run_id IN ({_OLD_RUNS})",
            ):
                await conn.execute(statement, params)
        return counts
