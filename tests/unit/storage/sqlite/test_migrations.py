"""Opening the database: WAL and pragmas, forward migrations, refusing newer schemas."""

from __future__ import annotations

import json
import threading

import pytest
from sqlite_utils import Database

from bot import jsonio
from bot.canonical import args_digest
from bot.messages import ChatMessage, ToolCall, message_data
from storage import (
    LATEST_VERSION,
    MIGRATIONS,
    CorruptRecord,
    StorageError,
    UnknownSchemaVersion,
    migrate,
    open_storage,
)
from storage.sqlite.migrations import _messages_by_thread_number, _messages_in_thread_order
from tests.fakes.storage_data import NOW, THREAD

ARGS = {"path": "/srv/app/a.txt"}


def write_schema_1_database(path) -> list[ChatMessage]:
    """A database as countersign with schema 1 left it: history, a paused run, its approval, audit."""
    db = Database(path)
    assert migrate(db, target=1) == 1
    history = [ChatMessage.from_user("delete a.txt"), ChatMessage.from_assistant("on it")]
    t = NOW.timestamp()
    for seq, message in enumerate(history, start=1):
        db["messages"].insert(
            {
                "chat_history_id": THREAD,
                "seq": seq,
                "message_id": message.id,
                "role": message.role.value,
                "data": json.dumps(message.to_dict()),
                "created_at": t,
            }
        )
    db["runs"].insert(
        {
            "run_id": "run-1",
            "chat_history_id": THREAD,
            "platform": "slack",
            "workspace": "T1",
            "channel": "C1",
            "thread": "1700000000.000100",
            "requester": "U_ANA",
            "status": "paused",
            "step": 1,
            "snapshot_json": '{"step": 1}',
            "created_at": t,
            "updated_at": t,
        }
    )
    db["approvals"].insert(
        {
            "approval_id": "appr-v1",
            "run_id": "run-1",
            "step": 1,
            "tool_call_id": "call_1",
            "tool_name": "delete_file",
            "arguments_json": '{"path": "/srv/app/a.txt"}',
            "args_digest": args_digest(ARGS),
            "requester": "U_ANA",
            "mode": "always",
            "approvers_json": '["U_BOB", "U_CAROL"]',
            "quorum": 2,
            "four_eyes": 1,
            "platform": "slack",
            "chat_history_id": THREAD,
            "status": "pending",
            "created_at": t,
            "expires_at": t + 3600,
        }
    )
    db["audit"].insert(
        {"at": t, "actor": "U_ADMIN", "action": "policy.set", "subject": "global/*", "details_json": "{}"}
    )
    db.close()
    return history


def test_a_new_database_is_at_the_latest_schema_in_wal_mode(tmp_path):
    with open_storage(tmp_path / "c.db") as storage:
        assert storage.schema_version() == LATEST_VERSION == len(MIGRATIONS)
        assert storage.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_every_threads_connection_waits_for_locks_and_enforces_foreign_keys(tmp_path):
    with open_storage(tmp_path / "c.db") as storage:
        seen = {}

        def settings():
            db = storage.db
            seen[threading.current_thread().name] = (
                db.execute("PRAGMA busy_timeout").fetchone()[0],
                db.execute("PRAGMA foreign_keys").fetchone()[0],
                id(db.conn),
            )

        settings()
        worker = threading.Thread(target=settings, name="worker")
        worker.start()
        worker.join()
        (main_timeout, main_fk, main_conn), (worker_timeout, worker_fk, worker_conn) = seen.values()
        assert main_timeout >= 30_000 and worker_timeout >= 30_000
        assert main_fk == worker_fk == 1
        assert main_conn != worker_conn  # one connection per thread


