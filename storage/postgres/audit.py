"""The append-only audit log on PostgreSQL: :class:`PostgresAuditLog` (a trigger chains every entry's hash,
others refuse updates and deletes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Json

from storage.audit_chain import Anchor, AuditHead, AuditVerification, ChainRow, check_anchors, sign, verify_chain
from storage.codec import dumps, loads
from storage.postgres.database import PostgresDatabase, instant, rows_changed, utc
from storage.protocols import AuditEntry, Instant


class PostgresAuditLog:
    """Who did what to which subject, and when, with the semantics of :class:`storage.SQLiteAuditLog`."""

    def __init__(self, db: PostgresDatabase, *, key: bytes | None = None) -> None:
        self.db = db
        self.key = key
        """The audit key: with it, every entry, anchor and the head are signed (the trigger makes the hashes)."""

    async def append(self, actor: str, action: str, subject: str, details: dict[str, Any], now: Instant = None) -> int:
        """Append one entry and return its id (ids increase with time).

        >>> await storage.audit.append("U2", "approval.approved", approval_id, {"tool": "delete_file"})
        1
        """
        if self.key is None:
            row = await self.db.fetchone(
                "INSERT INTO audit (at, actor, action, subject, details_json) VALUES (%s, %s, %s, %s, %s) RETURNING id",
                [instant(now), actor, action, subject, Json(details)],
            )
            return int(row[0])
        async with self.db.transaction() as conn:
            cursor = await conn.execute(
                "INSERT INTO audit (at, actor, action, subject, details_json) VALUES (%s, %s, %s, %s, %s) "
                "RETURNING id, hash",
                [instant(now), actor, action, subject, Json(details)],
            )
            signed = await cursor.fetchall()
            await self._sign(conn, signed)
        return int(signed[0][0])

    async def _sign(self, conn: Any, signed: Sequence[tuple[int, str]]) -> None:
        """Sign the entries just appended (``(id, hash)`` rows) and the head, in the appending transaction.

        The insert's trigger holds ``audit_head``'s row until the transaction ends, so the head signed here is
        the one these entries made.
        """
        key = self.key
        assert key is not None
        newest = max(signed)
        refs = [int(i) for i, _ in signed] + [0]
        sigs = [sign(key, "entry", int(i), h) for i, h in signed] + [sign(key, "head", int(newest[0]), newest[1])]
        await conn.execute(
            "INSERT INTO audit_signature (kind, ref, sig) "
            "SELECT CASE WHEN ord = %s THEN 'head' ELSE 'entry' END, ref, sig "
            "FROM unnest(%s::bigint[], %s::text[]) WITH ORDINALITY AS t(ref, sig, ord) "
            "ON CONFLICT (kind, ref) DO UPDATE SET sig = EXCLUDED.sig",
            [len(refs), refs, sigs],
        )

    async def append_many(self, entries: Sequence[tuple[str, str, str, dict[str, Any]]], now: Instant = None) -> int:
        """Append ``(actor, action, subject, details)`` entries in one statement; returns how many.

        >>> await storage.audit.append_many([("countersign", "expired", approval_id, {"tool": "delete_file"})])
        1
        """
        rows = list(entries)
        if not rows:
            return 0
        statement = (
            "INSERT INTO audit (at, actor, action, subject, details_json) "
            "SELECT %s, actor, action, subject, details::json "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
            "WITH ORDINALITY AS t(actor, action, subject, details, ord) ORDER BY ord"
        )
        values = [
            instant(now),
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            [dumps(r[3]) for r in rows],
        ]
        if self.key is not None:
            async with self.db.transaction() as conn:
                cursor = await conn.execute(statement + " RETURNING id, hash", values)
                signed = await cursor.fetchall()
                await self._sign(conn, signed)
            return len(signed)
        return await self.db.execute(
            statement,
            [
                instant(now),
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
                [dumps(r[3]) for r in rows],
            ],
        )

    async def fewer_than(self, limit: int, actor: str, action: str, since: Instant = None) -> bool:
        """Whether ``actor`` has fewer than ``limit`` entries of ``action`` since ``since`` (see the protocol): the
        chain's head is locked first (as an append locks it, until the commit), so a batch that checks and then
        appends waits for another doing the same, and counts its entry once it committed.

        >>> await storage.audit.fewer_than(3, "U1", "break-glass", since=now - timedelta(days=1))
        True
        """
        async with self.db.transaction() as conn:
            await conn.execute("SELECT 1 FROM audit_head FOR UPDATE")
            clause, params = ("", []) if since is None else ("AND at >= %s ", [instant(since)])
            cursor = await conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM audit WHERE actor = %s AND action = %s {clause}LIMIT %s) t",
                [actor, action, *params, max(0, limit)],
            )
            row = await cursor.fetchone()
        return row is not None and int(row[0]) < limit

    async def recent(
        self, n: int = 20, actor: str | None = None, subject: str | None = None, *, workspace: str | None = None
    ) -> list[AuditEntry]:
        """The ``n`` newest entries, newest first, optionally of one actor and/or subject and/or ``workspace``.

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
        if workspace is not None:
            clauses.append(
                "(subject IN (SELECT approval_id FROM approvals WHERE starts_with(chat_history_id, %s)) "
                "OR subject IN (SELECT run_id FROM runs WHERE starts_with(chat_history_id, %s)) "
                "OR starts_with(subject, %s) OR starts_with(subject, %s) OR subject = %s "
                "OR details_json->>'workspace' = %s)"
            )
            params.extend(
                [
                    f"{workspace}:",
                    f"{workspace}:",
                    f"workspace:{workspace}/",
                    f"channel:{workspace}:",
                    f"workspace:{workspace}",
                    workspace,
                ]
            )
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

    async def since(self, since: Instant = None, limit: int | None = None) -> list[AuditEntry]:
        """Entries at or after ``since`` (all when ``None``), oldest first, with their hashes (for export)."""
        clause, params = ("", []) if since is None else ("WHERE at >= %s ", [instant(since)])
        rows = await self.db.fetchall(
            "SELECT id, at, actor, action, subject, details_json::text, prev_hash, hash FROM audit "
            f"{clause}ORDER BY id LIMIT %s",
            [*params, limit],
        )
        return [
            AuditEntry(
                id=r[0],
                at=utc(r[1]),
                actor=r[2],
                action=r[3],
                subject=r[4],
                details=loads(r[5], kind="audit entry", record_id=str(r[0])),
                prev_hash=r[6],
                hash=r[7],
            )
            for r in rows
        ]

    async def verify(self, *, prunes_allowed: bool = True, against: AuditHead | None = None) -> AuditVerification:
        """Check the whole chain from the newest pruning anchor (or the first entry) to the head (one snapshot).

        See :meth:`storage.sqlite.audit.SQLiteAuditLog.verify` for ``prunes_allowed`` and ``against``.
        """
        async with self.db.transaction() as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cursor = await conn.execute(
                "SELECT a.pruned_through, a.anchor_hash, s.sig FROM audit_anchor a LEFT JOIN audit_signature s "
                "ON s.kind = 'anchor' AND s.ref = a.pruned_through ORDER BY a.pruned_through"
            )
            anchors = [Anchor(int(r[0]), r[1], r[2]) for r in await cursor.fetchall()]
            anchor = (anchors[-1].pruned_through, anchors[-1].hash) if anchors else None
            cursor = await conn.execute("SELECT last_id, last_hash FROM audit_head")
            head = await cursor.fetchone()
            cursor = await conn.execute("SELECT sig FROM audit_signature WHERE kind = 'head' AND ref = 0")
            head_sig = await cursor.fetchone()
            cursor = await conn.execute(
                "SELECT a.id, to_char(a.at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US'), a.actor, a.action, "
                "a.subject, a.details_json::text, a.prev_hash, a.hash, s.sig FROM audit a "
                "LEFT JOIN audit_signature s ON s.kind = 'entry' AND s.ref = a.id WHERE a.id > %s ORDER BY a.id",
                [anchor[0] if anchor else 0],
            )
            rows = [ChainRow(*row) for row in await cursor.fetchall()]
        return verify_chain(
            rows,
            anchor=anchor,
            head=(int(head[0]), head[1]) if head else None,
            key=self.key,
            head_signature=head_sig[0] if head_sig else None,
            against=against,
            problems=check_anchors(anchors, key=self.key, prunes_allowed=prunes_allowed),
        )

    async def head(self) -> AuditHead:
        """The chain's newest entry (id 0 and an empty hash before the first), with its signature if signed."""
        row = await self.db.fetchone(
            "SELECT h.last_id, h.last_hash, s.sig FROM audit_head h "
            "LEFT JOIN audit_signature s ON s.kind = 'entry' AND s.ref = h.last_id"
        )
        return AuditHead(int(row[0]), row[1], row[2])

    async def sign_unsigned(self) -> int:
        """Sign every entry and anchor without a signature, and the head; see the SQLite log's ``sign_unsigned``."""
        key = self.key
        if key is None:
            raise ValueError("sign_unsigned needs the audit key")
        async with self.db.transaction() as conn:
            await conn.execute("LOCK TABLE audit_head IN EXCLUSIVE MODE")  # no append moves the head meanwhile
            cursor = await conn.execute(
                "SELECT id, hash FROM audit WHERE id NOT IN (SELECT ref FROM audit_signature WHERE kind = 'entry')"
            )
            entries = await cursor.fetchall()
            cursor = await conn.execute(
                "SELECT pruned_through, anchor_hash FROM audit_anchor "
                "WHERE pruned_through NOT IN (SELECT ref FROM audit_signature WHERE kind = 'anchor')"
            )
            anchors = await cursor.fetchall()
            cursor = await conn.execute("SELECT last_id, last_hash FROM audit_head")
            head = await cursor.fetchone()
            rows = [("entry", int(i), sign(key, "entry", int(i), h or "")) for i, h in entries]
            rows += [("anchor", int(i), sign(key, "anchor", int(i), h)) for i, h in anchors]
            if head is not None:
                rows.append(("head", 0, sign(key, "head", int(head[0]), head[1])))
            await conn.execute(
                "INSERT INTO audit_signature (kind, ref, sig) "
                "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
                "ON CONFLICT (kind, ref) DO UPDATE SET sig = EXCLUDED.sig",
                [[r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]],
            )
        return len(entries) + len(anchors)

    async def prune(self, older_than: Instant) -> int:
        """Delete entries older than ``older_than``, first recording the anchor the chain continues from."""
        async with self.db.transaction() as conn:
            cursor = await conn.execute(
                "SELECT id, hash FROM audit WHERE id = (SELECT MAX(id) FROM audit WHERE at < %s)",
                [instant(older_than)],
            )
            last = await cursor.fetchone()
            if last is None:
                return 0
            await conn.execute(
                "INSERT INTO audit_anchor (pruned_through, anchor_hash, pruned_at) VALUES (%s, %s, now())",
                [last[0], last[1]],
            )
            if self.key is not None:
                await conn.execute(
                    "INSERT INTO audit_signature (kind, ref, sig) VALUES ('anchor', %s, %s) "
                    "ON CONFLICT (kind, ref) DO UPDATE SET sig = EXCLUDED.sig",
                    [last[0], sign(self.key, "anchor", int(last[0]), last[1])],
                )
            await conn.execute("DELETE FROM audit_signature WHERE kind = 'entry' AND ref <= %s", [last[0]])
            return await rows_changed(await conn.execute("DELETE FROM audit WHERE id <= %s", [last[0]]))
