"""The run lifecycle on PostgreSQL: leases on runs, the per-thread inbox and the outbox.

:class:`PostgresRunLeases`, :class:`PostgresThreadInbox` and :class:`PostgresOutbox` have the semantics
of their SQLite counterparts in :mod:`storage.sqlite.lifecycle`. Every claim is one conditional ``UPDATE …
RETURNING``: under READ COMMITTED a second writer of the same row waits for the first to commit, then
re-checks the condition against the new row, so any number of replicas agree on one winner. One active
run per thread is the unique partial index ``runs_one_active_per_thread``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Json

from bot.messages import ChatMessage
from storage.errors import AlreadyExists
from storage.postgres.database import (
    POSTGRES_TIMES,
    PostgresDatabase,
    advisory_lock,
    held_locks,
    instant,
    rows_changed,
    vouched,
)
from storage.postgres.messages import THREAD_LOCK, PostgresChatMessageStore
from storage.postgres.runs import RUN_COLUMNS, fence_holds, fences_changed, run_from_row
from storage.postgres.wakeups import NOTIFY_OWNER_SQL, notify_owner_params
from storage.protocols import InboxItem, Instant, OutboxMessage, RunFence, RunRecord, ThreadAddress, TokenUsage
from storage.records import inbox_item, outbox_message
from storage.run_rules import STEP_DECIDED, claimed_status, usage_columns

_WORKING = "('running', 'resuming')"
_ACTIVE = "('running', 'paused', 'resuming')"
INBOX_LOCK = "countersign.inbox"
"""With the thread's id, the key of the advisory lock that orders a thread's enqueues and starts."""


class PostgresRunLeases:
    """Owners and leases of runs (see :class:`~storage.protocols.RunLeases`)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def claim_paused(
        self,
        run_id: str,
        owner: str,
        until: Instant,
        *,
        step: int | None = None,
        decided: bool = False,
        start: bool = False,
    ) -> RunRecord | None:
        """``paused → resuming``, owned by ``owner`` until ``until``; the run as claimed for exactly one caller,
        ``None`` for the others.

        ``step``: only a run paused at that step (a resume decided on one step's approvals never claims the run
        paused again at a later step). ``decided``: only if the paused step has approvals and none is pending.
        ``start`` (needs ``step``): ``paused → running`` at once, the claim and the start in one statement.

        >>> (await storage.leases.claim_paused("run-1", "host-1-a", now + timedelta(seconds=30))).status
        'resuming'
        >>> (await storage.leases.claim_paused("run-2", "host-1-a", now + timedelta(seconds=30), step=1,
        ...                                    start=True)).status
        'running'
        """
        status = claimed_status(step, start)
        fences_changed(self.db, run_id)
        row = await self.db.fetchone(
            "UPDATE runs SET status = %s, owner = %s, lease_expires_at = %s, updated_at = now() "
            "WHERE run_id = %s AND status = 'paused' AND (%s::integer IS NULL OR step = %s)"
            f"{STEP_DECIDED if decided else ''} RETURNING {RUN_COLUMNS}",
            [status, owner, instant(until), run_id, step, step],
        )
        return None if row is None else run_from_row(row)

    async def claim_expired(self, run_id: str, owner: str, until: Instant, now: Instant = None) -> RunRecord | None:
        """Take over a running/resuming run whose lease expired by ``now``; the run as taken, or ``None``.

        >>> (await storage.leases.claim_expired("run-1", "host-2-b", later + timedelta(seconds=30), now=later)).owner
        'host-2-b'
        """
        fences_changed(self.db, run_id)
        row = await self.db.fetchone(
            "UPDATE runs SET owner = %s, lease_expires_at = %s, recoveries = recoveries + 1, updated_at = now() "
            f"WHERE run_id = %s AND status IN {_WORKING} AND (lease_expires_at IS NULL OR lease_expires_at <= %s) "
            f"RETURNING {RUN_COLUMNS}",
            [owner, instant(until), run_id, instant(now)],
        )
        return None if row is None else run_from_row(row)

    async def claim_own(self, owner: str, until: Instant, limit: int = 100) -> list[RunRecord]:
        """Take back ``owner``'s running/resuming runs whatever their lease (a restart under the same id).

        >>> [r.recoveries for r in await storage.leases.claim_own("host-1-a", now + timedelta(seconds=30))]
        [1]
        """
        fences_changed(self.db)
        rows = await self.db.fetchall(
            "UPDATE runs SET lease_expires_at = %s, recoveries = recoveries + 1, updated_at = now() "
            f"WHERE run_id IN (SELECT run_id FROM runs WHERE owner = %s AND status IN {_WORKING} "
            "ORDER BY created_at LIMIT %s FOR UPDATE) "
            f"AND owner = %s AND status IN {_WORKING} RETURNING {RUN_COLUMNS}",
            [instant(until), owner, limit, owner],
        )
        return sorted((run_from_row(row) for row in rows), key=lambda r: r.created_at)

    async def renew(self, owner: str, until: Instant) -> list[str]:
        """Extend every lease ``owner`` holds on a running/resuming run; returns those runs' ids.

        A run the owner works on that is missing from the answer was taken over: the owner stops working on it.

        >>> await storage.leases.renew("host-1-a", now + timedelta(seconds=30))
        ['run-1']
        """
        rows = await self.db.fetchall(
            f"UPDATE runs SET lease_expires_at = %s WHERE owner = %s AND status IN {_WORKING} RETURNING run_id",
            [instant(until), owner],
        )
        return sorted(row[0] for row in rows)

    async def release(self, owner: str, now: Instant = None) -> int:
        """Give up ``owner``'s running/resuming runs: owner cleared, lease expired at ``now``.

        >>> await storage.leases.release("host-1-a")
        1
        """
        fences_changed(self.db)
        return await self.db.execute(
            f"UPDATE runs SET owner = NULL, lease_expires_at = %s WHERE owner = %s AND status IN {_WORKING}",
            [instant(now), owner],
        )

    async def expired(self, now: Instant = None, limit: int = 100) -> list[RunRecord]:
        """Running/resuming runs whose lease expired by ``now`` (or that have none), oldest first.

        >>> [r.run_id for r in await storage.leases.expired(now=later)]
        ['run-1']
        """
        rows = await self.db.fetchall(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE status IN {_WORKING} "
            "AND (lease_expires_at IS NULL OR lease_expires_at <= %s) ORDER BY created_at, seq LIMIT %s",
            [instant(now), limit],
        )
        return [run_from_row(row) for row in rows]

    async def decided_paused(self, limit: int = 100) -> list[RunRecord]:
        """Paused runs whose current step has approvals, none of them pending: each is due a resume.

        >>> [r.run_id for r in await storage.leases.decided_paused()]
        ['run-1']
        """
        rows = await self.db.fetchall(
            f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'paused'{STEP_DECIDED} ORDER BY updated_at, seq LIMIT %s",
            [limit],
        )
        return [run_from_row(row) for row in rows]


