"""The audit log's defences and the database's one-line errors, through the real ``countersign`` program.

Issue 27: a forged pruning anchor must fail ``audit verify``; with the audit key a rewritten log fails too, and
``audit checkpoint`` / ``audit verify --against`` compare with a head kept elsewhere. Issues 27 and 29: commands
that read never create a database, ``db prune`` needs a unit, and an unusable database is one line, exit 2.
"""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta

from storage import LATEST_VERSION, open_storage
from storage.audit_chain import GENESIS, entry_hash
from tests.unit.bot.test_cli import countersign

KEY = "a key that lives outside the database"


def _database(tmp_path, entries: int = 10, key: str | None = None, days_ago: int = 0):
    path = tmp_path / "cs.db"
    at = datetime.now(UTC) - timedelta(days=days_ago)
    with open_storage(path, audit_key=key.encode() if key else None) as storage:
        for n in range(entries):
            storage.audit.append(f"U{n}", "approved", f"a-{n}", {"tool": "delete_file", "n": n}, now=at)
    return path


def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_the_forged_anchor_of_issue_27_fails_verify(tmp_path):
    path = _database(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "INSERT INTO audit_anchor(pruned_through,anchor_hash,pruned_at) SELECT id,hash,0 FROM audit "
            "WHERE id=(SELECT MAX(id)-1 FROM audit); DELETE FROM audit WHERE id<(SELECT MAX(id) FROM audit)"
        )
    verified = countersign(tmp_path, "audit", "verify")
    assert verified.returncode == 1, verified.stdout
    assert "a pruning anchor at entry 9 exists, but audit retention is off" in verified.stderr
    # With retention on the anchor is plausible without the key, but not with it: the key signs real anchors.
    keyed = countersign(tmp_path, "audit", "verify", COUNTERSIGN_AUDIT_RETENTION_DAYS="30", COUNTERSIGN_AUDIT_KEY=KEY)
    assert keyed.returncode == 1
    assert "the pruning anchor at entry 9 is not signed with the audit key" in keyed.stderr


def _rehash(path, entry_id: int) -> None:
    """Drop the triggers, edit one entry, recompute every hash and the head: the unkeyed chain is intact again."""
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER audit_no_update")
        conn.execute("UPDATE audit SET actor = 'U_EVE' WHERE id = ?", [entry_id])
        prev, last = GENESIS, 0
        for row_id, at, actor, action, subject, details in conn.execute(
            "SELECT id, at, actor, action, subject, details_json FROM audit ORDER BY id"
        ).fetchall():
            digest = entry_hash(prev, row_id, repr(float(at)), actor, action, subject, details)
            conn.execute("UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?", [prev, digest, row_id])
            prev, last = digest, row_id
        conn.execute("UPDATE audit_head SET last_id = ?, last_hash = ?", [last, prev])


def test_with_the_key_a_rehashed_log_fails_and_a_checkpoint_catches_it_without_the_key(tmp_path):
    path = _database(tmp_path, key=KEY)
    checkpoint = countersign(tmp_path, "audit", "checkpoint", COUNTERSIGN_AUDIT_KEY=KEY)
    assert checkpoint.returncode == 0, checkpoint.stderr
    head = checkpoint.stdout.strip()
    entry_id, digest, signature = head.split(":")
    assert (entry_id, len(digest), len(signature)) == ("10", 64, 64)
    assert countersign(tmp_path, "audit", "verify", "--against", head, COUNTERSIGN_AUDIT_KEY=KEY).returncode == 0

    _rehash(path, 4)
    assert countersign(tmp_path, "audit", "verify").returncode == 0  # what a chain without a key cannot see
    keyed = countersign(tmp_path, "audit", "verify", COUNTERSIGN_AUDIT_KEY=KEY)
    assert keyed.returncode == 1
    assert "7 entries are not signed with the audit key (first: 4)" in keyed.stderr
    against = countersign(tmp_path, "audit", "verify", "--against", head)
    assert against.returncode == 1
    assert "entry 10 differs from the checkpoint (the log was rewritten)" in against.stderr


def test_a_key_file_works_like_the_key_and_a_short_key_is_refused(tmp_path):
    _database(tmp_path, key=KEY)
    (tmp_path / "audit.key").write_text(KEY + "\n")
    assert (
        countersign(tmp_path, "audit", "verify", COUNTERSIGN_AUDIT_KEY_FILE=str(tmp_path / "audit.key")).returncode == 0
    )
    short = countersign(tmp_path, "audit", "verify", COUNTERSIGN_AUDIT_KEY="short")
    assert short.returncode == 2
    assert "COUNTERSIGN_AUDIT_KEY: the key must be at least 16 bytes" in _one_line(short)


def test_db_prune_audit_prunes_past_the_audit_retention_and_the_chain_still_verifies(tmp_path):
    _database(tmp_path, entries=4, key=KEY, days_ago=40)
    refused = countersign(tmp_path, "db", "prune", "--older-than", "90d", "--audit")
    assert refused.returncode == 2
    assert "COUNTERSIGN_AUDIT_RETENTION_DAYS is not set" in _one_line(refused)
    env = {"COUNTERSIGN_AUDIT_RETENTION_DAYS": "30", "COUNTERSIGN_AUDIT_KEY": KEY}
    pruned = countersign(tmp_path, "db", "prune", "--older-than", "90d", "--audit", **env)
    assert pruned.returncode == 0, pruned.stderr
    assert "4 audit entries" in pruned.stdout
    verified = countersign(tmp_path, "audit", "verify", **env)
    assert verified.returncode == 0, verified.stderr
    assert "pruned through entry 4" in verified.stdout


