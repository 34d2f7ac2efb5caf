"""The PostgreSQL schema, as its own ordered list of forward migrations.

Migration N brings a schema from version N-1 to N; ``schema_version`` records each one applied.
:func:`migrate` runs them in one transaction under a transaction-scoped advisory lock keyed by the
schema, so replicas starting together apply each migration exactly once, and a failed upgrade leaves
the schema as it was (PostgreSQL DDL is transactional). Never edit a released migration: append one.

Times are ``timestamptz``; structured values are ``json`` (kept as written, key order included) except
``approvers``, which is ``jsonb`` because :meth:`pending` looks inside it. Tables whose rows are listed
"oldest first" carry an identity ``seq`` that breaks ties between equal times, as SQLite's rowid does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, LiteralString

import psycopg

from storage.approval_rows import CLOSED_RUN_APPROVALS_REASON
from storage.errors import StorageError, UnknownSchemaVersion

Migration = Sequence[LiteralString]
"""The statements of one migration, run in order."""

_INITIAL_SCHEMA: Migration = (
    """
    CREATE TABLE messages (
        chat_history_id text NOT NULL,
        seq bigint NOT NULL,
        message_id text NOT NULL,
        role text NOT NULL,
        data json NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (chat_history_id, seq),
        UNIQUE (chat_history_id, message_id)
    )
    """,
    """
    CREATE TABLE runs (
        run_id text PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        chat_history_id text NOT NULL,
        platform text NOT NULL,
        workspace text,
        channel text,
        thread text,
        requester text,
        status text NOT NULL CHECK (status IN ('running', 'paused', 'resuming', 'finished', 'failed', 'expired')),
        step integer NOT NULL DEFAULT 0,
        snapshot_json json,
        error json,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    )
    """,
    "CREATE INDEX runs_thread_status ON runs (chat_history_id, status)",
    "CREATE INDEX runs_status ON runs (status, created_at, seq)",
    """
    CREATE TABLE approvals (
        approval_id text PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        run_id text NOT NULL REFERENCES runs (run_id),
        step integer NOT NULL,
        tool_call_id text NOT NULL,
        tool_name text NOT NULL,
        arguments_json json NOT NULL,
        args_digest text NOT NULL,
        requester text NOT NULL,
        mode text NOT NULL,
        approvers jsonb NOT NULL,
        quorum integer NOT NULL,
        four_eyes boolean NOT NULL,
        platform text NOT NULL,
        chat_history_id text NOT NULL,
        message_ref_json json,
        status text NOT NULL CHECK (
            status IN ('pending', 'approved', 'rejected', 'modified', 'expired', 'superseded', 'cancelled')
        ),
        decided_by text,
        decided_at timestamptz,
        feedback json,
        final_arguments_json json,
        created_at timestamptz NOT NULL,
        expires_at timestamptz NOT NULL
    )
    """,
    # due_for_expiry() reads this index; decide()'s expiry check is on the primary-key row.
    "CREATE INDEX approvals_status_expiry ON approvals (status, expires_at)",
    "CREATE INDEX approvals_run_step ON approvals (run_id, step, seq)",
    "CREATE INDEX approvals_thread_status ON approvals (chat_history_id, status)",
    # At most one pending approval per tool call of a run.
    "CREATE UNIQUE INDEX approvals_one_pending_per_call ON approvals (run_id, tool_call_id) WHERE status = 'pending'",
    """
    CREATE TABLE votes (
        approval_id text NOT NULL REFERENCES approvals (approval_id),
        voter text NOT NULL,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        vote text NOT NULL,
        voted_at timestamptz NOT NULL,
        PRIMARY KEY (approval_id, voter)
    )
    """,
    """
    CREATE TABLE ledger (
        tool_call_id text PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        run_id text,
        tool_name text,
        args_digest text NOT NULL,
        status text NOT NULL CHECK (status IN ('executing', 'done', 'failed')),
        result json,
        started_at timestamptz NOT NULL,
        finished_at timestamptz
    )
    """,
    "CREATE INDEX ledger_status_run ON ledger (status, run_id)",
    """
    CREATE TABLE policy_rules (
        scope text NOT NULL,
        tool_key text NOT NULL,
        mode text,
        approvers jsonb,
        quorum integer,
        four_eyes boolean,
        ttl_seconds integer,
        updated_by text NOT NULL,
        updated_at timestamptz NOT NULL,
        PRIMARY KEY (scope, tool_key)
    )
    """,
    """
    CREATE TABLE tool_groups (
        group_name text NOT NULL,
        tool_name text NOT NULL,
        PRIMARY KEY (group_name, tool_name)
    )
    """,
    "CREATE INDEX tool_groups_tool ON tool_groups (tool_name)",
    """
    CREATE TABLE confirmations (
        scope text NOT NULL,
        tool_name text NOT NULL,
        args_digest text NOT NULL,
        confirmed_by text NOT NULL,
        confirmed_at timestamptz NOT NULL,
        PRIMARY KEY (scope, tool_name, args_digest)
    )
    """,
    """
    CREATE TABLE audit (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at timestamptz NOT NULL,
        actor text NOT NULL,
        action text NOT NULL,
        subject text NOT NULL,
        details_json json NOT NULL
    )
    """,
    "CREATE INDEX audit_subject ON audit (subject, id)",
    "CREATE INDEX audit_actor ON audit (actor, id)",
    # Append-only, enforced by the database itself and not only by the absence of an update method.
    """
    CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the audit log is append-only';
    END
    $$
    """,
    "CREATE TRIGGER audit_no_update_or_delete BEFORE UPDATE OR DELETE ON audit "
    "FOR EACH ROW EXECUTE FUNCTION audit_append_only()",
    "CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only()",
    "CREATE TABLE events (event_key text PRIMARY KEY, seen_at timestamptz NOT NULL)",
    "CREATE INDEX events_seen_at ON events (seen_at)",
    """
    CREATE TABLE conversations (
        key text PRIMARY KEY,
        data_json json NOT NULL,
        updated_at timestamptz NOT NULL
    )
    """,
)

_APPROVAL_PLACES: Migration = (
    # Every place (conversation, App Home, DM) an approval was shown in; clicks come only from those.
    """
    CREATE TABLE approval_places (
        approval_id text NOT NULL REFERENCES approvals (approval_id),
        place text NOT NULL,
        shown_at timestamptz NOT NULL,
        PRIMARY KEY (approval_id, place)
    )
    """,
    # Approvals still pending at the upgrade were shown in their own thread: their buttons keep working.
    "INSERT INTO approval_places (approval_id, place, shown_at) "
    "SELECT a.approval_id, a.platform || ':' || r.channel, a.created_at "
    "FROM approvals a JOIN runs r ON r.run_id = a.run_id WHERE a.status = 'pending' AND r.channel IS NOT NULL",
)

_ACTIVE = "('running', 'paused', 'resuming')"

_RUN_LIFECYCLE: Migration = (
    "ALTER TABLE runs ADD COLUMN owner text, ADD COLUMN lease_expires_at timestamptz, "
    "ADD COLUMN recoveries integer NOT NULL DEFAULT 0",
    # Before the database enforced it, two replicas could both open a run in one thread: keep the newest
    # active run of each thread and close the older ones, so that the unique index below can be built.
    "UPDATE runs SET status = 'failed', "
    "error = to_json('closed at upgrade: a newer run was active in the thread'::text) "
    f"WHERE status IN {_ACTIVE} AND seq <> (SELECT newest.seq FROM runs AS newest "
    f"WHERE newest.chat_history_id = runs.chat_history_id AND newest.status IN {_ACTIVE} "
    "ORDER BY newest.created_at DESC, newest.seq DESC LIMIT 1)",
    # One active run per thread, whichever replica opens it: a second INSERT is a unique violation.
    f"CREATE UNIQUE INDEX runs_one_active_per_thread ON runs (chat_history_id) WHERE status IN {_ACTIVE}",
    # The recovery scan: working runs by lease expiry.
    "CREATE INDEX runs_lease ON runs (status, lease_expires_at)",
    """
    CREATE TABLE inbox (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        chat_history_id text NOT NULL,
        platform text NOT NULL,
        workspace text NOT NULL,
        channel text NOT NULL,
        thread text NOT NULL,
        requester text NOT NULL,
        message_json json NOT NULL,
        message_ref text,
        received_at timestamptz NOT NULL
    )
    """,
    # Within a thread, id order is arrival order (enqueue and start_next serialise on the thread).
    "CREATE INDEX inbox_thread ON inbox (chat_history_id, id)",
    """
    CREATE TABLE outbox (
        key text PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        chat_history_id text NOT NULL,
        platform text NOT NULL,
        workspace text NOT NULL,
        channel text NOT NULL,
        thread text NOT NULL,
        text text NOT NULL,
        created_at timestamptz NOT NULL,
        attempts integer NOT NULL DEFAULT 0,
        next_attempt_at timestamptz NOT NULL,
        claimed_by text,
        claimed_until timestamptz,
        delivered_at timestamptz
    )
    """,
    "CREATE INDEX outbox_undelivered ON outbox (next_attempt_at) WHERE delivered_at IS NULL",
)

_APPROVAL_REVIEWS: Migration = (
    # Version 4: reviews after acting: an approval's kind, the result it holds back, and an edited result.
    "ALTER TABLE approvals ADD COLUMN kind text NOT NULL DEFAULT 'approval' CHECK (kind IN ('approval', 'review'))",
    "ALTER TABLE approvals ADD COLUMN result text",
    "ALTER TABLE approvals ADD COLUMN final_result text",
)

_CLOSE_APPROVALS_OF_ENDED_RUNS: Migration = (
    # Version 5. Version 3 closed the older of two active runs in one thread but left that run's approvals pending:
    # cancel every approval still pending on a run that ended, as the engine does when it closes a run.
    "UPDATE approvals SET status = 'cancelled', decided_by = 'countersign', decided_at = now(), "
    f"feedback = to_json('{CLOSED_RUN_APPROVALS_REASON}'::text) WHERE status = 'pending' AND run_id IN "
    "(SELECT run_id FROM runs WHERE status IN ('finished', 'failed', 'expired'))",
)

_RUN_TOKEN_USAGE: Migration = (
    # Version 8: the tokens each run used (summed by the usage command).
    "ALTER TABLE runs ADD COLUMN prompt_tokens bigint NOT NULL DEFAULT 0, "
    "ADD COLUMN completion_tokens bigint NOT NULL DEFAULT 0, ADD COLUMN total_tokens bigint NOT NULL DEFAULT 0, "
    "ADD COLUMN stop_requested_by text",
    # A run stopped from chat (any replica may ask: stop_requested_by) ends "stopped".
    "ALTER TABLE runs DROP CONSTRAINT runs_status_check",
    "ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN "
    "('running', 'paused', 'resuming', 'finished', 'failed', 'expired', 'stopped'))",
    "CREATE INDEX runs_usage ON runs (platform, workspace, created_at)",
)

_TEAM_SETTINGS: Migration = (
    # Version 6: named approver groups, who may ask (access rules per scope), the direct-message switch,
    # and policy modes with conditions on the arguments.
    "CREATE TABLE approver_groups (name text PRIMARY KEY, members_json json NOT NULL, "
    "updated_by text NOT NULL, updated_at timestamptz NOT NULL)",
    "CREATE TABLE access_rules (scope text NOT NULL, principal text NOT NULL, updated_by text NOT NULL, "
    "updated_at timestamptz NOT NULL, PRIMARY KEY (scope, principal))",
    "CREATE TABLE direct_message_settings (scope text PRIMARY KEY, allowed boolean NOT NULL, "
    "updated_by text NOT NULL, updated_at timestamptz NOT NULL)",
    # Policy modes with conditions on the arguments (``policy set <tool> <mode> when env=prod``).
    "CREATE TABLE conditional_rules (scope text NOT NULL, tool_name text NOT NULL, condition text NOT NULL, "
    "mode text NOT NULL, updated_by text NOT NULL, updated_at timestamptz NOT NULL, "
    "PRIMARY KEY (scope, tool_name, condition))",
)

_MEMORIES: Migration = (
    # Version 7: long-term memories. The tsvector is generated from the text ('english': stemming and stop
    # words), so it cannot drift.
    """
    CREATE TABLE memories (
        id text PRIMARY KEY,
        seq bigint GENERATED ALWAYS AS IDENTITY,
        text text NOT NULL,
        user_id text,
        run_id text,
        agent_id text,
        metadata jsonb NOT NULL,
        created_at timestamptz NOT NULL,
        search tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED
    )
    """,
    "CREATE INDEX memories_search ON memories USING GIN (search)",
    "CREATE INDEX memories_user ON memories (user_id, run_id)",
    # A channel's shared memories (searched for every message); the expression is the one filters write.
    "CREATE INDEX memories_channel ON memories ((NULLIF(metadata -> 'channel', 'null'::jsonb)))",
    # Partial: most memories belong to no run; a run's scratch memories are found (and deleted) by it.
    "CREATE INDEX memories_run ON memories (run_id) WHERE run_id IS NOT NULL",
    # The newest memories in scope (a search without words): a backward scan.
    "CREATE INDEX memories_seq ON memories (seq)",
)

_AUDIT_CHAIN: Migration = (
    # Version 9.
    # The audit log becomes a hash chain (storage/audit_chain.py): this function builds the same payload as
    # entry_hash() there; the trigger below chains every new entry under the head row's lock, so appends from
    # every replica form one chain, in id order.
    """
    CREATE FUNCTION audit_entry_hash(prev text, entry_id bigint, at timestamptz, actor text, action text,
                                     subject text, details text) RETURNS text LANGUAGE sql STABLE AS $$
        SELECT encode(sha256(convert_to(
            length(prev) || ':' || prev || ';' ||
            length(entry_id::text) || ':' || entry_id::text || ';' ||
            length(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US')) || ':' ||
                to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || ';' ||
            length(actor) || ':' || actor || ';' ||
            length(action) || ':' || action || ';' ||
            length(subject) || ':' || subject || ';' ||
            length(details) || ':' || details || ';', 'UTF8')), 'hex')
    $$
    """,
    "ALTER TABLE audit ADD COLUMN prev_hash text, ADD COLUMN hash text",
    "CREATE TABLE audit_head (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), "
    "last_id bigint NOT NULL, last_hash text NOT NULL)",
    "CREATE TABLE audit_anchor (pruned_through bigint PRIMARY KEY, anchor_hash text NOT NULL, "
    "pruned_at timestamptz NOT NULL)",
    # Chain the entries written before this version, oldest first.
    "ALTER TABLE audit DISABLE TRIGGER audit_no_update_or_delete",
    """
    DO $$
    DECLARE
        entry record;
        previous text := '';
        last bigint := 0;
    BEGIN
        FOR entry IN SELECT id, at, actor, action, subject, details_json::text AS details FROM audit ORDER BY id LOOP
            UPDATE audit SET prev_hash = previous,
                hash = audit_entry_hash(previous, entry.id, entry.at, entry.actor, entry.action, entry.subject,
                                        entry.details)
            WHERE id = entry.id RETURNING hash INTO previous;
            last := entry.id;
        END LOOP;
        INSERT INTO audit_head (only_row, last_id, last_hash) VALUES (true, last, previous);
    END
    $$
    """,
    "DROP TRIGGER audit_no_update_or_delete ON audit",
    "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit FOR EACH ROW EXECUTE FUNCTION audit_append_only()",
    # Only entries at or before the newest anchor may go: pruning writes the anchor first.
    """
    CREATE FUNCTION audit_prune_only() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.id > (SELECT COALESCE(MAX(pruned_through), 0) FROM audit_anchor) THEN
            RAISE EXCEPTION 'the audit log is append-only';
        END IF;
        RETURN OLD;
    END
    $$
    """,
    "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit FOR EACH ROW EXECUTE FUNCTION audit_prune_only()",
    """
    CREATE FUNCTION audit_chain() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        head record;
    BEGIN
        UPDATE audit_head SET last_id = last_id + 1 RETURNING last_id, last_hash INTO head;
        NEW.id := head.last_id;
        NEW.prev_hash := head.last_hash;
        NEW.hash := audit_entry_hash(head.last_hash, NEW.id, NEW.at, NEW.actor, NEW.action, NEW.subject,
                                     NEW.details_json::text);
        UPDATE audit_head SET last_hash = NEW.hash;
        RETURN NEW;
    END
    $$
    """,
    "CREATE TRIGGER audit_chain BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION audit_chain()",
    "CREATE TRIGGER audit_anchor_no_change BEFORE UPDATE OR DELETE ON audit_anchor "
    "FOR EACH ROW EXECUTE FUNCTION audit_append_only()",
)

_APPROVAL_REMINDERS: Migration = (
    # Version 10: when an approval's approvers were reminded (once, for any TTL; the event dedupe is pruned).
    "ALTER TABLE approvals ADD COLUMN reminded_at timestamptz",
)
_APPROVAL_PROVENANCE: Migration = (
    # Which arguments of an approval came from untrusted text, and from where (issue 31), as JSON text.
    "ALTER TABLE approvals ADD COLUMN provenance_json text",
)
_TOOL_SETTINGS: Migration = (
    # Per-tool switches admins set, e.g. justification = required (issue 31).
    "CREATE TABLE tool_settings (tool_name text NOT NULL, setting text NOT NULL, value text NOT NULL, "
    "updated_by text NOT NULL, updated_at timestamptz NOT NULL, PRIMARY KEY (tool_name, setting))",
)

_APPROVAL_PREVIEW: Migration = (
    # What the call would do, computed when it paused, and its digest (issue 30), as JSON text.
    "ALTER TABLE approvals ADD COLUMN preview_json text",
)

_APPROVAL_RESPONDED: Migration = (
    # Issue 30: a person answered in the tool's place (Respond), a decision of its own.
    "ALTER TABLE approvals DROP CONSTRAINT approvals_status_check",
    "ALTER TABLE approvals ADD CONSTRAINT approvals_status_check CHECK (status IN ('pending', 'approved', "
    "'rejected', 'modified', 'expired', 'superseded', 'cancelled', 'responded'))",
)

_AUDIT_SIGNATURES: Migration = (
    # The audit key's signatures (storage/audit_chain.py's sign): of each entry, each anchor and the head
    # (ref 0). The key itself is never stored in the database.
    "CREATE TABLE audit_signature (kind text NOT NULL, ref bigint NOT NULL, sig text NOT NULL, "
    "PRIMARY KEY (kind, ref))",
)

_APPROVAL_REQUEST_REASON: Migration = (
    # The reason the requester gave in the request ("… because <reason>"; issue 31), as text.
    "ALTER TABLE approvals ADD COLUMN request_reason text",
)

MIGRATIONS: list[Migration] = [
    _INITIAL_SCHEMA,
    _APPROVAL_PLACES,
    _RUN_LIFECYCLE,
    _APPROVAL_REVIEWS,
    _CLOSE_APPROVALS_OF_ENDED_RUNS,
    _TEAM_SETTINGS,
    _MEMORIES,
    _RUN_TOKEN_USAGE,
    _AUDIT_CHAIN,
    _APPROVAL_REMINDERS,
    _AUDIT_SIGNATURES,
    _APPROVAL_PROVENANCE,
    _TOOL_SETTINGS,
    _APPROVAL_PREVIEW,
    _APPROVAL_RESPONDED,
    _APPROVAL_REQUEST_REASON,
]
"""Ordered: ``MIGRATIONS[n - 1]`` produces schema version ``n``."""

LATEST_VERSION = len(MIGRATIONS)

MIGRATION_LOCK = "countersign.migrations"
"""With the schema's name, the key of the advisory lock that :func:`migrate` holds."""


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> int:
    """The schema's version (0 for a schema that countersign never touched)."""
    cursor = await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL")
    row = await cursor.fetchone()
    if not row or not row[0]:
        return 0
    cursor = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def migrate(
    conn: psycopg.AsyncConnection[Any], target: int | None = None, migrations: Sequence[Migration] = MIGRATIONS
) -> int:
    """Bring the connection's current schema forward to ``target`` (default: the latest) and return its version.

    Raises :class:`UnknownSchemaVersion` for a schema written by a newer countersign, before changing
    anything, and :class:`StorageError` when the ``search_path`` names no existing schema.

    >>> async with db.connection() as conn:
    ...     await migrate(conn)
    1
    """
    latest = len(migrations)
    target = latest if target is None else target
    if not 0 <= target <= latest:
        raise ValueError(f"target must be between 0 and {latest}")
    # Every replica but the first finds the schema up to date: no lock, no transaction.
    current = await schema_version(conn)
    if current > latest:
        raise UnknownSchemaVersion(current, latest)
    if current >= target:
        return current
    async with conn.transaction():
        cursor = await conn.execute("SELECT current_schema()")
        row = await cursor.fetchone()
        schema = row[0] if row else None
        if schema is None:
            raise StorageError(
                "the PostgreSQL search_path names no existing schema: create it, or fix the URL's search_path"
            )
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [MIGRATION_LOCK, schema])
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)"
        )
        current = await schema_version(conn)
        if current > latest:
            raise UnknownSchemaVersion(current, latest)
        for version in range(current + 1, target + 1):
            for statement in migrations[version - 1]:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, now())", [version])
    return max(current, target)
