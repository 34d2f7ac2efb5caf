"""Approvals: :class:`SQLiteApprovalStore`. Deciding is one compare-and-set with exactly one winner.

``status``: ``pending → approved | rejected | modified | expired | superseded | cancelled``; every
status but ``pending`` is terminal, and every move out of ``pending`` is a conditional ``UPDATE``
that checks the status (and, for decisions, the expiry) in the same statement that writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.approval_rows import SYSTEM_ACTOR, _row_values
from storage.codec import dumps, epoch, to_datetime
from storage.errors import AlreadyExists, NotFound
from storage.protocols import (
    CLOSING_STATUSES,
    COUNTED_VOTES,
    DECISION_STATUSES,
    VOID_VOTE,
    VOTES,
    ApprovalRecord,
    ApprovalStep,
    ClickedApproval,
    Instant,
    NewApproval,
    Vote,
)
from storage.records import SQLITE_TIMES, approval_record, decided_snapshot, qualified
from storage.sqlite.connection import Connector
from storage.sqlite.runs import RUN_COLUMNS, run_from_row

_COLUMNS = (
    "approval_id, run_id, step, tool_call_id, tool_name, arguments_json, args_digest, requester, mode, "
    "approvers_json, quorum, four_eyes, platform, chat_history_id, message_ref_json, status, decided_by, "
    "decided_at, feedback, final_arguments_json, created_at, expires_at, kind, result, final_result, "
    "provenance_json, preview_json, request_reason"
)
_RUN_FIELDS = RUN_COLUMNS.split(",")
_COUNTED = "(" + ", ".join(f"'{v}'" for v in COUNTED_VOTES) + ")"


_STEP_COLUMNS = (
    f"{qualified(RUN_COLUMNS, 'r')}, CASE WHEN r.step = ? AND NOT EXISTS (SELECT 1 FROM approvals p "
    f"WHERE p.run_id = r.run_id AND p.step = ? AND p.status = 'pending') THEN r.snapshot_json END, "
    f"{qualified(_COLUMNS, 'a')}"
)
"""A run, its snapshot when it is that of a fully decided step, and one of its approvals per row
(:meth:`SQLiteApprovalStore.step`)."""


_INSERT = (
    "INSERT INTO approvals (approval_id, run_id, step, tool_call_id, tool_name, arguments_json, args_digest, "
    "requester, mode, approvers_json, quorum, four_eyes, platform, chat_history_id, created_at, expires_at, "
    "kind, result, provenance_json, preview_json, request_reason, status) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')"
)


class SQLiteApprovalStore:
    """One approval per paused tool call, with per-approver votes for quorum."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def create_many(
        self, records: Sequence[NewApproval], *, shown_in: str | None = None, shown_at: Instant = None
    ) -> list[ApprovalRecord]:
        """Store the approvals of one paused step in one transaction (all or none) and return them.

        ``shown_in``: also note every one as shown in that place at ``shown_at`` (as ``places.record`` does), in
        the same transaction.

        >>> [a] = storage.approvals.create_many([NewApproval(run_id="run-1", step=1, tool_call_id="call_1",
        ...     tool_name="delete_file", arguments={"path": "a.txt"}, requester="U1", platform="slack",
        ...     chat_history_id="slack:T1:C1:170.1", expires_at=now + timedelta(hours=1))])
        >>> a.status, len(a.approval_id) >= 22
        ('pending', True)
        """
        if shown_in is not None and not shown_in:
            raise ValueError("shown_in must be a place key, e.g. 'slack:C1'")
        now = epoch(None)
        rows = [_row_values(record, now) for record in records]
        with self.connector.writing() as db:
            for row in rows:
                approval_id, run_id, tool_call_id = row[0], row[1], row[3]
                if db.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is None:
                    raise NotFound(f"run {run_id!r} not found")
                clash = db.execute(
                    "SELECT 1 FROM approvals WHERE approval_id = ? "
                    "OR (run_id = ? AND tool_call_id = ? AND status = 'pending')",
                    [approval_id, run_id, tool_call_id],
                ).fetchone()
                if clash:
                    raise AlreadyExists(
                        f"approval {approval_id!r} or a pending approval for tool call {tool_call_id!r} exists"
                    )
                db.execute(_INSERT, row)
            if shown_in is not None:
                at = epoch(shown_at)
                db.conn.executemany(
                    "INSERT INTO approval_places (approval_id, place, shown_at) VALUES (?, ?, ?) "
                    "ON CONFLICT (approval_id, place) DO NOTHING",
                    [(row[0], shown_in, at) for row in rows],
                )
            return [self._get(db, row[0]) for row in rows]

    def get(self, approval_id: str) -> ApprovalRecord:
        """The approval, or :class:`NotFound`.

        >>> storage.approvals.get(approval_id).tool_name
        'delete_file'
        """
        with self.connector.reading() as db:
            return self._get(db, approval_id)

    @staticmethod
    def _get(db: Any, approval_id: str) -> ApprovalRecord:
        row = db.execute(f"SELECT {_COLUMNS} FROM approvals WHERE approval_id = ?", [approval_id]).fetchone()
        if row is None:
            raise NotFound(f"approval {approval_id!r} not found")
        return approval_record(row, SQLITE_TIMES)

    def for_run(self, run_id: str, step: int | None = None) -> list[ApprovalRecord]:
        """The run's approvals (of one step, if given) in the order they were created.

        >>> [a.tool_call_id for a in storage.approvals.for_run("run-1", step=1)]
        ['call_1', 'call_2']
        """
        sql = f"SELECT {_COLUMNS} FROM approvals WHERE run_id = ?"
        params: list[Any] = [run_id]
        if step is not None:
            sql += " AND step = ?"
            params.append(step)
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY step, rowid", params).fetchall()
        return [approval_record(row, SQLITE_TIMES) for row in rows]

    def get_clicked(self, approval_id: str, place: str | None) -> ClickedApproval:
        """The approval (or :class:`NotFound`) and whether it was shown in ``place``, in one statement.

        >>> clicked = storage.approvals.get_clicked(approval_id, "slack:C1")
        >>> clicked.record.tool_name, clicked.shown_here
        ('delete_file', True)
        """
        with self.connector.reading() as db:
            row = db.execute(
                f"SELECT {_COLUMNS}, EXISTS (SELECT 1 FROM approval_places p "
                "WHERE p.approval_id = approvals.approval_id AND p.place = ?) FROM approvals WHERE approval_id = ?",
                [place or "", approval_id],
            ).fetchone()
        if row is None:
            raise NotFound(f"approval {approval_id!r} not found")
        return ClickedApproval(approval_record(row, SQLITE_TIMES), bool(place) and bool(row[-1]))

    def step(self, run_id: str, step: int) -> ApprovalStep:
        """The run (or :class:`NotFound`) and its approvals of ``step`` in the order they were created, in one
        statement.

        >>> paused = storage.approvals.step("run-1", 1)
        >>> paused.run.requester, [a.tool_call_id for a in paused.approvals]
        ('U1', ['call_1', 'call_2'])
        """
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_STEP_COLUMNS} FROM runs r LEFT JOIN approvals a "
                "ON a.run_id = r.run_id AND a.step = ? WHERE r.run_id = ? ORDER BY a.rowid",
                [step, step, step, run_id],
            ).fetchall()
        if not rows:
            raise NotFound(f"run {run_id!r} not found")
        width = len(_RUN_FIELDS)
        approvals = [approval_record(row[width + 1 :], SQLITE_TIMES) for row in rows if row[width + 1] is not None]
        snapshot = decided_snapshot(rows[0][width], run_id) if approvals else None
        return ApprovalStep(run_from_row(rows[0][:width]), approvals, snapshot)

    def set_message_ref(self, approval_ids: Sequence[str], message_ref: dict[str, Any]) -> int:
        """Record where the approvals were rendered (to update that message later); returns rows changed.

        >>> storage.approvals.set_message_ref([approval_id], {"channel": "C1", "ts": "1700000000.000200"})
        1
        """
        return len(self.mark_rendered(approval_ids, message_ref))

    def mark_rendered(self, approval_ids: Sequence[str], message_ref: dict[str, Any]) -> dict[str, str]:
        """:meth:`set_message_ref`, returning each approval's status once it is recorded (by approval id).

        One statement: a decision committed before it shows in the statuses; any later one finds the reference.

        >>> storage.approvals.mark_rendered([approval_id], {"channel": "C1", "ts": "1700000000.000200"})
        {'a1b2c3': 'pending'}
        """
        ids = list(approval_ids)
        if not ids:
            return {}
        placeholders = ", ".join("?" for _ in ids)
        with self.connector.writing() as db:
            rows = db.execute(
                f"UPDATE approvals SET message_ref_json = ? WHERE approval_id IN ({placeholders}) "
                "RETURNING approval_id, status",
                [dumps(message_ref), *ids],
            ).fetchall()
        return dict(rows)

    def add_vote(
        self, approval_id: str, voter: str, vote: str, now: Instant = None, feedback: str | None = None
    ) -> int | None:
        """Record ``voter``'s vote (the first one counts) and return the number of counted votes (confirm, respond).

        Returns ``None`` if the approval is no longer pending or has expired. A ``respond`` vote keeps its
        ``feedback`` (the answer) as the pending approval's feedback.

        >>> storage.approvals.add_vote(approval_id, "U2", "confirm")
        1
        """
        if vote not in VOTES:
            raise ValueError(f"unknown vote {vote!r}; expected one of {VOTES}")
        at = epoch(now)
        with self.connector.writing() as db:
            row = db.execute("SELECT status, expires_at FROM approvals WHERE approval_id = ?", [approval_id]).fetchone()
            if row is None:
                raise NotFound(f"approval {approval_id!r} not found")
            if row[0] != "pending" or row[1] <= at:
                return None
            added = db.execute(
                "INSERT INTO votes (approval_id, voter, vote, voted_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (approval_id, voter) DO NOTHING",
                [approval_id, voter, vote, at],
            ).rowcount
            if added and vote == "respond":
                db.execute("UPDATE approvals SET feedback = ? WHERE approval_id = ?", [feedback, approval_id])
            return db.execute(
                f"SELECT COUNT(*) FROM votes WHERE approval_id = ? AND vote IN {_COUNTED}", [approval_id]
            ).fetchone()[0]

    def rejudge(
        self,
        approval_id: str,
        *,
        approvers: Sequence[str],
        quorum: int,
        four_eyes: bool,
        void_voters: Sequence[str] = (),
    ) -> bool:
        """Give a pending approval a tightened policy's approvers, quorum and four-eyes; void the votes of
        ``void_voters``. ``True`` if it was still pending (one transaction).

        >>> storage.approvals.rejudge(approval_id, approvers=["@sre"], quorum=2, four_eyes=True, void_voters=["U_ANN"])
        True
        """
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE approvals SET approvers_json = ?, quorum = ?, four_eyes = ? "
                "WHERE approval_id = ? AND status = 'pending'",
                [dumps(list(approvers)), quorum, int(four_eyes), approval_id],
            ).rowcount
            if not changed:
                self._exists(db, approval_id)
                return False
            for voter in void_voters:
                db.execute(
                    "UPDATE votes SET vote = ? WHERE approval_id = ? AND voter = ?", [VOID_VOTE, approval_id, voter]
                )
        return True

    def votes(self, approval_id: str) -> list[Vote]:
        """Every vote on the approval, oldest first.

        >>> [(v.voter, v.vote) for v in storage.approvals.votes(approval_id)]
        [('U2', 'confirm')]
        """
        with self.connector.reading() as db:
            rows = db.execute(
                "SELECT approval_id, voter, vote, voted_at FROM votes WHERE approval_id = ? ORDER BY voted_at, rowid",
                [approval_id],
            ).fetchall()
        return [Vote(approval_id=r[0], voter=r[1], vote=r[2], voted_at=to_datetime(r[3])) for r in rows]

    def decide(
        self,
        approval_id: str,
        *,
        status: str,
        decided_by: str,
        feedback: str | None = None,
        final_arguments: dict[str, Any] | None = None,
        now: Instant = None,
        final_result: str | None = None,
    ) -> bool:
        """Claim the approval for one decision; ``True`` for exactly one caller, never after expiry.

        ``final_result`` is a review's edited result (status ``modified``).

        ``status`` is approved, rejected or modified. One conditional ``UPDATE ... WHERE status =
        'pending' AND expires_at > now``: any number of concurrent callers, one winner.

        >>> storage.approvals.decide(approval_id, status="approved", decided_by="U2")
        True
        >>> storage.approvals.decide(approval_id, status="rejected", decided_by="U3")  # too late
        False
        """
        if status not in DECISION_STATUSES:
            raise ValueError(f"a decision is one of {DECISION_STATUSES}, not {status!r}")
        at = epoch(now)
        final = None if final_arguments is None else dumps(final_arguments)
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, feedback = ?, "
                "final_arguments_json = ?, final_result = ? "
                "WHERE approval_id = ? AND status = 'pending' AND expires_at > ?",
                [status, decided_by, at, feedback, final, final_result, approval_id, at],
            ).rowcount
            if not changed:
                self._exists(db, approval_id)
        return changed == 1

    def expire(self, approval_id: str, now: Instant = None) -> bool:
        """Mark a pending approval ``expired`` if it is due; return whether this caller did.

        >>> storage.approvals.expire(approval_id, now=after_expiry)
        True
        """
        at = epoch(now)
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE approvals SET status = 'expired', decided_by = ?, decided_at = ? "
                "WHERE approval_id = ? AND status = 'pending' AND expires_at <= ?",
                [SYSTEM_ACTOR, at, approval_id, at],
            ).rowcount
            if not changed:
                self._exists(db, approval_id)
        return changed == 1

    def mark_reminded(self, approval_id: str, now: Instant = None) -> bool:
        """Record that a pending approval's approvers were reminded; ``True`` for exactly one caller, ever.

        >>> storage.approvals.mark_reminded(approval_id, now=halfway), storage.approvals.mark_reminded(approval_id)
        (True, False)
        """
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE approvals SET reminded_at = ? "
                "WHERE approval_id = ? AND status = 'pending' AND reminded_at IS NULL",
                [epoch(now), approval_id],
            ).rowcount
            if not changed:
                self._exists(db, approval_id)
        return changed == 1

    def expire_due(self, now: Instant = None, limit: int = 500) -> list[ApprovalRecord]:
        """Expire up to ``limit`` due pending approvals in one statement; return the ones this caller expired.

        ``UPDATE ... WHERE approval_id IN (SELECT ... due ... LIMIT n) AND status = 'pending' RETURNING``:
        however many processes sweep at once, each approval is returned to exactly one of them.

        >>> [a.status for a in storage.approvals.expire_due(now=after_expiry)]
        ['expired']
        """
        at = epoch(now)
        with self.connector.writing() as db:
            rows = db.execute(
                "UPDATE approvals SET status = 'expired', decided_by = ?, decided_at = ? "
                "WHERE approval_id IN (SELECT approval_id FROM approvals INDEXED BY approvals_status_expiry "
                "WHERE status = 'pending' AND expires_at <= ? ORDER BY expires_at LIMIT ?) "
                f"AND status = 'pending' RETURNING {_COLUMNS}",
                [SYSTEM_ACTOR, at, at, limit],
            ).fetchall()
        return [approval_record(row, SQLITE_TIMES) for row in rows]

    @staticmethod
    def _exists(db: Any, approval_id: str) -> None:
        if db.execute("SELECT 1 FROM approvals WHERE approval_id = ?", [approval_id]).fetchone() is None:
            raise NotFound(f"approval {approval_id!r} not found")

    def close_pending_for_run(self, run_id: str, status: str, reason: str) -> list[str]:
        """Close the run's pending approvals as ``superseded`` or ``cancelled``; return the ids changed.

        ``reason`` is kept in ``feedback``.

        >>> storage.approvals.close_pending_for_run("run-1", "superseded", "a new message arrived")
        ['kq3...', 'Zx8...']
        """
        if status not in CLOSING_STATUSES:
            raise ValueError(f"closing status is one of {CLOSING_STATUSES}, not {status!r}")
        with self.connector.writing() as db:
            rows = db.execute(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, feedback = ? "
                "WHERE run_id = ? AND status = 'pending' RETURNING approval_id",
                [status, SYSTEM_ACTOR, epoch(None), reason, run_id],
            ).fetchall()
        return sorted(row[0] for row in rows)

    def due_for_expiry(self, now: Instant = None, limit: int = 100) -> list[ApprovalRecord]:
        """Pending approvals whose expiry time has passed, soonest-expired first (an index range scan).

        >>> [a.approval_id for a in storage.approvals.due_for_expiry(now=after_expiry)]
        ['kq3...']
        """
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM approvals INDEXED BY approvals_status_expiry "
                "WHERE status = 'pending' AND expires_at <= ? ORDER BY expires_at LIMIT ?",
                [epoch(now), limit],
            ).fetchall()
        return [approval_record(row, SQLITE_TIMES) for row in rows]

    def pending(
        self, platform: str | None = None, chat_history_id: str | None = None, approver: str | None = None
    ) -> list[ApprovalRecord]:
        """Pending approvals, oldest first, optionally of one platform, thread, or approver.

        ``approver`` matches approvals that list the user, and approvals with no list whose
        requester is the user (an empty list means "the requester and admins").

        >>> [a.tool_name for a in storage.approvals.pending(approver="U2")]
        ['delete_file']
        """
        sql = f"SELECT {_COLUMNS} FROM approvals WHERE status = 'pending'"
        params: list[Any] = []
        if platform is not None:
            sql += " AND platform = ?"
            params.append(platform)
        if chat_history_id is not None:
            sql += " AND chat_history_id = ?"
            params.append(chat_history_id)
        if approver is not None:
            sql += (
                " AND (EXISTS (SELECT 1 FROM json_each(approvals.approvers_json) WHERE value = ?)"
                " OR (approvers_json = '[]' AND requester = ?))"
            )
            params += [approver, approver]
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY created_at, rowid", params).fetchall()
        return [approval_record(row, SQLITE_TIMES) for row in rows]
