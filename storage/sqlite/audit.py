"""The append-only audit log: :class:`SQLiteAuditLog` (a hash chain; triggers refuse updates and deletes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.audit_chain import (
    Anchor,
    AuditHead,
    AuditVerification,
    ChainRow,
    check_anchors,
    entry_hash,
    sign,
    verify_chain,
)
from storage.codec import dumps, epoch, loads, to_datetime
from storage.protocols import AuditEntry, Instant
from storage.sqlite.connection import Connector

VERIFY_BATCH = 5000


class SQLiteAuditLog:
    """Who did what to which subject, and when: decisions, denied attempts, policy changes, expiries."""

    def __init__(self, connector: Connector, *, key: bytes | None = None) -> None:
        self.connector = connector
        self.key = key
        """The audit key (``COUNTERSIGN_AUDIT_KEY``): with it, every entry, anchor and the head are signed."""

    def append(self, actor: str, action: str, subject: str, details: dict[str, Any], now: Instant = None) -> int:
        """Append one entry and return its id (ids increase with time).

        Pass masked arguments in ``details``: the log is shown to admins.

        >>> storage.audit.append("U2", "approval.approved", approval_id, {"tool": "delete_file"})
        1
        """
        with self.connector.writing() as db:
            return _chain(db, [(epoch(now), actor, action, subject, dumps(details))], self.key)

    def append_many(self, entries: Sequence[tuple[str, str, str, dict[str, Any]]], now: Instant = None) -> int:
        """Append ``(actor, action, subject, details)`` entries in one transaction; returns how many.

        >>> storage.audit.append_many([("countersign", "expired", approval_id, {"tool": "delete_file"})])
        1
        """
        at = epoch(now)
        rows = [(at, actor, action, subject, dumps(details)) for actor, action, subject, details in entries]
        if not rows:
            return 0
        with self.connector.writing() as db:
            _chain(db, rows, self.key)
        return len(rows)

    def recent(
        self, n: int = 20, actor: str | None = None, subject: str | None = None, *, workspace: str | None = None
    ) -> list[AuditEntry]:
        """The ``n`` newest entries, newest first, optionally of one actor and/or subject.

        ``workspace`` (``platform:workspace``, e.g. ``slack:T1``) keeps only that workspace's entries: those about
        its approvals and runs, its policy changes (subjects ``workspace:slack:T1/…``, ``channel:slack:T1:…``), and
        entries whose details name it (``{"workspace": "slack:T1"}``, e.g. a refused change).

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
        if workspace is not None:
            clauses.append(
                "(subject IN (SELECT approval_id FROM approvals WHERE substr(chat_history_id, 1, length(?)) = ?) "
                "OR subject IN (SELECT run_id FROM runs WHERE substr(chat_history_id, 1, length(?)) = ?) "
                "OR substr(subject, 1, length(?)) = ? OR substr(subject, 1, length(?)) = ? OR subject = ? "
                "OR json_extract(details_json, '$.workspace') = ?)"
            )
            thread, policy, channel = f"{workspace}:", f"workspace:{workspace}/", f"channel:{workspace}:"
            params.extend(
                [thread, thread, thread, thread, policy, policy, channel, channel, f"workspace:{workspace}", workspace]
            )
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

    def fewer_than(self, limit: int, actor: str, action: str, since: Instant = None) -> bool:
        """Whether ``actor`` has fewer than ``limit`` entries of ``action`` since ``since`` (see the protocol): read
        in the write transaction, so it and the append after it in a batch hold the write lock together.

        >>> storage.audit.fewer_than(3, "U1", "break-glass", since=time.time() - 86400)
        True
        """
        cutoff = float("-inf") if since is None else epoch(since)
        with self.connector.writing() as db:
            row = db.execute(
                "SELECT count(*) FROM (SELECT 1 FROM audit WHERE actor = ? AND action = ? AND at >= ? LIMIT ?)",
                [actor, action, cutoff, max(0, limit)],
            ).fetchone()
        return int(row[0]) < limit

    def since(self, since: Instant = None, limit: int | None = None) -> list[AuditEntry]:
        """Entries at or after ``since`` (all when ``None``), oldest first, with their hashes (for export).

        >>> [e.action for e in storage.audit.since(time.time() - 30 * 86400)]
        ['paused', 'approved']
        """
        cutoff = float("-inf") if since is None else epoch(since)
        with self.connector.reading() as db:
            rows = db.execute(
                "SELECT id, at, actor, action, subject, details_json, prev_hash, hash FROM audit WHERE at >= ? "
                "ORDER BY id LIMIT ?",
                [cutoff, -1 if limit is None else limit],
            ).fetchall()
        return [
            AuditEntry(
                id=r[0],
                at=to_datetime(r[1]),
                actor=r[2],
                action=r[3],
                subject=r[4],
                details=loads(r[5], kind="audit entry", record_id=str(r[0])),
                prev_hash=r[6],
                hash=r[7],
            )
            for r in rows
        ]

    def verify(self, *, prunes_allowed: bool = True, against: AuditHead | None = None) -> AuditVerification:
        """Check the whole chain from the newest pruning anchor (or the first entry) to the head.

        ``prunes_allowed`` is whether audit retention is on: when it is not, any anchor is a forgery. With
        the key, every signature is checked too; ``against`` is a checkpoint taken earlier (``audit checkpoint``).

        >>> storage.audit.verify().ok
        True
        """
        with self.connector.reading() as db:
            anchors = [
                Anchor(*row)
                for row in db.execute(
                    "SELECT a.pruned_through, a.anchor_hash, s.sig FROM audit_anchor a LEFT JOIN audit_signature s "
                    "ON s.kind = 'anchor' AND s.ref = a.pruned_through ORDER BY a.pruned_through"
                ).fetchall()
            ]
            anchor = (anchors[-1].pruned_through, anchors[-1].hash) if anchors else None
            head = db.execute("SELECT last_id, last_hash FROM audit_head").fetchone()
            head_sig = db.execute("SELECT sig FROM audit_signature WHERE kind = 'head' AND ref = 0").fetchone()

            def rows() -> Any:
                after = anchor[0] if anchor else 0
                while True:
                    batch = db.execute(
                        "SELECT a.id, a.at, a.actor, a.action, a.subject, a.details_json, a.prev_hash, a.hash, s.sig "
                        "FROM audit a LEFT JOIN audit_signature s ON s.kind = 'entry' AND s.ref = a.id "
                        "WHERE a.id > ? ORDER BY a.id LIMIT ?",
                        [after, VERIFY_BATCH],
                    ).fetchall()
                    for r in batch:
                        yield ChainRow(r[0], repr(float(r[1])), r[2], r[3], r[4], r[5], r[6], r[7], r[8])
                    if len(batch) < VERIFY_BATCH:
                        return
                    after = batch[-1][0]

            return verify_chain(
                rows(),
                anchor=anchor,
                head=tuple(head) if head else None,
                key=self.key,
                head_signature=head_sig[0] if head_sig else None,
                against=against,
                problems=check_anchors(anchors, key=self.key, prunes_allowed=prunes_allowed),
            )

    def head(self) -> AuditHead:
        """The chain's newest entry (id 0 and an empty hash before the first), with its signature if signed.

        >>> storage.audit.head().text()
        '7:3f…:9a…'
        """
        with self.connector.reading() as db:
            last_id, last_hash = db.execute("SELECT last_id, last_hash FROM audit_head").fetchone()
            sig = db.execute("SELECT sig FROM audit_signature WHERE kind = 'entry' AND ref = ?", [last_id]).fetchone()
        return AuditHead(int(last_id), last_hash, sig[0] if sig else None)

    def sign_unsigned(self) -> int:
        """Sign, with the audit key, every entry and anchor that has no signature, and the head; returns how many.

        For a log written before the key was set (``countersign audit sign``, after checking the chain).

        >>> storage.audit.sign_unsigned()
        12
        """
        key = self.key
        if key is None:
            raise ValueError("sign_unsigned needs the audit key")
        with self.connector.writing() as db:
            entries = db.execute(
                "SELECT id, hash FROM audit WHERE id NOT IN (SELECT ref FROM audit_signature WHERE kind = 'entry')"
            ).fetchall()
            anchors = db.execute(
                "SELECT pruned_through, anchor_hash FROM audit_anchor "
                "WHERE pruned_through NOT IN (SELECT ref FROM audit_signature WHERE kind = 'anchor')"
            ).fetchall()
            rows = [("entry", i, sign(key, "entry", i, h or "")) for i, h in entries]
            rows += [("anchor", i, sign(key, "anchor", i, h)) for i, h in anchors]
            last_id, last_hash = db.execute("SELECT last_id, last_hash FROM audit_head").fetchone()
            rows.append(("head", 0, sign(key, "head", last_id, last_hash)))
            db.conn.executemany("INSERT OR REPLACE INTO audit_signature (kind, ref, sig) VALUES (?, ?, ?)", rows)
        return len(entries) + len(anchors)

    def prune(self, older_than: Instant) -> int:
        """Delete entries older than ``older_than``, first recording the anchor the chain continues from.

        The audit log's own retention (``COUNTERSIGN_AUDIT_RETENTION_DAYS``) calls this; nothing else does.

        >>> storage.audit.prune(older_than=time.time() - 400 * 86400)
        0
        """
        with self.connector.writing() as db:
            last = db.execute(
                "SELECT id, hash FROM audit WHERE id = (SELECT MAX(id) FROM audit WHERE at < ?)", [epoch(older_than)]
            ).fetchone()
            if last is None:
                return 0
            db.execute(
                "INSERT INTO audit_anchor (pruned_through, anchor_hash, pruned_at) VALUES (?, ?, ?)",
                [last[0], last[1], epoch(None)],
            )
            if self.key is not None:
                db.execute(
                    "INSERT OR REPLACE INTO audit_signature (kind, ref, sig) VALUES ('anchor', ?, ?)",
                    [last[0], sign(self.key, "anchor", last[0], last[1])],
                )
            db.execute("DELETE FROM audit_signature WHERE kind = 'entry' AND ref <= ?", [last[0]])
            return db.execute("DELETE FROM audit WHERE id <= ?", [last[0]]).rowcount


