"""The schema, as an ordered list of forward migrations run when the database is opened.

Migration N brings a database from version N-1 to N. They run in one ``BEGIN IMMEDIATE``
transaction, so processes opening the same file at once apply each migration exactly once, and a
failed upgrade leaves the file as it was. Never edit a released migration: append a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sqlite_utils import Database

from bot import jsonio
from storage.approval_rows import CLOSED_RUN_APPROVALS_REASON
from storage.audit_chain import GENESIS, entry_hash
from storage.errors import StorageError, UnknownSchemaVersion
from storage.message_rows import compact, id_key
from storage.sqlite.bm25 import stems

Migration = Callable[[Database], None]


def _initial_schema(db: Database) -> None:
    """Version 1: history, runs, approvals, ledger, policies, audit, event dedupe, conversations."""
    db.table("messages").create(
        {
            "id": int,
            "chat_history_id": str,
            "seq": int,
            "message_id": str,
            "role": str,
            "data": str,
            "created_at": float,
        },
        pk="id",
        not_null=["chat_history_id", "seq", "message_id", "role", "data", "created_at"],
    )
    # The last k messages of a thread are one descending range scan of this index.
    db.table("messages").create_index(["chat_history_id", "seq"], index_name="messages_thread_seq", unique=True)
    db.table("messages").create_index(["chat_history_id", "message_id"], index_name="messages_thread_id", unique=True)

    db.table("runs").create(
        {
            "run_id": str,
            "chat_history_id": str,
            "platform": str,
            "workspace": str,
            "channel": str,
            "thread": str,
            "requester": str,
            "status": str,
            "step": int,
            "snapshot_json": str,
            "error": str,
            "created_at": float,
            "updated_at": float,
        },
        pk="run_id",
        not_null=["chat_history_id", "platform", "status", "step", "created_at", "updated_at"],
        defaults={"step": 0},
    )
    db.table("runs").create_index(["chat_history_id", "status"], index_name="runs_thread_status")
    db.table("runs").create_index(["status", "updated_at"], index_name="runs_status")

    db.table("approvals").create(
        {
            "approval_id": str,
            "run_id": str,
            "step": int,
            "tool_call_id": str,
            "tool_name": str,
            "arguments_json": str,
            "args_digest": str,
            "requester": str,
            "mode": str,
            "approvers_json": str,
            "quorum": int,
            "four_eyes": int,
            "platform": str,
            "chat_history_id": str,
            "status": str,
            "decided_by": str,
            "decided_at": float,
            "feedback": str,
            "final_arguments_json": str,
            "created_at": float,
            "expires_at": float,
        },
        pk="approval_id",
        foreign_keys=[("run_id", "runs", "run_id")],
        not_null=[
            "run_id",
            "step",
            "tool_call_id",
            "tool_name",
            "arguments_json",
            "args_digest",
            "requester",
            "mode",
            "approvers_json",
            "quorum",
            "four_eyes",
            "platform",
            "chat_history_id",
            "status",
            "created_at",
            "expires_at",
        ],
    )
    # due_for_expiry() and decide()'s expiry check read this index.
    db.table("approvals").create_index(["status", "expires_at"], index_name="approvals_status_expiry")
    db.table("approvals").create_index(["run_id", "step"], index_name="approvals_run_step")
    db.table("approvals").create_index(["chat_history_id", "status"], index_name="approvals_thread_status")
    # At most one pending approval per tool call of a run.
    db.execute(
        "CREATE UNIQUE INDEX approvals_one_pending_per_call ON approvals (run_id, tool_call_id) "
        "WHERE status = 'pending'"
    )

    db.table("ledger").create(
        {
            "tool_call_id": str,
            "run_id": str,
            "tool_name": str,
            "args_digest": str,
            "status": str,
            "result": str,
            "started_at": float,
            "finished_at": float,
        },
        pk="tool_call_id",
        not_null=["args_digest", "status", "started_at"],
    )
    db.table("ledger").create_index(["status", "run_id"], index_name="ledger_status_run")

    db.table("policy_rules").create(
        {
            "scope": str,
            "tool_key": str,
            "mode": str,
            "approvers_json": str,
            "quorum": int,
            "four_eyes": int,
            "ttl_seconds": int,
            "updated_by": str,
            "updated_at": float,
        },
        pk=("scope", "tool_key"),
        not_null=["updated_by", "updated_at"],
    )
    db.table("tool_groups").create({"group_name": str, "tool_name": str}, pk=("group_name", "tool_name"))
    db.table("tool_groups").create_index(["tool_name"], index_name="tool_groups_tool")
    db.table("confirmations").create(
        {"scope": str, "tool_name": str, "args_digest": str, "confirmed_by": str, "confirmed_at": float},
        pk=("scope", "tool_name", "args_digest"),
        not_null=["confirmed_by", "confirmed_at"],
    )

    db.table("audit").create(
        {"id": int, "at": float, "actor": str, "action": str, "subject": str, "details_json": str},
        pk="id",
        not_null=["at", "actor", "action", "subject", "details_json"],
    )
    db.table("audit").create_index(["subject", "id"], index_name="audit_subject")
    # Append-only, enforced by the database itself and not only by the absence of an update method.
    db.execute(
        "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit "
        "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
    )
    db.execute(
        "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit "
        "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
    )

    db.table("events").create({"event_key": str, "seen_at": float}, pk="event_key", not_null=["seen_at"])
    db.table("events").create_index(["seen_at"], index_name="events_seen_at")

    db.table("conversations").create(
        {"key": str, "data_json": str, "updated_at": float}, pk="key", not_null=["data_json", "updated_at"]
    )


def _votes_and_message_refs(db: Database) -> None:
    """Version 2: per-approver votes for quorum, where each approval was rendered, audit by actor."""
    db.table("votes").create(
        {"approval_id": str, "voter": str, "vote": str, "voted_at": float},
        pk=("approval_id", "voter"),
        foreign_keys=[("approval_id", "approvals", "approval_id")],
        not_null=["vote", "voted_at"],
    )
    db.table("approvals").add_column("message_ref_json", str)
    db.table("audit").create_index(["actor", "id"], index_name="audit_actor")


def _approval_places(db: Database) -> None:
    """Version 3: every place (conversation, App Home, DM) an approval was shown in; clicks come only from those.

    Approvals still pending at the upgrade were shown in their own thread: that place is filled in, so
    their buttons keep working.
    """
    db.table("approval_places").create(
        {"approval_id": str, "place": str, "shown_at": float},
        pk=("approval_id", "place"),
        foreign_keys=[("approval_id", "approvals", "approval_id")],
        not_null=["shown_at"],
    )
    db.execute(
        "INSERT INTO approval_places (approval_id, place, shown_at) "
        "SELECT a.approval_id, a.platform || ':' || r.channel, a.created_at "
        "FROM approvals a JOIN runs r ON r.run_id = a.run_id WHERE a.status = 'pending'"
    )


def _run_lifecycle(db: Database) -> None:
    """Version 4: run owners and leases, one active run per thread, the thread inbox and the outbox."""
    db.table("runs").add_column("owner", str)
    db.table("runs").add_column("lease_expires_at", float)
    db.table("runs").add_column("recoveries", int, not_null_default=0)
    # Before the database enforced it, two processes could both open a run in one thread: keep the newest
    # active run of each thread and close the older ones, so that the unique index below can be built.
    db.execute(
        "UPDATE runs SET status = 'failed', error = 'closed at upgrade: a newer run was active in the thread' "
        "WHERE status IN ('running', 'paused', 'resuming') AND rowid NOT IN ("
        "SELECT rowid FROM runs AS newest WHERE newest.chat_history_id = runs.chat_history_id "
        "AND newest.status IN ('running', 'paused', 'resuming') "
        "ORDER BY newest.created_at DESC, newest.rowid DESC LIMIT 1)"
    )
    db.execute(
        "CREATE UNIQUE INDEX runs_one_active_per_thread ON runs (chat_history_id) "
        "WHERE status IN ('running', 'paused', 'resuming')"
    )
    # The recovery scan: active runs by lease expiry.
    db.execute("CREATE INDEX runs_lease ON runs (status, lease_expires_at)")

    db.table("inbox").create(
        {
            "id": int,
            "chat_history_id": str,
            "platform": str,
            "workspace": str,
            "channel": str,
            "thread": str,
            "requester": str,
            "message_json": str,
            "message_ref": str,
            "received_at": float,
        },
        pk="id",
        not_null=[
            "chat_history_id",
            "platform",
            "workspace",
            "channel",
            "thread",
            "requester",
            "message_json",
            "received_at",
        ],
    )
    # AUTOINCREMENT-free rowids only grow while rows exist; order by id within a thread is arrival order.
    db.table("inbox").create_index(["chat_history_id", "id"], index_name="inbox_thread")

    db.table("outbox").create(
        {
            "key": str,
            "chat_history_id": str,
            "platform": str,
            "workspace": str,
            "channel": str,
            "thread": str,
            "text": str,
            "created_at": float,
            "attempts": int,
            "next_attempt_at": float,
            "claimed_by": str,
            "claimed_until": float,
            "delivered_at": float,
        },
        pk="key",
        not_null=[
            "chat_history_id",
            "platform",
            "workspace",
            "channel",
            "thread",
            "text",
            "created_at",
            "attempts",
            "next_attempt_at",
        ],
        defaults={"attempts": 0},
    )
    db.execute("CREATE INDEX outbox_undelivered ON outbox (next_attempt_at) WHERE delivered_at IS NULL")


def _approval_reviews(db: Database) -> None:
    """Version 5: reviews after acting: an approval's kind, the result it holds back, and an edited result."""
    db.table("approvals").add_column("kind", str, not_null_default="approval")
    db.table("approvals").add_column("result", str)
    db.table("approvals").add_column("final_result", str)