def test_a_schema_1_database_is_upgraded_without_losing_data(tmp_path):
    path = tmp_path / "c.db"
    history = write_schema_1_database(path)
    with open_storage(path) as storage:
        assert storage.schema_version() == LATEST_VERSION
        assert [m.to_dict() for m in storage.messages.retrieve_messages(THREAD)] == [m.to_dict() for m in history]
        assert storage.runs.get("run-1").status == "paused"
        assert storage.runs.snapshot("run-1") == {"step": 1}
        approval = storage.approvals.get("appr-v1")
        assert (approval.arguments, approval.approvers, approval.quorum, approval.four_eyes) == (
            ARGS,
            ("U_BOB", "U_CAROL"),
            2,
            True,
        )
        assert approval.message_ref is None  # the column schema 2 added
        # what schema 2 brought works on the old rows
        assert storage.approvals.add_vote("appr-v1", "U_BOB", "confirm", now=NOW) == 1
        storage.approvals.set_message_ref(["appr-v1"], {"channel": "C1", "ts": "1.2"})
        assert storage.audit.recent(actor="U_ADMIN")[0].action == "policy.set"
        # schema 3: the pending approval stays clickable in its own conversation, and only there
        assert storage.places.shown_in("appr-v1", "slack:C1")
        assert not storage.places.shown_in("appr-v1", "slack:C2")


def test_migrations_run_once(tmp_path):
    path = tmp_path / "c.db"
    open_storage(path).close()
    with open_storage(path) as storage:
        versions = [r["version"] for r in storage.db.query("SELECT version FROM schema_version")]
        assert versions == list(range(1, LATEST_VERSION + 1))


def test_a_database_from_a_newer_countersign_is_refused_untouched(tmp_path):
    path = tmp_path / "c.db"
    db = Database(path)
    db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at FLOAT NOT NULL)")
    db.execute("INSERT INTO schema_version VALUES (?, 0)", [LATEST_VERSION + 1])
    db.close()
    with pytest.raises(UnknownSchemaVersion, match=f"schema version {LATEST_VERSION + 1}") as caught:
        open_storage(path)
    assert (caught.value.found, caught.value.known) == (LATEST_VERSION + 1, LATEST_VERSION)
    assert Database(path).table_names() == ["schema_version"]


def test_a_failing_migration_leaves_the_database_as_it_was(tmp_path):
    db = Database(tmp_path / "c.db")
    migrate(db, target=1)

    def broken(db: Database) -> None:
        db["votes_v2"].create({"id": int}, pk="id")
        raise RuntimeError("disk full halfway through")

    with pytest.raises(RuntimeError, match="halfway"):
        migrate(db, migrations=[MIGRATIONS[0], broken])
    assert "votes_v2" not in db.table_names()
    assert db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 1


def test_a_file_that_is_not_a_database_is_a_storage_error(tmp_path):
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are not the bytes you are looking for" * 100)
    with pytest.raises(StorageError, match="notes.db"):
        open_storage(path)


def test_an_in_memory_storage_is_shared_by_every_thread():
    with open_storage(":memory:") as storage:
        worker = threading.Thread(target=storage.events.first_time, args=("slack:Ev1",))
        worker.start()
        worker.join()
        assert not storage.events.first_time("slack:Ev1")


def test_a_closed_storage_refuses_to_work(tmp_path):
    storage = open_storage(tmp_path / "c.db")
    storage.events.first_time("slack:Ev1")
    storage.close()
    with pytest.raises(StorageError, match="closed"):
        storage.events.first_time("slack:Ev2")
    with pytest.raises(StorageError, match="closed"):
        storage.runs.get("run-1")


