"""``countersign db …`` and ``countersign audit …`` run as an operator runs them: the real program in a subprocess."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import threading

import psycopg

from storage import LATEST_VERSION, open_storage
from tests.unit.bot.test_cli import countersign


def _database(tmp_path, entries: int = 3):
    path = tmp_path / "cs.db"
    with open_storage(path) as storage:
        for n in range(entries):
            storage.audit.append(f"U{n}", "approved", f"a-{n}", {"tool": "delete_file", "n": n})
    return path


def test_db_check_passes_on_a_current_database_and_fails_on_a_newer_one(tmp_path):
    path = _database(tmp_path)
    checked = countersign(tmp_path, "db", "check")
    assert checked.returncode == 0, checked.stderr
    assert f"schema version {LATEST_VERSION}" in checked.stdout
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", [LATEST_VERSION + 1])
    refused = countersign(tmp_path, "db", "check")
    assert refused.returncode == 1
    assert "is newer than this countersign" in refused.stderr
    migrating = countersign(tmp_path, "db", "migrate")  # and migrate refuses to touch it
    assert migrating.returncode == 1 and "upgrade countersign" in migrating.stderr


def test_db_check_fails_on_a_newer_postgres_schema(tmp_path, postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (%s, now())", [100])
    refused = countersign(tmp_path, "db", "check", COUNTERSIGN_DATABASE_URL=postgres_url)
    assert refused.returncode == 1
    assert "schema version 100 is newer" in refused.stderr


def test_a_backup_taken_during_writes_opens_and_holds_every_committed_row(tmp_path):
    path = _database(tmp_path, entries=0)
    committed = 0
    enough = threading.Event()
    stop = threading.Event()

    def write() -> None:
        nonlocal committed
        with open_storage(path) as storage:
            while not stop.is_set():
                storage.audit.append("U_ANA", "paused", f"run-{committed}", {"step": committed})
                committed += 1
                if committed >= 200:
                    enough.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert enough.wait(60)
        committed_before = committed
        backup = countersign(tmp_path, "db", "backup", str(tmp_path / "backup.db"))
    finally:
        stop.set()
        writer.join()
    assert backup.returncode == 0, backup.stderr
    assert committed > committed_before  # the writer kept writing while the backup ran
    with open_storage(tmp_path / "backup.db") as copy:
        result = copy.audit.verify()  # the chain proves the copy is one consistent prefix
        assert result.ok, result.problems
        assert result.checked >= committed_before
        assert copy.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    again = countersign(tmp_path, "db", "backup", str(tmp_path / "backup.db"))
    assert again.returncode == 1 and "already exists" in again.stderr


def test_audit_verify_reports_an_edited_entry_and_export_writes_jsonl_and_csv(tmp_path):
    path = _database(tmp_path)
    intact = countersign(tmp_path, "audit", "verify")
    assert (intact.returncode, intact.stdout.strip()) == (0, "audit log intact: 3 entries checked")

    exported = countersign(tmp_path, "audit", "export", "--since", "30d", "--format", "jsonl")
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert [(e["id"], e["actor"], e["details"]["n"]) for e in lines] == [(1, "U0", 0), (2, "U1", 1), (3, "U2", 2)]
    assert lines[1]["prev_hash"] == lines[0]["hash"]
    table = list(csv.DictReader(io.StringIO(countersign(tmp_path, "audit", "export", "--format", "csv").stdout)))
    assert [row["hash"] for row in table] == [e["hash"] for e in lines]
    assert json.loads(table[2]["details"]) == {"tool": "delete_file", "n": 2}

    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER audit_no_update")
        conn.execute('UPDATE audit SET details_json = \'{"tool": "read_file", "n": 1}\' WHERE id = 2')
    tampered = countersign(tmp_path, "audit", "verify")
    assert tampered.returncode == 1
    assert "audit log TAMPERED" in tampered.stderr
    assert "entry 2: its content does not match its hash (edited)" in tampered.stderr


def test_db_prune_dry_run_counts_and_a_bad_age_is_refused(tmp_path):
    _database(tmp_path)
    dry = countersign(tmp_path, "db", "prune", "--older-than", "90d", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.strip() == "would delete: 0 runs, 0 approvals, 0 ledger, 0 messages, 0 outbox"
    bad = countersign(tmp_path, "db", "prune", "--older-than", "soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def test_db_backup_points_postgres_users_to_pg_dump(tmp_path, postgres_url):
    refused = countersign(tmp_path, "db", "backup", str(tmp_path / "b.db"), COUNTERSIGN_DATABASE_URL=postgres_url)
    assert refused.returncode == 1 and "pg_dump" in refused.stderr


def test_help_documents_the_operations_settings_and_commands(tmp_path):
    top = countersign(tmp_path, "--help").stdout
    for name in (
        "COUNTERSIGN_LOG_FORMAT",
        "COUNTERSIGN_SNAPSHOT_RETENTION",
        "COUNTERSIGN_RETENTION_DAYS",
        "COUNTERSIGN_AUDIT_RETENTION_DAYS",
        "{chat,serve,db,audit}",
    ):
        assert name in top
    db_help = countersign(tmp_path, "db", "--help").stdout
    for part in ("migrate", "check", "backup PATH", "vacuum", "prune --older-than 90d", "pg_dump"):
        assert part in db_help
    audit_help = countersign(tmp_path, "audit", "--help").stdout
    assert "verify" in audit_help and "export [--since 30d] [--format jsonl|csv]" in audit_help
    serve_help = countersign(tmp_path, "serve", "--help").stdout
    assert "GET  /readyz" in serve_help and "GET  /metrics" in serve_help