def _close_approvals_of_ended_runs(db: Database) -> None:
    """Version 6: approvals still pending on a run that ended are cancelled, as the engine does when it closes a run.

    Version 4 closed the older of two active runs in one thread but left that run's approvals pending:
    their buttons could still be clicked, the approval listed as waiting, though nothing could ever resume.
    """
    db.execute(
        "UPDATE approvals SET status = 'cancelled', decided_by = 'countersign', decided_at = ?, feedback = ? "
        "WHERE status = 'pending' AND run_id IN (SELECT run_id FROM runs WHERE status IN ('finished', 'failed', "
        "'expired'))",
        [time.time(), CLOSED_RUN_APPROVALS_REASON],
    )


def _team_settings(db: Database) -> None:
    """Version 7: named approver groups, who may ask (access rules per scope), the direct-message switch, and policy
    modes with conditions on the arguments."""
    db.execute(
        "CREATE TABLE approver_groups (name TEXT PRIMARY KEY, members_json TEXT NOT NULL, "
        "updated_by TEXT NOT NULL, updated_at FLOAT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE access_rules (scope TEXT NOT NULL, principal TEXT NOT NULL, updated_by TEXT NOT NULL, "
        "updated_at FLOAT NOT NULL, PRIMARY KEY (scope, principal))"
    )
    db.execute(
        "CREATE TABLE direct_message_settings (scope TEXT PRIMARY KEY, allowed INTEGER NOT NULL, "
        "updated_by TEXT NOT NULL, updated_at FLOAT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE conditional_rules (scope TEXT NOT NULL, tool_name TEXT NOT NULL, condition TEXT NOT NULL, "
        "mode TEXT NOT NULL, updated_by TEXT NOT NULL, updated_at FLOAT NOT NULL, "
        "PRIMARY KEY (scope, tool_name, condition))"
    )


