"""Approvals on PostgreSQL: :class:`PostgresApprovalStore`. Deciding is one conditional ``UPDATE … RETURNING``.

Every move out of ``pending`` checks the status (and, for decisions, the expiry) in the statement that
writes it. Under READ COMMITTED a concurrent writer of the same row waits for the first one to commit
and then re-checks the condition against the new row, so any number of replicas get one winner.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, LiteralString

from psycopg.errors import ForeignKeyViolation
from psycopg.types.json import Json, Jsonb

from storage.approval_rows import SYSTEM_ACTOR, _row_values
from storage.codec import epoch
from storage.errors import AlreadyExists, NotFound
from storage.postgres.database import POSTGRES_TIMES, PostgresDatabase, instant
from storage.postgres.runs import RUN_COLUMNS, run_from_row
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
from storage.records import approval_record, decided_snapshot, qualified

_COLUMNS = (
    "approval_id, run_id, step, tool_call_id, tool_name, arguments_json::text, args_digest, requester, mode, "
    "approvers::text, quorum, four_eyes, platform, chat_history_id, message_ref_json::text, status, decided_by, "
    "decided_at, feedback, final_arguments_json::text, created_at, expires_at, kind, result, final_result, "
    "provenance_json, preview_json, request_reason"
)
_RUN_FIELDS = RUN_COLUMNS.split(",")
_STEP_COLUMNS = (
    f"{qualified(RUN_COLUMNS, 'r')}, CASE WHEN r.step = %s AND NOT EXISTS (SELECT 1 FROM approvals p "
    f"WHERE p.run_id = r.run_id AND p.step = %s AND p.status = 'pending') THEN r.snapshot_json::text END, "
    f"{qualified(_COLUMNS, 'a')}"
)
"""A run, its snapshot when it is that of a fully decided step, and one of its approvals per row
(:meth:`PostgresApprovalStore.step`)."""
_INSERT_COLUMNS = (
    "approval_id, run_id, step, tool_call_id, tool_name, arguments_json, args_digest, requester, mode, "
    "approvers, quorum, four_eyes, platform, chat_history_id, created_at, expires_at, kind, result, provenance_json, "
    "preview_json, request_reason, status"
)


def _insert_values(new: NewApproval, now: float) -> list[Any]:
    """The shared validation of :func:`storage.approval_rows._row_values`, as PostgreSQL column values."""
    (
        approval_id,
        run_id,
        step,
        tool_call_id,
        tool_name,
        arguments,
        digest,
        requester,
        mode,
        approvers,
        quorum,
        four_eyes,
        platform,
        chat_history_id,
        created,
        expires,
        kind,
        result,
        provenance,
        preview,
        request_reason,
    ) = _row_values(new, now)
    return [
        approval_id,
        run_id,
        step,
        tool_call_id,
        tool_name,
        arguments,
        digest,
        requester,
        mode,
        Jsonb(list(new.approvers)),
        quorum,
        bool(four_eyes),
        platform,
        chat_history_id,
        instant(created),
        instant(expires),
        kind,
        result,
        provenance,
        preview,
        request_reason,
        "pending",
    ]


class PostgresApprovalStore:
    """One approval per paused tool call, with the semantics of :class:`storage.SQLiteApprovalStore`."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def create_many(
        self, records: Sequence[NewApproval], *, shown_in: str | None = None, shown_at: Instant = None
    ) -> list[ApprovalRecord]:
        """Store the approvals of one paused step in one transaction (all or none) and return them.

        ``shown_in``: also note every one as shown in that place at ``shown_at`` (as ``places.record`` does), by the
        insert's own statement.

        >>> [a] = await storage.approvals.create_many([NewApproval(run_id="run-1", step=1, tool_call_id="call_1",
        ...     tool_name="delete_file", arguments={"path": "a.txt"}, requester="U1", platform="slack",
        ...     chat_history_id="slack:T1:C1:170.1", expires_at=now + timedelta(hours=1))])
        """
        if shown_in is not None and not shown_in:
            raise ValueError("shown_in must be a place key, e.g. 'slack:C1'")
        now = epoch(None)
        rows = [_insert_values(record, now) for record in records]
        if not rows:
            return []
        shown: LiteralString = ""
        shown_params: list[Any] = []
        if shown_in is not None:
            shown = (
                ", shown AS (INSERT INTO approval_places (approval_id, place, shown_at) SELECT approval_id, %s, %s "
                "FROM stored ON CONFLICT (approval_id, place) DO NOTHING)"
            )
            shown_params = [shown_in, instant(shown_at)]
        marks: list[LiteralString] = ["%s"] * len(rows[0])
        placeholders = ", ".join(f"({', '.join(marks)})" for _ in rows)
        async with self.db.transaction() as conn:
            # A run that does not exist fails the insert (approvals.run_id references runs): NotFound, with no
            # statement of its own to look first. A clash on any unique index skips its row instead of failing the
            # statement (a failed statement ends the transaction, and a savepoint to survive it costs two commands):
            # fewer rows back is the clash, and raising rolls back the rows that went in.
            try:  # the error comes with the execute, or in a batch's pipeline with the fetch
                cursor = await conn.execute(
                    f"WITH stored AS (INSERT INTO approvals ({_INSERT_COLUMNS}) VALUES {placeholders} "
                    f"ON CONFLICT DO NOTHING RETURNING {_COLUMNS}){shown} SELECT * FROM stored",
                    [*(value for row in rows for value in row), *shown_params],
                )
                fetched = await cursor.fetchall()
            except ForeignKeyViolation as exc:
                # The server's detail names the key: 'Key (run_id)=(run-404) is not present in table "runs".'
                named = re.search(r"=\((.*)\) is not present", exc.diag.message_detail or "")
                missing = named.group(1) if named else ", ".join(dict.fromkeys(row[1] for row in rows))
                raise NotFound(f"run {missing!r} not found") from None
            stored = [approval_record(row, POSTGRES_TIMES) for row in fetched]
            if len(stored) != len(rows):
                raise AlreadyExists(
                    "an approval with one of these ids, or a pending approval for one of these tool calls, exists"
                )
            created = {record.approval_id: record for record in stored}
        return [created[row[0]] for row in rows]

    async def get(self, approval_id: str) -> ApprovalRecord:
        """The approval, or :class:`NotFound`.

        >>> (await storage.approvals.get(approval_id)).tool_name
        'delete_file'
        """
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM approvals WHERE approval_id = %s", [approval_id])
        if row is None:
            raise NotFound(f"approval {approval_id!r} not found")
        return approval_record(row, POSTGRES_TIMES)

    async def for_run(self, run_id: str, step: int | None = None) -> list[ApprovalRecord]:
        """The run's approvals (of one step, if given) in the order they were created.

        >>> [a.tool_call_id for a in await storage.approvals.for_run("run-1", step=1)]
        ['call_1', 'call_2']
        """
        sql = f"SELECT {_COLUMNS} FROM approvals WHERE run_id = %s"
        params: list[Any] = [run_id]
        if step is not None:
            sql += " AND step = %s"
            params.append(step)
        rows = await self.db.fetchall(sql + " ORDER BY step, seq", params)
        return [approval_record(row, POSTGRES_TIMES) for row in rows]

    async def get_clicked(self, approval_id: str, place: str | None) -> ClickedApproval:
        """The approval (or :class:`NotFound`) and whether it was shown in ``place``, in one statement.

        >>> clicked = await storage.approvals.get_clicked(approval_id, "slack:C1")
        >>> clicked.record.tool_name, clicked.shown_here
        ('delete_file', True)
        """
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS}, EXISTS (SELECT 1 FROM approval_places p "
            "WHERE p.approval_id = approvals.approval_id AND p.place = %s) FROM approvals WHERE approval_id = %s",
            [place or "", approval_id],
        )
        if row is None:
            raise NotFound(f"approval {approval_id!r} not found")
        return ClickedApproval(approval_record(row, POSTGRES_TIMES), bool(place) and bool(row[-1]))

    async def step(self, run_id: str, step: int) -> ApprovalStep:
        """The run (or :class:`NotFound`) and its approvals of ``step`` in the order they were created, in one
        statement.

        >>> paused = await storage.approvals.step("run-1", 1)
        >>> paused.run.requester, [a.tool_call_id for a in paused.approvals]
        ('U1', ['call_1', 'call_2'])
        """
        rows = await self.db.fetchall(
            f"SELECT {_STEP_COLUMNS} FROM runs r LEFT JOIN approvals a ON a.run_id = r.run_id AND a.step = %s "
            "WHERE r.run_id = %s ORDER BY a.seq",
            [step, step, step, run_id],
        )
        if not rows:
            raise NotFound(f"run {run_id!r} not found")
        width = len(_RUN_FIELDS)
        approvals = [approval_record(row[width + 1 :], POSTGRES_TIMES) for row in rows if row[width + 1] is not None]
        snapshot = decided_snapshot(rows[0][width], run_id) if approvals else None
        return ApprovalStep(run_from_row(rows[0][:width]), approvals, snapshot)

    async def set_message_ref(self, approval_ids: Sequence[str], message_ref: dict[str, Any]) -> int:
        """Record where the approvals were rendered; returns rows changed.

        >>> await storage.approvals.set_message_ref([approval_id], {"channel": "C1", "ts": "1700000000.000200"})
        1
        """
        return len(await self.mark_rendered(approval_ids, message_ref))

    async def mark_rendered(self, approval_ids: Sequence[str], message_ref: dict[str, Any]) -> dict[str, str]:
        """:meth:`set_message_ref`, returning each approval's status once it is recorded (by approval id).

        >>> await storage.approvals.mark_rendered([approval_id], {"channel": "C1", "ts": "1700000000.000200"})
        {'a1b2c3': 'pending'}
        """
        ids = list(approval_ids)
        if not ids:
            return {}
        rows = await self.db.fetchall(
            "UPDATE approvals SET message_ref_json = %s WHERE approval_id = ANY(%s) RETURNING approval_id, status",
            [Json(message_ref), ids],
        )
        return {approval_id: status for approval_id, status in rows}

    async def add_vote(
        self, approval_id: str, voter: str, vote: str, now: Instant = None, feedback: str | None = None
    ) -> int | None:
        """Record ``voter``'s vote (the first one counts) and return the number of counted votes (confirm, respond).

        Returns ``None`` if the approval is no longer pending or has expired. Voters on one approval
        are serialised by a row lock, so the count each one sees includes every earlier vote. A ``respond``
        vote keeps its ``feedback`` (the answer) as the pending approval's feedback.

        >>> await storage.approvals.add_vote(approval_id, "U2", "confirm")
        1
        """
        if vote not in VOTES:
            raise ValueError(f"unknown vote {vote!r}; expected one of {VOTES}")
        at = instant(now)
        async with self.db.transaction() as conn:
            cursor = await conn.execute(
                "SELECT status, expires_at FROM approvals WHERE approval_id = %s FOR UPDATE", [approval_id]
            )
            row = await cursor.fetchone()
            if row is None:
                raise NotFound(f"approval {approval_id!r} not found")
            if row[0] != "pending" or row[1] <= at:
                return None
            cursor = await conn.execute(
                "INSERT INTO votes (approval_id, voter, vote, voted_at) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (approval_id, voter) DO NOTHING",
                [approval_id, voter, vote, at],
            )
            if cursor.rowcount and vote == "respond":
                await conn.execute(
                    "UPDATE approvals SET feedback = %s WHERE approval_id = %s",
                    [None if feedback is None else Json(feedback), approval_id],
                )
            cursor = await conn.execute(
                "SELECT COUNT(*) FROM votes WHERE approval_id = %s AND vote = ANY(%s)",
                [approval_id, list(COUNTED_VOTES)],
            )
            counted = await cursor.fetchone()
        return int(counted[0]) if counted else 0

    async def rejudge(
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

        >>> await storage.approvals.rejudge(approval_id, approvers=["@sre"], quorum=2, four_eyes=True)
        True
        """
        async with self.db.transaction() as conn:
            cursor = await conn.execute(
                "UPDATE approvals SET approvers = %s, quorum = %s, four_eyes = %s "
                "WHERE approval_id = %s AND status = 'pending' RETURNING true",
                [Jsonb(list(approvers)), quorum, four_eyes, approval_id],
            )
            if await cursor.fetchone() is None:
                await self._exists(approval_id)
                return False
            if void_voters:
                await conn.execute(
                    "UPDATE votes SET vote = %s WHERE approval_id = %s AND voter = ANY(%s)",
                    [VOID_VOTE, approval_id, list(void_voters)],
                )
        return True

    async def votes(self, approval_id: str) -> list[Vote]:
        """Every vote on the approval, oldest first.

        >>> [(v.voter, v.vote) for v in await storage.approvals.votes(approval_id)]
        [('U2', 'confirm')]
        """
        rows = await self.db.fetchall(
            "SELECT approval_id, voter, vote, voted_at FROM votes WHERE approval_id = %s ORDER BY voted_at, seq",
            [approval_id],
        )
        return [Vote(approval_id=r[0], voter=r[1], vote=r[2], voted_at=POSTGRES_TIMES.required(r[3])) for r in rows]

    async def decide(
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

        >>> await storage.approvals.decide(approval_id, status="approved", decided_by="U2")
        True
        >>> await storage.approvals.decide(approval_id, status="rejected", decided_by="U3")  # too late
        False
        """
        if status not in DECISION_STATUSES:
            raise ValueError(f"a decision is one of {DECISION_STATUSES}, not {status!r}")
        at = instant(now)
        row = await self.db.fetchone(
            "UPDATE approvals SET status = %s, decided_by = %s, decided_at = %s, feedback = %s, "
            "final_arguments_json = %s, final_result = %s "
            "WHERE approval_id = %s AND status = 'pending' AND expires_at > %s RETURNING true",
            [
                status,
                decided_by,
                at,
                None if feedback is None else Json(feedback),
                None if final_arguments is None else Json(final_arguments),
                final_result,
                approval_id,
                at,
            ],
        )
        if row is None:
            await self._exists(approval_id)
            return False
        return True

    async def expire(self, approval_id: str, now: Instant = None) -> bool:
        """Mark a pending approval ``expired`` if it is due; return whether this caller did.

        >>> await storage.approvals.expire(approval_id, now=after_expiry)
        True
        """
        at = instant(now)
        row = await self.db.fetchone(
            "UPDATE approvals SET status = 'expired', decided_by = %s, decided_at = %s "
            "WHERE approval_id = %s AND status = 'pending' AND expires_at <= %s RETURNING true",
            [SYSTEM_ACTOR, at, approval_id, at],
        )
        if row is None:
            await self._exists(approval_id)
            return False
        return True

    async def mark_reminded(self, approval_id: str, now: Instant = None) -> bool:
        """Record that a pending approval's approvers were reminded; ``True`` for exactly one caller, ever.

        >>> await storage.approvals.mark_reminded(approval_id, now=halfway)
        True
        """
        row = await self.db.fetchone(
            "UPDATE approvals SET reminded_at = %s "
            "WHERE approval_id = %s AND status = 'pending' AND reminded_at IS NULL RETURNING true",
            [instant(now), approval_id],
        )
        if row is None:
            await self._exists(approval_id)
            return False
        return True

    async def expire_due(self, now: Instant = None, limit: int = 500) -> list[ApprovalRecord]:
        """Expire up to ``limit`` due pending approvals in one statement; return the ones this caller expired.

        The batch is selected ``FOR UPDATE SKIP LOCKED``: concurrent sweepers take disjoint batches instead
        of queueing on each other's rows, and each approval is returned to exactly one of them (a row that a
        decision changed meanwhile fails the outer ``status = 'pending'`` re-check).

        >>> [a.status for a in await storage.approvals.expire_due(now=after_expiry)]
        ['expired']
        """
        at = instant(now)
        # ``= ANY(ARRAY(SELECT …))``, not ``IN (SELECT …)``: the planner may run an ``IN`` subquery as the
        # inner side of a nested-loop semi join, re-running it per outer row; each re-run then skips the
        # rows this statement has just updated and locks the next due ones, so one call expired more than
        # ``limit`` approvals. An ARRAY subquery is an InitPlan: the batch is chosen and locked once.
        rows = await self.db.fetchall(
            "UPDATE approvals SET status = 'expired', decided_by = %s, decided_at = %s "
            "WHERE approval_id = ANY(ARRAY(SELECT approval_id FROM approvals WHERE status = 'pending' "
            "AND expires_at <= %s ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)) "
            f"AND status = 'pending' RETURNING {_COLUMNS}",
            [SYSTEM_ACTOR, at, at, limit],
        )
        return [approval_record(row, POSTGRES_TIMES) for row in rows]

    async def _exists(self, approval_id: str) -> None:
        if await self.db.fetchone("SELECT 1 FROM approvals WHERE approval_id = %s", [approval_id]) is None:
            raise NotFound(f"approval {approval_id!r} not found")

    async def close_pending_for_run(self, run_id: str, status: str, reason: str) -> list[str]:
        """Close the run's pending approvals as ``superseded`` or ``cancelled``; return the ids changed.

        >>> await storage.approvals.close_pending_for_run("run-1", "superseded", "a new message arrived")
        ['kq3...', 'Zx8...']
        """
        if status not in CLOSING_STATUSES:
            raise ValueError(f"closing status is one of {CLOSING_STATUSES}, not {status!r}")
        rows = await self.db.fetchall(
            "UPDATE approvals SET status = %s, decided_by = %s, decided_at = now(), feedback = %s "
            "WHERE run_id = %s AND status = 'pending' RETURNING approval_id",
            [status, SYSTEM_ACTOR, Json(reason), run_id],
        )
        return sorted(row[0] for row in rows)

    async def due_for_expiry(self, now: Instant = None, limit: int = 100) -> list[ApprovalRecord]:
        """Pending approvals whose expiry time has passed, soonest-expired first (an index range scan).

        >>> [a.approval_id for a in await storage.approvals.due_for_expiry(now=after_expiry)]
        ['kq3...']
        """
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM approvals WHERE status = 'pending' AND expires_at <= %s "
            "ORDER BY expires_at LIMIT %s",
            [instant(now), limit],
        )
        return [approval_record(row, POSTGRES_TIMES) for row in rows]

    async def pending(
        self, platform: str | None = None, chat_history_id: str | None = None, approver: str | None = None
    ) -> list[ApprovalRecord]:
        """Pending approvals, oldest first, optionally of one platform, thread, or approver.

        ``approver`` matches approvals that list the user, and approvals with no list whose requester
        is the user (an empty list means "the requester and admins").

        >>> [a.tool_name for a in await storage.approvals.pending(approver="U2")]
        ['delete_file']
        """
        sql = f"SELECT {_COLUMNS} FROM approvals WHERE status = 'pending'"
        params: list[Any] = []
        if platform is not None:
            sql += " AND platform = %s"
            params.append(platform)
        if chat_history_id is not None:
            sql += " AND chat_history_id = %s"
            params.append(chat_history_id)
        if approver is not None:
            sql += " AND (approvers ? %s OR (approvers = '[]'::jsonb AND requester = %s))"
            params += [approver, approver]
        rows = await self.db.fetchall(sql + " ORDER BY created_at, seq", params)
        return [approval_record(row, POSTGRES_TIMES) for row in rows]