_INBOX_COLUMNS = (
    "id, chat_history_id, platform, workspace, channel, thread, requester, message_json::text, message_ref, received_at"
)


_INBOX_WIDTH = len(_INBOX_COLUMNS.split(", "))
_LOCK_STARTED = "(SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))::text FROM started)"
"""``start_next``'s advisory lock on the thread's history, taken for the run it started (none if it started none)."""


def _inbox_item(row: Any) -> InboxItem:
    return inbox_item(row, POSTGRES_TIMES)


class PostgresThreadInbox:
    """Messages waiting for their thread (see :class:`~storage.protocols.ThreadInbox`).

    ``enqueue`` and ``start_next`` take a transaction-scoped advisory lock on the thread, so a thread's
    inbox ids are handed out in commit order: ``start_next`` never starts a message while an earlier
    one of the same thread is still being stored.
    """

    def __init__(self, db: PostgresDatabase, messages: PostgresChatMessageStore) -> None:
        self.db = db
        self.messages = messages

    async def enqueue(
        self,
        address: ThreadAddress,
        requester: str,
        message: dict[str, Any],
        message_ref: str | None = None,
        now: Instant = None,
        event_key: str | None = None,
    ) -> int | None:
        """Store a message for its thread; returns its inbox id, or ``None`` for a redelivered event.

        ``event_key`` is recorded as :meth:`storage.sqlite.events.first_time` would, in the same transaction, so
        a crash can neither lose the message after its event was marked seen nor store it twice.

        >>> await storage.inbox.enqueue(address, "U1", user_message, event_key="slack:event:Ev1")
        1
        """
        # One statement: the event marked seen (with an event key: a redelivered one inserts nothing), the message
        # stored, and the owner of the thread's running run woken (NOTIFY, delivered at commit) rather than left to
        # find the message by itself. The wake-up is read only for a stored message (the last SELECT's subquery).
        seen, seen_params = "", []
        if event_key is not None:
            seen = (
                "seen AS (INSERT INTO events (event_key, seen_at) VALUES (%s, %s) "
                "ON CONFLICT (event_key) DO NOTHING RETURNING 1), "
            )
            seen_params = [event_key, instant(None)]
        async with self.db.transaction() as conn:
            await _lock_thread(conn, address.chat_history_id)
            cursor = await conn.execute(
                vouched(
                    f"WITH {seen}stored AS (INSERT INTO inbox (chat_history_id, platform, workspace, channel, thread, "
                    "requester, message_json, message_ref, received_at) SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s"
                    f"{' WHERE EXISTS (SELECT 1 FROM seen)' if seen else ''} RETURNING id), "
                    f"woken AS ({NOTIFY_OWNER_SQL}) SELECT id, (SELECT count(*) FROM woken) FROM stored"
                ),
                [
                    *seen_params,
                    address.chat_history_id,
                    address.platform,
                    address.workspace,
                    address.channel,
                    address.thread,
                    requester,
                    Json(message),
                    message_ref,
                    instant(now),
                    *notify_owner_params(address),
                ],
            )
            row = await cursor.fetchone()
            if row is None:
                return None
        return int(row[0])  # type: ignore[index]

    async def start_next(
        self, chat_history_id: str, run_id: str, owner: str, until: Instant, now: Instant = None
    ) -> tuple[RunRecord, InboxItem] | None:
        """Start a run for the oldest waiting message of a thread with no active run (one transaction).

        >>> run, item = await storage.inbox.start_next(address.chat_history_id, "run-2", "host-1-a", lease_end)
        >>> run.status, item.requester
        ('running', 'U1')
        """
        at = instant(now)
        async with self.db.transaction() as conn:
            await _lock_thread(conn, chat_history_id)
            # One statement: the oldest waiting message, a run started for it, and the message taken off the inbox
            # if the run was started. The unique partial index decides whether the thread is free: a run created
            # meanwhile by any replica (not through the inbox) makes the insert a no-op, not a second active run,
            # and the message stays. A started run's message is written next, under the thread's history lock:
            # taken here, from the inserted row (so after the insert, as a statement of its own would take it).
            held = held_locks(conn)
            history_lock = (THREAD_LOCK, chat_history_id)
            locking = held is None or history_lock not in held
            cursor = await conn.execute(
                f"WITH item AS (SELECT {_INBOX_COLUMNS} FROM inbox WHERE chat_history_id = %s ORDER BY id LIMIT 1), "
                "started AS (INSERT INTO runs (run_id, chat_history_id, platform, workspace, channel, thread, "
                "requester, status, step, created_at, updated_at, owner, lease_expires_at) "
                "SELECT %s, chat_history_id, platform, workspace, channel, thread, requester, 'running', 0, "
                f"%s, %s, %s, %s FROM item ON CONFLICT DO NOTHING RETURNING {RUN_COLUMNS}), "
                "taken AS (DELETE FROM inbox WHERE id = (SELECT id FROM item) AND EXISTS (SELECT 1 FROM started)) "
                "SELECT item.*, started.*, "
                f"{_LOCK_STARTED if locking else 'NULL'} FROM item LEFT JOIN started ON true",
                [chat_history_id, run_id, at, at, owner, instant(until), *(history_lock if locking else ())],
            )
            row = await cursor.fetchone()
            if row is None:
                return None
            width = _INBOX_WIDTH
            item = _inbox_item(row[:width])
            if row[width] is None:
                cursor = await conn.execute("SELECT 1 FROM runs WHERE run_id = %s", [run_id])
                if await cursor.fetchone() is not None:
                    raise AlreadyExists(f"run {run_id!r} exists already")
                return None
            created = row[width:-1]
            if locking and held is not None:
                held.add(history_lock)
            await self.messages._write_in(conn, chat_history_id, [ChatMessage.from_dict(item.message)])
        return run_from_row(created), item

    async def waiting(self, chat_history_id: str) -> list[InboxItem]:
        """The thread's waiting messages, oldest first.

        >>> [i.requester for i in await storage.inbox.waiting(address.chat_history_id)]
        ['U1']
        """
        async with self.db.connection() as conn:
            if self.db.in_bound():
                # Read in a batch (a run's pause or end): the thread's inbox lock, held to its commit, orders it
                # with every enqueue. One in flight commits first and is seen; a later one waits for this
                # batch's writes and its start_next sees them. (Take it before the batch's row locks: an enqueue
                # holding it may wait on the run's row in its start_next.)
                await _lock_thread(conn, chat_history_id)
            cursor = await conn.execute(
                f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE chat_history_id = %s ORDER BY id", [chat_history_id]
            )
            rows = await cursor.fetchall()
        return [_inbox_item(row) for row in rows]

    async def is_waiting(self, item_id: int) -> bool:
        """Whether the message is still waiting.

        >>> await storage.inbox.is_waiting(1)
        False
        """
        return await self.db.fetchone("SELECT 1 FROM inbox WHERE id = %s", [item_id]) is not None

    async def orphaned(self, limit: int = 100) -> list[InboxItem]:
        """The oldest waiting message of every thread that no process is running a run in.

        >>> [i.address.chat_history_id for i in await storage.inbox.orphaned()]
        ['slack:T1:C1:170.1']
        """
        rows = await self.db.fetchall(
            f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE id IN (SELECT MIN(id) FROM inbox GROUP BY chat_history_id) "
            "AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.chat_history_id = inbox.chat_history_id "
            f"AND runs.status IN {_WORKING}) ORDER BY id LIMIT %s",
            [limit],
        )
        return [_inbox_item(row) for row in rows]