def _memories(db: Database) -> None:
    """Version 8: long-term memories, with an FTS5 index (BM25 ranking) kept in step by triggers."""
    db.execute(
        "CREATE TABLE memories (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, "
        "user_id TEXT, run_id TEXT, agent_id TEXT, metadata TEXT NOT NULL, created_at REAL NOT NULL, "
        "scope_tokens TEXT NOT NULL)"
    )
    # A person's memories (and a run's scratch ones) are found by scope before or after the text match.
    db.execute("CREATE INDEX memories_user ON memories (user_id, run_id)")
    # Partial: most memories belong to no run, and "run_id IS NULL" must not pick this index over a narrower one.
    db.execute("CREATE INDEX memories_run ON memories (run_id) WHERE run_id IS NOT NULL")
    # A channel's shared memories, listed and cleared by channel; the expression is the one the filters write
    # for meta.channel.
    db.execute("""CREATE INDEX memories_channel ON memories (json_extract(metadata, '$."channel"'))""")
    # External content: the text is stored once, in memories; the index holds only the tokens. porter:
    # "deploys" finds "deploy". scope_tokens (one token per scope value and string metadata value, see
    # storage.memory_rows) lets the text match itself keep to a person's or a channel's memories: FTS5
    # intersects a short scope list with the words' lists instead of ranking every memory that has a word.
    db.execute(
        "CREATE VIRTUAL TABLE memories_fts USING fts5(text, scope_tokens, content='memories', content_rowid='seq', "
        "tokenize='porter unicode61')"
    )
    db.execute(
        "CREATE TRIGGER memories_fts_insert AFTER INSERT ON memories BEGIN "
        "INSERT INTO memories_fts (rowid, text, scope_tokens) VALUES (new.seq, new.text, new.scope_tokens); END"
    )
    db.execute(
        "CREATE TRIGGER memories_fts_delete AFTER DELETE ON memories BEGIN "
        "INSERT INTO memories_fts (memories_fts, rowid, text, scope_tokens) "
        "VALUES ('delete', old.seq, old.text, old.scope_tokens); END"
    )


