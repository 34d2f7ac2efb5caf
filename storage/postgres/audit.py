"""The append-only audit log on PostgreSQL: :class:`PostgresAuditLog` (a trigger refuses updates and deletes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Json

from storage.codec import dumps, loads
from storage.postgres.database import PostgresDatabase, instant, utc
from storage.protocols import AuditEntry, Instant


class PostgresAuditLog:
    """Who did what to which subject, and when, with the semantics of :class:`storage.SQLiteAuditLog`."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def append(
        self, actor: str, action: str, subject: str, details: dict[str, Any], now: Instant = None
    ) -> int:
        """Append one entry and return its id (ids increase with time).

        >>> await storage.audit.append("U2", "approval.approved", approval_id, {"tool": "delete_file"})
        1
        """
        row = await self.db.fetchone(
            "INSERT INTO audit (at, actor, action, subject, details_json) VALUES (%s, %s, %s, %s, %s) RETURNING id",
            [instant(now), actor, action, subject, Json(details)],
        )
        return int(row[0])

    async def append_many(self, entries: Sequence[tuple[str, str, str, dict[str, Any]]], now: Instant = None) -> int:
        """Append ``(actor, action, subject, details)`` entries in one statement; returns how many.

        >>> await storage.audit.append_many([("countersign", "expired", approval_id, {"tool": "delete_file"})])
        1
        """
        rows = list(entries)
        if not rows:
            return 0
        return await self.db.execute(
            "INSERT INTO audit (at, actor, action, subject, details_json) "
            "SELECT %s, actor, action, subject, details::json "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
            "WITH ORDINALITY AS t(actor, action, subject, details, ord) ORDER BY ord",
            [instant(now), [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
             [dumps(r[3]) for r in rows]],
        )

    async def recent(self, n: int = 20, actor: str | None = None, subject: str | None = None) -> list[AuditEntry]:
        """The ``n`` newest entries, newest first, optionally of one actor and/or subject.

        >>> [e.action for e in await storage.audit.recent(5, actor="U2")]
        ['approval.approved']
        """
        clauses, params = [], []
        if actor is not None:
            clauses.append("actor = %s")
            params.append(actor)
        if subject is not None:
            clauses.append("subject = %s")
            params.append(subject)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        rows = await self.db.fetchall(
            f"SELECT id, at, actor, action, subject, details_json::text FROM audit {where}ORDER BY id DESC LIMIT %s",
            [*params, n],
        )
        return [
            AuditEntry(
                id=row[0],
                at=utc(row[1]),
                actor=row[2],
                action=row[3],
                subject=row[4],
                details=loads(row[5], kind="audit entry", record_id=str(row[0])),
            )
            for row in rows
        ]