def test_db_prune_needs_a_unit(tmp_path):
    _database(tmp_path, entries=1)
    refused = countersign(tmp_path, "db", "prune", "--older-than", "90")
    assert refused.returncode == 2
    assert "give the unit: 90d (days), h, m or s" in refused.stderr
    assert countersign(tmp_path, "db", "prune", "--older-than", "12h", "--dry-run").returncode == 0


def test_commands_that_read_never_create_a_database(tmp_path):
    for command in (
        ("audit", "verify"),
        ("audit", "checkpoint"),
        ("audit", "export"),
        ("db", "check"),
        ("db", "vacuum"),
        ("db", "prune", "--older-than", "90d"),
        ("db", "backup", str(tmp_path / "copy.db")),
    ):
        result = countersign(tmp_path, *command)
        assert result.returncode == 2, (command, result.stderr)
        assert "COUNTERSIGN_DB: there is no database at" in _one_line(result)
        assert sorted(p.name for p in tmp_path.iterdir()) == [], command


def test_a_database_path_that_cannot_hold_a_file_is_one_line_naming_the_setting(tmp_path):
    result = countersign(tmp_path, "chat", stdin="", COUNTERSIGN_DB="/proc/x.db")
    assert result.returncode == 2
    line = _one_line(result)
    assert "COUNTERSIGN_DB" in line and "/proc/x.db" in line


def test_an_unreachable_postgres_is_one_line_within_the_connect_timeout_without_the_password(tmp_path):
    url = "postgresql://u:p4ssw0rd@127.0.0.1:1/db"
    for command in (("chat",), ("db", "check"), ("db", "migrate"), ("audit", "verify"), ("db", "vacuum")):
        started = time.monotonic()
        result = countersign(
            tmp_path, *command, stdin="", COUNTERSIGN_DATABASE_URL=url, COUNTERSIGN_DB_CONNECT_TIMEOUT="2"
        )
        elapsed = time.monotonic() - started
        assert result.returncode == 2, (command, result.stderr)
        line = _one_line(result)
        assert "COUNTERSIGN_DATABASE_URL" in line and "p4ssw0rd" not in result.stderr + result.stdout, line
        assert elapsed < 10, (command, elapsed)


def test_a_schema_newer_than_the_code_stops_chat_and_serve_with_one_line(tmp_path):
    path = _database(tmp_path, entries=1)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", [LATEST_VERSION + 1])
    for command in (("chat",), ("serve", "--port", "0")):
        result = countersign(tmp_path, *command, stdin="")
        assert result.returncode == 2, (command, result.stderr)
        line = _one_line(result)
        assert f"COUNTERSIGN_DB: the database has schema version {LATEST_VERSION + 1}" in line, line


def test_audit_sign_signs_a_log_from_before_the_key_but_never_a_broken_one(tmp_path):
    path = _database(tmp_path, entries=3)
    refused = countersign(tmp_path, "audit", "sign")
    assert refused.returncode == 2 and "set COUNTERSIGN_AUDIT_KEY" in _one_line(refused)
    assert countersign(tmp_path, "audit", "verify", COUNTERSIGN_AUDIT_KEY=KEY).returncode == 1
    signed = countersign(tmp_path, "audit", "sign", COUNTERSIGN_AUDIT_KEY=KEY)
    assert signed.returncode == 0, signed.stderr
    assert "signed 3 entries and anchors, and the head" in signed.stdout
    assert countersign(tmp_path, "audit", "verify", COUNTERSIGN_AUDIT_KEY=KEY).returncode == 0

    other = tmp_path / "other"
    other.mkdir()
    broken = _database(other, entries=3)
    with sqlite3.connect(broken) as conn:
        conn.execute("DROP TRIGGER audit_no_update")
        conn.execute("UPDATE audit SET actor = 'U_EVE' WHERE id = 2")
    refused = countersign(other, "audit", "sign", COUNTERSIGN_AUDIT_KEY=KEY)
    assert refused.returncode == 1
    assert "entry 2: its content does not match its hash (edited)" in refused.stderr
    assert path.exists()


def test_the_forged_anchor_fails_verify_on_postgres_too(tmp_path, postgres_url):
    import psycopg

    env = {"COUNTERSIGN_DATABASE_URL": postgres_url}
    assert countersign(tmp_path, "db", "migrate", **env).returncode == 0
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        for n in range(5):
            conn.execute(
                "INSERT INTO audit (at, actor, action, subject, details_json) "
                "VALUES (now(), %s, 'approved', 'a', '{}')",
                [f"U{n}"],
            )
        conn.execute(
            "INSERT INTO audit_anchor (pruned_through, anchor_hash, pruned_at) SELECT id, hash, now() FROM audit "
            "WHERE id = (SELECT MAX(id) - 1 FROM audit)"
        )
        conn.execute("DELETE FROM audit WHERE id < (SELECT MAX(id) FROM audit)")
    verified = countersign(tmp_path, "audit", "verify", **env)
    assert verified.returncode == 1, verified.stdout
    assert "a pruning anchor at entry 4 exists, but audit retention is off" in verified.stderr