def _run_token_usage(db: Database) -> None:
    """Version 9: the tokens each run used (summed by the ``usage`` command); runs may be stopped from chat."""
    for column in ("prompt_tokens", "completion_tokens", "total_tokens"):
        db.table("runs").add_column(column, int, not_null_default=0)
    db.table("runs").add_column("stop_requested_by", str)
    # The usage command sums a workspace's runs since a day.
    db.execute("CREATE INDEX runs_usage ON runs (platform, workspace, created_at)")


def _audit_chain(db: Database) -> None:
    """Version 10: the audit log becomes a hash chain (see :mod:`storage.audit_chain`); old entries are chained now.

    ``audit_head`` holds the newest entry's id and hash (a deleted tail shows); ``audit_anchor`` records each
    pruning (the last pruned entry's id and hash), and deletes are allowed only up to the newest anchor.
    """
    db.execute("DROP TRIGGER audit_no_update")
    db.execute("DROP TRIGGER audit_no_delete")
    db.table("audit").add_column("prev_hash", str)
    db.table("audit").add_column("hash", str)
    previous = GENESIS
    last_id = 0
    rows = db.execute("SELECT id, at, actor, action, subject, details_json FROM audit ORDER BY id").fetchall()
    for entry_id, at, actor, action, subject, details in rows:
        digest = entry_hash(previous, entry_id, repr(float(at)), actor, action, subject, details)
        db.execute("UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?", [previous, digest, entry_id])
        previous, last_id = digest, entry_id
    db.execute(
        "CREATE TABLE audit_head (only_row INTEGER PRIMARY KEY CHECK (only_row = 1), last_id INTEGER NOT NULL, "
        "last_hash TEXT NOT NULL)"
    )
    db.execute("INSERT INTO audit_head (only_row, last_id, last_hash) VALUES (1, ?, ?)", [last_id, previous])
    db.execute(
        "CREATE TABLE audit_anchor (pruned_through INTEGER PRIMARY KEY, anchor_hash TEXT NOT NULL, "
        "pruned_at FLOAT NOT NULL)"
    )
    db.execute(
        "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit "
        "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
    )
    # Only entries at or before the newest anchor may go: pruning writes the anchor first.
    db.execute(
        "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit "
        "WHEN OLD.id > (SELECT COALESCE(MAX(pruned_through), 0) FROM audit_anchor) "
        "BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END"
    )
    db.execute(
        "CREATE TRIGGER audit_anchor_no_change BEFORE UPDATE ON audit_anchor "
        "BEGIN SELECT RAISE(ABORT, 'audit anchors are append-only'); END"
    )


def _approval_reminders(db: Database) -> None:
    """Version 11: when an approval's approvers were reminded (once, for any TTL; the event dedupe is pruned)."""
    db.table("approvals").add_column("reminded_at", float)