def _chain(db: Any, rows: Sequence[tuple[float, str, str, str, str]], key: bytes | None) -> int:
    """Append ``rows`` to the chain inside the caller's write transaction; returns the last id.

    The head is read and written in the same ``BEGIN IMMEDIATE`` transaction, so appends from several
    processes chain one after another.
    """
    last_id, last_hash = db.execute("SELECT last_id, last_hash FROM audit_head").fetchone()
    for at, actor, action, subject, details in rows:
        last_id += 1
        digest = entry_hash(last_hash, last_id, repr(float(at)), actor, action, subject, details)
        db.execute(
            "INSERT INTO audit (id, at, actor, action, subject, details_json, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [last_id, at, actor, action, subject, details, last_hash, digest],
        )
        if key is not None:
            db.execute(
                "INSERT OR REPLACE INTO audit_signature (kind, ref, sig) VALUES ('entry', ?, ?)",
                [last_id, sign(key, "entry", last_id, digest)],
            )
        last_hash = digest
    db.execute("UPDATE audit_head SET last_id = ?, last_hash = ?", [last_id, last_hash])
    if key is not None:
        db.execute(
            "INSERT OR REPLACE INTO audit_signature (kind, ref, sig) VALUES ('head', 0, ?)",
            [sign(key, "head", last_id, last_hash)],
        )
    return last_id
