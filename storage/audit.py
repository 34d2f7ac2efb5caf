"""The append-only audit log: :class:`SQLiteAuditLog` (triggers refuse updates and deletes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.codec import dumps, epoch, loads, to_datetime
from storage.connection import Connector
from storage.protocols import AuditEntry, Instant


class SQLiteAuditLog:
    """Who did what to which subject, and when: decisions, denied attempts, policy changes, expiries."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def append(self, actor: str, action: str, subject: str, details: dict[str, Any], now: Instant = None) -> int:
        """Append one entry and return its id (ids increase with time).

        Pass masked arguments in ``details``: the log is shown to admins.

        >>> storage.audit.append("U2", "approval.approved", approval_id, {"tool": "delete_file"})
        1
        """
        with self.connector.writing() as db:
            return db.execute(
                "INSERT INTO audit (at, actor, action, subject, details_json) VALUES (?, ?, ?, ?, ?)",
                [epoch(now), actor, action, subject, dumps(details)],
            ).lastrowid

    def append_many(self, entries: Sequence[tuple[str, str, str, dict[str, Any]]], now: Instant = None) -> int:
        """Append ``(actor, action, subject, details)`` entries in one transaction; returns how many.

        >>> storage.audit.append_many([("countersign", "expired", approval_id, {"tool": "delete_file"})])
        1
        """
        at = epoch(now)
        rows = [[at, actor, action, subject, dumps(details)] for actor, action, subject, details in entries]
        if not rows:
            return 0
        with self.connector.writing() as db:
            db.conn.executemany(
                "INSERT INTO audit (at, actor, action, subject, details_json) VALUES (?, ?, ?, ?, ?)", rows
            )
        return len(rows)

    def recent(self, n: int = 20, actor: str | None = None, subject: str | None = None) -> list[AuditEntry]:
        """The ``n`` newest entries, newest first, optionally of one actor and/or subject.

        >>> [e.action for e in storage.audit.recent(5, actor="U2")]
        ['approval.approved']
        """
        clauses, params = [], []
        if actor is not None:
            clauses.append("actor = ?")
            params.append(actor)
        if subject is not None:
            clauses.append("subject = ?")
            params.append(subject)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT id, at, actor, action, subject, details_json FROM audit {where}ORDER BY id DESC LIMIT ?",
                [*params, n],
            ).fetchall()
        return [
            AuditEntry(
                id=row[0],
                at=to_datetime(row[1]),
                actor=row[2],
                action=row[3],
                subject=row[4],
                details=loads(row[5], kind="audit entry", record_id=str(row[0])),
            )
            for row in rows
        ]