def _messages_in_thread_order(db: Database) -> None:
    """Version 12: messages kept in thread order, keyed by (thread, seq), without a rowid or its own index.

    Real threads interleave, so a rowid table scattered each thread's rows over the file and every
    ``last_k`` read touched a page per message; a ``WITHOUT ROWID`` table keyed by ``(chat_history_id,
    seq)`` keeps a thread's newest messages side by side, and the key replaces the ``id`` column and the
    ``messages_thread_seq`` index (about a sixth of the database at 1M messages, bench/storage.py).
    """
    db.execute(
        "CREATE TABLE messages_v11 (chat_history_id TEXT NOT NULL, seq INTEGER NOT NULL, message_id TEXT NOT NULL, "
        "role TEXT NOT NULL, data TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (chat_history_id, seq)) "
        "WITHOUT ROWID"
    )
    db.execute(
        "INSERT INTO messages_v11 (chat_history_id, seq, message_id, role, data, created_at) "
        "SELECT chat_history_id, seq, message_id, role, data, created_at FROM messages ORDER BY chat_history_id, seq"
    )
    db.execute("DROP TABLE messages")
    db.execute("ALTER TABLE messages_v11 RENAME TO messages")
    db.execute("CREATE UNIQUE INDEX messages_thread_id ON messages (chat_history_id, message_id)")


def _memory_stems(db: Database) -> None:
    """Version 13: each memory's stemmed words, and an FTS5 index kept in fewer segments, for a fast scoped search.

    ``terms`` holds :func:`storage.sqlite.bm25.stems` of the text, computed once when a memory is written, so a
    search counts the query's stems in its candidates instead of tokenising and stemming every candidate.
    FTS5 appends a segment per write and merges them ``automerge`` at a time (4 by default): at 100,000
    memories that left 8-10 segments, and a search's text match seeks every word in every segment (0.4-0.6
    ms of a search). Merging two at a time keeps about 5 (0.15-0.2 ms); ``optimize`` merges what is there now.
    """
    db.table("memories").add_column("terms", str, not_null_default="")
    last = 0  # in batches, so a large table is never held in memory at once
    batch = "SELECT seq, text FROM memories WHERE seq > ? ORDER BY seq LIMIT 10000"
    while rows := db.execute(batch, [last]).fetchall():
        db.conn.executemany("UPDATE memories SET terms = ? WHERE seq = ?", [(stems(text), seq) for seq, text in rows])
        last = rows[-1][0]
    db.execute("INSERT INTO memories_fts (memories_fts, rank) VALUES ('automerge', 2)")
    db.execute("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')")


def _compact_message_row(row: tuple[int, int, str, str, str, float]) -> tuple[int, int, str | bytes, str, str, float]:
    """A schema-13 row as schema 14 stores it; JSON that is not a message object is kept as it was."""
    thread, seq, message_id, role, data, created_at = row
    try:
        parsed = jsonio.loads(data)
    except (TypeError, ValueError):
        parsed = None  # still refused as corrupt when read, as before
    if isinstance(parsed, dict):
        data = jsonio.dumps(compact(parsed, role, message_id))
    return thread, seq, id_key(message_id), role, data, created_at


def _messages_by_thread_number(db: Database) -> None:
    """Version 14: threads get an integer id (table ``threads``), and a message row keeps only what it must.

    The text key was stored in every message row and again in every entry of the ``(thread, message id)``
    index; an integer takes one to three bytes. The body drops what the row already holds (role, id) and
    fields at their defaults, and new-style ids are stored as 16 bytes (see :mod:`storage.message_rows`).
    At 1M messages in 10k threads the file shrinks from 445 MB to about 200 MB (bench/storage.py).
    """
    # No AUTOINCREMENT: a deleted thread's id may be given again; writers check the key with the id.
    db.execute("CREATE TABLE threads (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE)")
    db.execute(
        "CREATE TABLE messages_new (thread_id INTEGER NOT NULL, seq INTEGER NOT NULL, message_id BLOB NOT NULL, "
        "role TEXT NOT NULL, data TEXT NOT NULL, created_at FLOAT NOT NULL, PRIMARY KEY (thread_id, seq)) "
        "WITHOUT ROWID"
    )
    # In key order, so that the ids and the rows below come in the new table's order.
    db.execute("INSERT INTO threads (key) SELECT DISTINCT chat_history_id FROM messages ORDER BY chat_history_id")
    # Moved in batches, each deleted from the old table as it is copied: the pages it frees take the new
    # rows, so the file does not grow by the new table's size on the way (``countersign db vacuum`` then
    # gives the freed half back to the disk).
    while batch := db.execute(
        "SELECT t.id, m.seq, m.message_id, m.role, m.data, m.created_at, m.chat_history_id FROM messages m "
        "JOIN threads t ON t.key = m.chat_history_id ORDER BY m.chat_history_id, m.seq LIMIT 10000"
    ).fetchall():
        db.conn.executemany(
            "INSERT INTO messages_new (thread_id, seq, message_id, role, data, created_at) VALUES (?, ?, ?, ?, ?, ?)",
            [_compact_message_row(row[:6]) for row in batch],
        )
        last_key, last_seq = batch[-1][6], batch[-1][1]
        db.execute(
            "DELETE FROM messages WHERE chat_history_id < ? OR (chat_history_id = ? AND seq <= ?)",
            [last_key, last_key, last_seq],
        )
    db.execute("DROP TABLE messages")
    db.execute("ALTER TABLE messages_new RENAME TO messages")
    db.execute("CREATE UNIQUE INDEX messages_thread_id ON messages (thread_id, message_id)")