def test_the_thread_order_upgrade_keeps_messages_without_a_rowid_and_loses_none(tmp_path):
    path = tmp_path / "c.db"
    history = write_schema_1_database(path)
    db = Database(path)
    migrate(db, target=MIGRATIONS.index(_messages_in_thread_order))  # the version just before it
    other = ChatMessage.from_user("another thread, written in between")
    db["messages"].insert(
        {
            "chat_history_id": "slack:T1:C9:1.0",
            "seq": 1,
            "message_id": other.id,
            "role": "user",
            "data": json.dumps(other.to_dict()),
            "created_at": NOW.timestamp(),
        }
    )
    migrate(db, target=MIGRATIONS.index(_messages_in_thread_order) + 1)  # its own version: the schema it made
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
    indexes = {
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE tbl_name = 'messages' AND type = 'index' AND sql IS NOT NULL"
        )
    }
    assert "WITHOUT ROWID" in sql and "PRIMARY KEY (chat_history_id, seq)" in sql
    assert indexes == {"messages_thread_id"}
    db.conn.close()

    with open_storage(path) as storage:
        assert storage.messages.retrieve_messages(THREAD) == history
        assert storage.messages.retrieve_messages("slack:T1:C9:1.0") == [other]
        # ids stay unique per thread and appends continue the sequence
        assert storage.messages.write_messages(THREAD, [history[0], ChatMessage.from_user("more")]) == 1
        assert [m.text for m in storage.messages.retrieve_messages(THREAD)] == ["delete a.txt", "on it", "more"]


def test_the_thread_number_upgrade_keeps_every_message_exactly_and_shrinks_the_rows(tmp_path):
    path = tmp_path / "c.db"
    db = Database(path)
    migrate(db, target=MIGRATIONS.index(_messages_by_thread_number))  # the version just before it
    call = ToolCall(tool_name="restart", arguments={"service": "api"}, id="call_1")
    history = [
        ChatMessage.from_user("restart api", meta={"id": "HAND-MADE id", "channel": "C1"}),
        ChatMessage.from_assistant(tool_calls=[call], meta={"usage": {"total_tokens": 9}}),
        ChatMessage.from_tool("restarted", origin=call, meta={"a": 1, "id": "0" * 32, "z": 2}),
    ]
    other = ChatMessage.from_assistant("another thread")
    rows = [(THREAD, seq, m.id, m.role.value, jsonio.dumps(message_data(m))) for seq, m in enumerate(history, 1)]
    rows.append(("slack:T1:C9:1.0", 1, other.id, "assistant", json.dumps(other.to_dict())))  # the stdlib's spacing
    rows.append(("slack:T1:C9:2.0", 1, "broken", "user", "{not json"))
    db.conn.executemany(
        "INSERT INTO messages (chat_history_id, seq, message_id, role, data, created_at) VALUES (?, ?, ?, ?, ?, 0)",
        rows,
    )
    db.conn.commit()
    db.conn.close()

    with open_storage(path) as storage:
        read = storage.messages.retrieve_messages(THREAD)
        assert [m.to_dict() for m in read] == [m.to_dict() for m in history]
        assert [list(m.meta) for m in read] == [list(m.meta) for m in history]
        assert [m.to_dict() for m in storage.messages.retrieve_messages("slack:T1:C9:1.0")] == [other.to_dict()]
        with pytest.raises(CorruptRecord, match="slack:T1:C9:2.0/broken"):
            storage.messages.retrieve_messages("slack:T1:C9:2.0")  # kept, and still refused as before
        bodies = dict(
            storage.db.execute(
                "SELECT t.key, m.data FROM messages m JOIN threads t ON t.id = m.thread_id "
                "WHERE t.key LIKE 'slack:T1:C9:%'"
            ).fetchall()
        )
        assert bodies == {"slack:T1:C9:1.0": '{"text":"another thread"}', "slack:T1:C9:2.0": "{not json"}
        # ids stay unique per thread and appends continue each thread's sequence
        assert storage.messages.write_messages(THREAD, [history[0], ChatMessage.from_user("more")]) == 1
        assert storage.messages.write_messages("slack:T1:C9:1.0", [other]) == 0
        assert [m.text for m in storage.messages.retrieve_messages(THREAD)][-1] == "more"
        assert storage.db.execute("SELECT MAX(seq) FROM messages").fetchone()[0] == 4
