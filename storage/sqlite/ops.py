"""What operators need from the SQLite file: gauges, a readiness probe and retention (:class:`SQLiteOperations`)."""

from __future__ import annotations

import sqlite3
from typing import Any
from urllib.parse import quote

from storage.codec import epoch
from storage.protocols import TERMINAL_RUN_STATUSES, Instant, PruneCounts
from storage.sqlite.connection import Connector
from storage.sqlite.migrations import LATEST_VERSION

PROBE_TIMEOUT_SECONDS = 2.0

# Every status a run ends in (from the definition, so a status added later is pruned too).
_TERMINAL = "(" + ", ".join(f"'{status}'" for status in TERMINAL_RUN_STATUSES) + ")"

# The rows retention may delete, as one temporary selection each statement below reads. A run is prunable
# when it ended before the cutoff and none of its approvals is pending; a thread's messages when its newest
# message is older than the cutoff and it has no active run and nothing waiting in its inbox (whole threads
# only, so no tool call is ever cut from its result).
_OLD_RUNS = (
    f"SELECT run_id FROM runs WHERE status IN {_TERMINAL} AND updated_at < :cutoff "
    "AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.run_id AND a.status = 'pending')"
)
_OLD_APPROVALS = f"SELECT approval_id FROM approvals WHERE run_id IN ({_OLD_RUNS})"
_OLD_THREADS = (
    "SELECT t.key FROM (SELECT thread_id, MAX(created_at) AS newest FROM messages GROUP BY thread_id) m "
    "JOIN threads t ON t.id = m.thread_id WHERE m.newest < :cutoff "
    "EXCEPT SELECT chat_history_id FROM runs WHERE status IN ('running', 'paused', 'resuming') "
    "EXCEPT SELECT chat_history_id FROM inbox"
)
_OLD_THREAD_IDS = f"SELECT id FROM threads WHERE key IN ({_OLD_THREADS})"
_OLD_LEDGER = (
    f"SELECT tool_call_id FROM ledger WHERE status <> 'executing' AND (run_id IN ({_OLD_RUNS}) "
    "OR (COALESCE(finished_at, started_at) < :cutoff AND NOT EXISTS "
    "(SELECT 1 FROM runs r WHERE r.run_id = ledger.run_id AND r.status IN ('running', 'paused', 'resuming'))))"
)
_OLD_OUTBOX = "SELECT key FROM outbox WHERE delivered_at IS NOT NULL AND delivered_at < :cutoff"


class SQLiteOperations:
    """Counts for ``/metrics``, the ``/readyz`` probe, and retention, on the SQLite file.

    >>> storage.ops.pending_by_tool()
    {'delete_file': 1}
    """

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def pending_by_tool(self) -> dict[str, int]:
        """How many approvals wait for a decision, per tool."""
        with self.connector.reading() as db:
            rows = db.execute(
                "SELECT tool_name, COUNT(*) FROM approvals WHERE status = 'pending' GROUP BY tool_name"
            ).fetchall()
        return {name: count for name, count in rows}

    def inbox_depth(self) -> int:
        """How many messages wait in thread inboxes."""
        with self.connector.reading() as db:
            return int(db.execute("SELECT COUNT(*) FROM inbox").fetchone()[0])

    def readiness_problem(self) -> str | None:
        """``None`` when the file is migrated to this code's schema and writable; else what is wrong.

        Opens a fresh connection, so a file that became read-only (a remounted disk, changed permissions)
        since the process opened it is noticed; the probe's write is rolled back.
        """
        path = self.connector.path
        if path == ":memory:":
            return None
        try:
            conn = sqlite3.connect(
                f"file:{quote(path)}?mode=rw", uri=True, timeout=PROBE_TIMEOUT_SECONDS, isolation_level=None
            )
        except sqlite3.Error as exc:
            return f"database: cannot open {path} for writing ({exc})"
        try:
            version = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            if version != LATEST_VERSION:
                return f"database: schema version {version}, this countersign needs {LATEST_VERSION}"
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (-1, 0)")
            finally:
                conn.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):  # another writer holds the file: it is writable
                return None
            return f"database: not writable ({exc})"
        except sqlite3.Error as exc:
            return f"database: {exc}"
        finally:
            conn.close()
        return None

    def drop_snapshots(self, finished_before: Instant) -> int:
        """Drop the snapshots of runs that ended before ``finished_before``; returns how many.

        A paused run's snapshot is what it resumes from, so only ended runs lose theirs.

        >>> storage.ops.drop_snapshots(finished_before=time.time() - 7 * 86400)
        3
        """
        with self.connector.writing() as db:
            return db.execute(
                f"UPDATE runs SET snapshot_json = NULL WHERE status IN {_TERMINAL} "
                "AND updated_at < ? AND snapshot_json IS NOT NULL",
                [epoch(finished_before)],
            ).rowcount

    def prune(self, older_than: Instant, *, dry_run: bool = False) -> PruneCounts:
        """Delete ended runs, their approvals, ledger entries, idle threads' messages and delivered outbox rows.

        Only what is older than ``older_than``; active runs, pending approvals, running tool calls and
        threads still in use are never touched. With ``dry_run`` nothing is deleted: the counts say what would be.

        >>> storage.ops.prune(older_than=time.time() - 90 * 86400, dry_run=True).runs
        12
        """
        params: dict[str, Any] = {"cutoff": epoch(older_than)}
        with self.connector.writing() as db:

            def count(select: str) -> int:
                return int(db.execute(f"SELECT COUNT(*) FROM ({select})", params).fetchone()[0])

            counts = PruneCounts(
                runs=count(_OLD_RUNS),
                approvals=count(_OLD_APPROVALS),
                ledger=count(_OLD_LEDGER),
                messages=count(f"SELECT seq FROM messages WHERE thread_id IN ({_OLD_THREAD_IDS})"),
                outbox=count(_OLD_OUTBOX),
            )
            if dry_run:
                return counts
            # Children first: votes and places point at approvals, approvals at runs.
            db.execute(f"DELETE FROM votes WHERE approval_id IN ({_OLD_APPROVALS})", params)
            db.execute(f"DELETE FROM approval_places WHERE approval_id IN ({_OLD_APPROVALS})", params)
            db.execute(f"DELETE FROM ledger WHERE tool_call_id IN ({_OLD_LEDGER})", params)
            db.execute(f"DELETE FROM approvals WHERE approval_id IN ({_OLD_APPROVALS})", params)
            db.execute(f"DELETE FROM messages WHERE thread_id IN ({_OLD_THREAD_IDS})", params)
            # Thread ids whose messages are all gone (writers that still hold one find out; see storage.messages).
            db.execute("DELETE FROM threads WHERE NOT EXISTS (SELECT 1 FROM messages WHERE thread_id = threads.id)")
            db.execute(f"DELETE FROM outbox WHERE key IN ({_OLD_OUTBOX})", params)
            db.execute(f"DELETE FROM runs WHERE run_id IN ({_OLD_RUNS})", params)
        return counts