def _audit_signatures(db: Database) -> None:
    """The audit key's signatures (:func:`storage.audit_chain.sign`): of each entry, each anchor and the head.

    ``kind`` is ``entry``, ``anchor`` or ``head`` and ``ref`` the entry id (the head's row has ``ref`` 0). A
    signature is only as good as the key, which is never stored here.
    """
    db.execute(
        "CREATE TABLE audit_signature (kind TEXT NOT NULL, ref INTEGER NOT NULL, sig TEXT NOT NULL, "
        "PRIMARY KEY (kind, ref))"
    )


def _approval_provenance(db: Database) -> None:
    """Which arguments of an approval came from untrusted text, and from where (issue 31), as JSON."""
    db.table("approvals").add_column("provenance_json", str)


def _tool_settings(db: Database) -> None:
    """Per-tool switches admins set, e.g. ``justification`` = ``required`` (issue 31)."""
    db.execute(
        "CREATE TABLE tool_settings (tool_name TEXT NOT NULL, setting TEXT NOT NULL, value TEXT NOT NULL, "
        "updated_by TEXT NOT NULL, updated_at FLOAT NOT NULL, PRIMARY KEY (tool_name, setting))"
    )


def _approval_preview(db: Database) -> None:
    """What the call would do, computed when it paused, and its digest (issue 30), as JSON."""
    db.table("approvals").add_column("preview_json", str)


def _approval_request_reason(db: Database) -> None:
    """The reason the requester gave in the request ("… because <reason>"; issue 31), as text."""
    db.table("approvals").add_column("request_reason", str)


MIGRATIONS: list[Migration] = [
    _initial_schema,
    _votes_and_message_refs,
    _approval_places,
    _run_lifecycle,
    _approval_reviews,
    _close_approvals_of_ended_runs,
    _team_settings,
    _memories,
    _run_token_usage,
    _audit_chain,
    _approval_reminders,
    _messages_in_thread_order,
    _memory_stems,
    _messages_by_thread_number,
    _audit_signatures,
    _approval_provenance,
    _tool_settings,
    _approval_preview,
    _approval_request_reason,
]
"""Ordered: ``MIGRATIONS[n - 1]`` produces schema version ``n``."""

LATEST_VERSION = len(MIGRATIONS)


def schema_version(db: Database) -> int:
    """The database's schema version (0 for a new, empty file).

    >>> schema_version(Database(memory=True))
    0
    """
    if not db["schema_version"].exists():
        return 0
    row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(db: Database, target: int | None = None, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring ``db`` forward to ``target`` (default: the latest version) and return its version.

    >>> migrate(Database(memory=True))
    3

    Raises :class:`UnknownSchemaVersion` for a database written by a newer countersign, before
    changing anything. ``migrations`` defaults to :data:`MIGRATIONS`.
    """
    latest = len(migrations)
    target = latest if target is None else target
    if not 0 <= target <= latest:
        raise ValueError(f"target must be between 0 and {latest}")
    if db.conn.in_transaction:
        raise StorageError("migrate() must not run inside an open transaction")
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at FLOAT NOT NULL)")
        current = schema_version(db)
        if current > latest:
            raise UnknownSchemaVersion(current, latest)
        for version in range(current + 1, target + 1):
            migrations[version - 1](db)
            db.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", [version, time.time()])
        db.execute("COMMIT")
    except BaseException:
        if db.conn.in_transaction:
            db.execute("ROLLBACK")
        raise
    return max(current, target)
