"""The run lifecycle in SQLite: leases on runs, the per-thread inbox and the outbox.

:class:`SQLiteRunLeases`, :class:`SQLiteThreadInbox` and :class:`SQLiteOutbox` implement the
:class:`~storage.protocols.RunLeases`, :class:`~storage.protocols.ThreadInbox` and
:class:`~storage.protocols.Outbox` protocols. Every claim is a conditional ``UPDATE`` (or a
transaction opened with ``BEGIN IMMEDIATE``), so any number of processes sharing the file agree on
one winner.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.messages import ChatMessage
from storage.codec import dumps, epoch
from storage.protocols import InboxItem, Instant, OutboxMessage, RunFence, RunRecord, ThreadAddress, TokenUsage
from storage.records import SQLITE_TIMES, inbox_item, outbox_message
from storage.run_rules import STEP_DECIDED, claimed_status, usage_columns
from storage.sqlite.connection import Connector
from storage.sqlite.runs import RUN_COLUMNS as _RUN_COLUMNS
from storage.sqlite.runs import fence_holds
from storage.sqlite.runs import run_from_row as _run_record

_WORKING = "('running', 'resuming')"
_ACTIVE = "('running', 'paused', 'resuming')"


class SQLiteRunLeases:
    """Owners and leases of runs (see :class:`~storage.protocols.RunLeases`)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def claim_paused(
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
        paused again at a later step). ``decided``: only if the paused step has approvals and none is pending (a
        decision's batch claims the run with it when that decision completes the step). ``start`` (needs
        ``step``): ``paused → running`` at once, the claim and the start in one statement (``resuming`` is
        skipped only because nobody could see it between the two).

        >>> storage.leases.claim_paused("run-1", "host-1-a", now + timedelta(seconds=30)).status
        'resuming'
        >>> storage.leases.claim_paused("run-2", "host-1-a", now + timedelta(seconds=30), step=1, start=True).status
        'running'
        """
        status = claimed_status(step, start)
        with self.connector.writing() as db:
            row = db.execute(
                "UPDATE runs SET status = ?, owner = ?, lease_expires_at = ?, updated_at = ? "
                f"WHERE run_id = ? AND status = 'paused' AND (? IS NULL OR step = ?){STEP_DECIDED if decided else ''} "
                f"RETURNING {_RUN_COLUMNS}",
                [status, owner, epoch(until), epoch(None), run_id, step, step],
            ).fetchone()
        return None if row is None else _run_record(row)

    def claim_expired(self, run_id: str, owner: str, until: Instant, now: Instant = None) -> RunRecord | None:
        """Take over a running/resuming run whose lease expired; the run as taken, or ``None``.

        >>> storage.leases.claim_expired("run-1", "host-2-b", later + timedelta(seconds=30), now=later).owner
        'host-2-b'
        """
        with self.connector.writing() as db:
            row = db.execute(
                "UPDATE runs SET owner = ?, lease_expires_at = ?, recoveries = recoveries + 1, updated_at = ? "
                f"WHERE run_id = ? AND status IN {_WORKING} "
                "AND (lease_expires_at IS NULL OR lease_expires_at <= ?) "
                f"RETURNING {_RUN_COLUMNS}",
                [owner, epoch(until), epoch(None), run_id, epoch(now)],
            ).fetchone()
        return None if row is None else _run_record(row)

    def claim_own(self, owner: str, until: Instant, limit: int = 100) -> list[RunRecord]:
        """Take back ``owner``'s running/resuming runs whatever their lease (a restart under the same id).

        >>> [r.recoveries for r in storage.leases.claim_own("host-1-a", now + timedelta(seconds=30))]
        [1]
        """
        with self.connector.writing() as db:
            rows = db.execute(
                "UPDATE runs SET lease_expires_at = ?, recoveries = recoveries + 1, updated_at = ? "
                f"WHERE run_id IN (SELECT run_id FROM runs WHERE owner = ? AND status IN {_WORKING} "
                "ORDER BY created_at, rowid LIMIT ?) "
                f"RETURNING {_RUN_COLUMNS}",
                [epoch(until), epoch(None), owner, limit],
            ).fetchall()
        return sorted((_run_record(row) for row in rows), key=lambda r: r.created_at)

    def renew(self, owner: str, until: Instant) -> list[str]:
        """Extend every lease ``owner`` holds on a running/resuming run; returns those runs' ids.

        >>> storage.leases.renew("host-1-a", now + timedelta(seconds=30))
        ['run-1']
        """
        with self.connector.writing() as db:
            rows = db.execute(
                f"UPDATE runs SET lease_expires_at = ? WHERE owner = ? AND status IN {_WORKING} RETURNING run_id",
                [epoch(until), owner],
            ).fetchall()
        return sorted(row[0] for row in rows)

    def release(self, owner: str, now: Instant = None) -> int:
        """Give up ``owner``'s running/resuming runs: owner cleared, lease expired at ``now``.

        >>> storage.leases.release("host-1-a")
        1
        """
        with self.connector.writing() as db:
            return db.execute(
                f"UPDATE runs SET owner = NULL, lease_expires_at = ? WHERE owner = ? AND status IN {_WORKING}",
                [epoch(now), owner],
            ).rowcount

    def expired(self, now: Instant = None, limit: int = 100) -> list[RunRecord]:
        """Running/resuming runs whose lease expired before ``now`` (or that have none), oldest first.

        >>> [r.run_id for r in storage.leases.expired(now=later)]
        ['run-1']
        """
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status IN {_WORKING} "
                "AND (lease_expires_at IS NULL OR lease_expires_at <= ?) ORDER BY created_at, rowid LIMIT ?",
                [epoch(now), limit],
            ).fetchall()
        return [_run_record(row) for row in rows]

    def decided_paused(self, limit: int = 100) -> list[RunRecord]:
        """Paused runs whose current step has approvals, none of them pending: each is due a resume.

        >>> [r.run_id for r in storage.leases.decided_paused()]
        ['run-1']
        """
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE status = 'paused'{STEP_DECIDED} ORDER BY updated_at LIMIT ?",
                [limit],
            ).fetchall()
        return [_run_record(row) for row in rows]


_INBOX_COLUMNS = (
    "id, chat_history_id, platform, workspace, channel, thread, requester, message_json, message_ref, received_at"
)


def _inbox_item(row: Any) -> InboxItem:
    return inbox_item(row, SQLITE_TIMES)


class SQLiteThreadInbox:
    """Messages waiting for their thread (see :class:`~storage.protocols.ThreadInbox`).

    ``messages`` is the chat-message store of the same database: :meth:`start_next` writes into it
    inside its own transaction.
    """

    def __init__(self, connector: Connector, messages: Any) -> None:
        self.connector = connector
        self.messages = messages

    def enqueue(
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

        >>> storage.inbox.enqueue(address, "U1", ChatMessage.from_user("hi").to_dict(), event_key="slack:event:Ev1")
        1
        """
        at = epoch(now)
        with self.connector.writing() as db:
            if (
                event_key is not None
                and not db.execute(
                    "INSERT INTO events (event_key, seen_at) VALUES (?, ?) ON CONFLICT (event_key) DO NOTHING",
                    [event_key, epoch(None)],
                ).rowcount
            ):
                return None
            return db.execute(
                "INSERT INTO inbox (chat_history_id, platform, workspace, channel, thread, requester, "
                "message_json, message_ref, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    address.chat_history_id,
                    address.platform,
                    address.workspace,
                    address.channel,
                    address.thread,
                    requester,
                    dumps(message),
                    message_ref,
                    at,
                ],
            ).lastrowid

    def start_next(
        self, chat_history_id: str, run_id: str, owner: str, until: Instant, now: Instant = None
    ) -> tuple[RunRecord, InboxItem] | None:
        """Start a run for the oldest waiting message of a thread with no active run (one transaction).

        >>> run, item = storage.inbox.start_next(address.chat_history_id, "run-2", "host-1-a", lease_end)
        >>> run.status, item.requester
        ('running', 'U1')
        """
        at = epoch(now)
        with self.connector.writing() as db:
            if db.execute(
                f"SELECT 1 FROM runs WHERE chat_history_id = ? AND status IN {_ACTIVE}", [chat_history_id]
            ).fetchone():
                return None
            row = db.execute(
                f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE chat_history_id = ? ORDER BY id LIMIT 1",
                [chat_history_id],
            ).fetchone()
            if row is None:
                return None
            item = _inbox_item(row)
            address = item.address
            db.execute(
                "INSERT INTO runs (run_id, chat_history_id, platform, workspace, channel, thread, requester, "
                "status, step, created_at, updated_at, owner, lease_expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', 0, ?, ?, ?, ?)",
                [
                    run_id,
                    chat_history_id,
                    address.platform,
                    address.workspace,
                    address.channel,
                    address.thread,
                    item.requester,
                    at,
                    at,
                    owner,
                    epoch(until),
                ],
            )
            self.messages.write_messages(chat_history_id, [ChatMessage.from_dict(item.message)])
            db.execute("DELETE FROM inbox WHERE id = ?", [item.id])
            run = _run_record(db.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", [run_id]).fetchone())
        return run, item

    def waiting(self, chat_history_id: str) -> list[InboxItem]:
        """The thread's waiting messages, oldest first.

        >>> [i.requester for i in storage.inbox.waiting(address.chat_history_id)]
        ['U1']
        """
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE chat_history_id = ? ORDER BY id", [chat_history_id]
            ).fetchall()
        return [_inbox_item(row) for row in rows]

    def is_waiting(self, item_id: int) -> bool:
        """Whether the message is still waiting.

        >>> storage.inbox.is_waiting(1)
        False
        """
        with self.connector.reading() as db:
            return db.execute("SELECT 1 FROM inbox WHERE id = ?", [item_id]).fetchone() is not None

    def orphaned(self, limit: int = 100) -> list[InboxItem]:
        """The oldest waiting message of every thread that no process is running a run in.

        >>> [i.address.chat_history_id for i in storage.inbox.orphaned()]
        ['slack:T1:C1:170.1']
        """
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE id IN (SELECT MIN(id) FROM inbox GROUP BY chat_history_id) "
                f"AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.chat_history_id = inbox.chat_history_id "
                f"AND runs.status IN {_WORKING}) ORDER BY id LIMIT ?",
                [limit],
            ).fetchall()
        return [_inbox_item(row) for row in rows]