async def _lock_thread(conn: Any, chat_history_id: str) -> None:
    await advisory_lock(conn, INBOX_LOCK, chat_history_id)


_OUTBOX_COLUMNS = (
    "key, chat_history_id, platform, workspace, channel, thread, text, created_at, attempts, next_attempt_at, "
    "claimed_by, delivered_at"
)


def _outbox_message(row: Any) -> OutboxMessage:
    return outbox_message(row, POSTGRES_TIMES)


class PostgresOutbox:
    """Messages owed to threads (see :class:`~storage.protocols.Outbox`)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def add(
        self,
        key: str,
        address: ThreadAddress,
        text: str,
        *,
        claimed_by: str | None = None,
        claim_until: Instant = None,
        now: Instant = None,
        finishes_run: str | None = None,
        fence: RunFence | None = None,
        usage: TokenUsage | None = None,
    ) -> bool:
        """Store a message owed to a thread; ``False`` if one with ``key`` exists already.

        ``finishes_run``: also move that run from running/resuming to finished, in the same transaction (a
        run's answer is owed exactly when the run is finished), recording its token ``usage`` if given.
        ``fence``: only while the fence holds, in that transaction; otherwise nothing is written and the result
        is ``False``.

        >>> await storage.outbox.add("answer:run-1", address, "Deleted a.txt.", claimed_by="host-1-a", claim_until=soon)
        True
        """
        if usage is not None and finishes_run is None:
            raise ValueError("usage is recorded for the run an answer finishes (finishes_run)")
        at = instant(now)
        claimed = None if claimed_by is None else instant(claim_until)
        finishing, finishing_params = "", []
        if finishes_run is not None:
            # The run finished by the insert's own statement (a CTE runs whether or not anything reads it).
            counts = usage_columns(usage)
            finishing = (
                "WITH finished AS (UPDATE runs SET status = 'finished', owner = NULL, lease_expires_at = NULL, "
                f"updated_at = now(){''.join(f', {name} = %s' for name in counts)} "
                f"WHERE run_id = %s AND status IN {_WORKING}) "
            )
            finishing_params = [*counts.values(), finishes_run]
        async with self.db.transaction() as conn:
            if fence is not None and not await fence_holds(conn, fence):
                return False
            if finishes_run is not None:
                fences_changed(self.db, finishes_run)
            cursor = await conn.execute(
                vouched(
                    f"{finishing}INSERT INTO outbox (key, chat_history_id, platform, workspace, channel, thread, text, "
                    "created_at, attempts, next_attempt_at, claimed_by, claimed_until) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 0, %s, %s, %s) ON CONFLICT (key) DO NOTHING"
                ),
                [
                    *finishing_params,
                    key,
                    address.chat_history_id,
                    address.platform,
                    address.workspace,
                    address.channel,
                    address.thread,
                    text,
                    at,
                    at,
                    claimed_by,
                    claimed,
                ],
            )
            return await rows_changed(cursor) == 1

    async def claim(self, key: str, owner: str, until: Instant, now: Instant = None) -> bool:
        """Claim an undelivered message whose claim is free or expired; ``True`` for one caller.

        >>> await storage.outbox.claim("answer:run-1", "host-2-b", later + timedelta(seconds=30), now=later)
        True
        """
        row = await self.db.fetchone(
            "UPDATE outbox SET claimed_by = %s, claimed_until = %s WHERE key = %s AND delivered_at IS NULL "
            "AND (claimed_until IS NULL OR claimed_until < %s) RETURNING true",
            [owner, instant(until), key, instant(now)],
        )
        return row is not None

    async def delivered(self, key: str, now: Instant = None) -> bool:
        """Mark the message delivered (it is never posted again).

        >>> await storage.outbox.delivered("answer:run-1")
        True
        """
        row = await self.db.fetchone(
            "UPDATE outbox SET delivered_at = %s, claimed_until = NULL WHERE key = %s AND delivered_at IS NULL "
            "RETURNING true",
            [instant(now), key],
        )
        return row is not None

    async def retry_later(self, key: str, at: Instant) -> bool:
        """Release the claim after a failed post; the message is due again at ``at``.

        >>> await storage.outbox.retry_later("answer:run-1", later + timedelta(seconds=30))
        True
        """
        row = await self.db.fetchone(
            "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL, attempts = attempts + 1, "
            "next_attempt_at = %s WHERE key = %s AND delivered_at IS NULL RETURNING true",
            [instant(at), key],
        )
        return row is not None

    async def due(self, platforms: Sequence[str], now: Instant = None, limit: int = 100) -> list[OutboxMessage]:
        """Undelivered, unclaimed (or claim expired) messages of ``platforms`` due by ``now``, oldest first.

        >>> [m.key for m in await storage.outbox.due(["slack"])]
        ['answer:run-1']
        """
        names = list(platforms)
        if not names:
            return []
        at = instant(now)
        rows = await self.db.fetchall(
            f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE delivered_at IS NULL AND next_attempt_at <= %s "
            "AND (claimed_until IS NULL OR claimed_until < %s) AND platform = ANY(%s) "
            "ORDER BY created_at, seq LIMIT %s",
            [at, at, names, limit],
        )
        return [_outbox_message(row) for row in rows]

    async def undelivered(self, chat_history_id: str | None = None) -> list[OutboxMessage]:
        """Every message not yet delivered (of one thread, if given), oldest first.

        >>> await storage.outbox.undelivered()
        []
        """
        sql = f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE delivered_at IS NULL"
        params: list[Any] = []
        if chat_history_id is not None:
            sql += " AND chat_history_id = %s"
            params.append(chat_history_id)
        rows = await self.db.fetchall(sql + " ORDER BY created_at, seq", params)
        return [_outbox_message(row) for row in rows]