_OUTBOX_COLUMNS = (
    "key, chat_history_id, platform, workspace, channel, thread, text, created_at, attempts, next_attempt_at, "
    "claimed_by, delivered_at"
)


def _outbox_message(row: Any) -> OutboxMessage:
    return outbox_message(row, SQLITE_TIMES)


class SQLiteOutbox:
    """Messages owed to threads (see :class:`~storage.protocols.Outbox`)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def add(
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

        >>> storage.outbox.add("answer:run-1", address, "Deleted a.txt.", claimed_by="host-1-a", claim_until=soon)
        True
        """
        if usage is not None and finishes_run is None:
            raise ValueError("usage is recorded for the run an answer finishes (finishes_run)")
        at = epoch(now)
        claimed = None if claimed_by is None else epoch(claim_until)
        with self.connector.writing() as db:
            if fence is not None and not fence_holds(db, fence):
                return False
            if finishes_run is not None:
                counts = usage_columns(usage)
                db.execute(
                    "UPDATE runs SET status = 'finished', owner = NULL, lease_expires_at = NULL, updated_at = ?"
                    f"{''.join(f', {name} = ?' for name in counts)} WHERE run_id = ? AND status IN {_WORKING}",
                    [epoch(None), *counts.values(), finishes_run],
                )
            return (
                db.execute(
                    "INSERT INTO outbox (key, chat_history_id, platform, workspace, channel, thread, text, created_at, "
                    "attempts, next_attempt_at, claimed_by, claimed_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?) "
                    "ON CONFLICT (key) DO NOTHING",
                    [
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
                ).rowcount
                == 1
            )

    def claim(self, key: str, owner: str, until: Instant, now: Instant = None) -> bool:
        """Claim an undelivered message whose claim is free or expired; ``True`` for one caller.

        >>> storage.outbox.claim("answer:run-1", "host-2-b", later + timedelta(seconds=30), now=later)
        True
        """
        with self.connector.writing() as db:
            return (
                db.execute(
                    "UPDATE outbox SET claimed_by = ?, claimed_until = ? WHERE key = ? AND delivered_at IS NULL "
                    "AND (claimed_until IS NULL OR claimed_until < ?)",
                    [owner, epoch(until), key, epoch(now)],
                ).rowcount
                == 1
            )

    def delivered(self, key: str, now: Instant = None) -> bool:
        """Mark the message delivered.

        >>> storage.outbox.delivered("answer:run-1")
        True
        """
        with self.connector.writing() as db:
            return (
                db.execute(
                    "UPDATE outbox SET delivered_at = ?, claimed_until = NULL WHERE key = ? AND delivered_at IS NULL",
                    [epoch(now), key],
                ).rowcount
                == 1
            )

    def retry_later(self, key: str, at: Instant) -> bool:
        """Release the claim after a failed post; the message is due again at ``at``.

        >>> storage.outbox.retry_later("answer:run-1", later + timedelta(seconds=30))
        True
        """
        with self.connector.writing() as db:
            return (
                db.execute(
                    "UPDATE outbox SET claimed_by = NULL, claimed_until = NULL, attempts = attempts + 1, "
                    "next_attempt_at = ? WHERE key = ? AND delivered_at IS NULL",
                    [epoch(at), key],
                ).rowcount
                == 1
            )

    def due(self, platforms: Sequence[str], now: Instant = None, limit: int = 100) -> list[OutboxMessage]:
        """Undelivered, unclaimed (or claim expired) messages of ``platforms`` due by ``now``, oldest first.

        >>> [m.key for m in storage.outbox.due(["slack"])]
        ['answer:run-1']
        """
        names = list(platforms)
        if not names:
            return []
        at = epoch(now)
        placeholders = ", ".join("?" for _ in names)
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE delivered_at IS NULL AND next_attempt_at <= ? "
                f"AND (claimed_until IS NULL OR claimed_until < ?) AND platform IN ({placeholders}) "
                "ORDER BY created_at, rowid LIMIT ?",
                [at, at, *names, limit],
            ).fetchall()
        return [_outbox_message(row) for row in rows]

    def undelivered(self, chat_history_id: str | None = None) -> list[OutboxMessage]:
        """Every message not yet delivered (of one thread, if given), oldest first.

        >>> storage.outbox.undelivered()
        []
        """
        sql = f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE delivered_at IS NULL"
        params: list[Any] = []
        if chat_history_id is not None:
            sql += " AND chat_history_id = ?"
            params.append(chat_history_id)
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY created_at, rowid", params).fetchall()
        return [_outbox_message(row) for row in rows]
