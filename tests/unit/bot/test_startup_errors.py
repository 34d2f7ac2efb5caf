"""``bot.startup_errors``: a database that cannot be opened at start is one line naming the setting, and says
whether trying again may help (``serve`` retries an unreachable PostgreSQL; a newer schema never gets better)."""

from __future__ import annotations

import sqlite3

import pytest

from bot.config import Config
from bot.startup_errors import DatabaseUnavailable, open_configured_storage, without_password
from storage import LATEST_VERSION, open_storage


async def test_an_unreachable_postgres_is_retryable_and_the_line_has_no_password(tmp_path):
    config = Config(
        db_path=tmp_path / "cs.db", database_url="postgresql://u:s3cr3t@127.0.0.1:1/db", db_connect_timeout=1.0
    )
    with pytest.raises(DatabaseUnavailable) as caught:
        await open_configured_storage(config)
    assert caught.value.retryable
    line = str(caught.value)
    assert line.startswith("COUNTERSIGN_DATABASE_URL: PostgreSQL did not answer within 1 s")
    assert "s3cr3t" not in line and "\n" not in line


async def test_a_newer_schema_is_not_retryable(tmp_path):
    path = tmp_path / "cs.db"
    open_storage(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 0)", [LATEST_VERSION + 1])
    with pytest.raises(DatabaseUnavailable) as caught:
        await open_configured_storage(Config(db_path=path))
    assert not caught.value.retryable
    assert str(caught.value).startswith(f"COUNTERSIGN_DB: the database has schema version {LATEST_VERSION + 1}")


def test_a_password_in_a_url_is_masked():
    assert without_password("at postgresql://bot:pw@db:5432/cs and postgres://x:y@h/d") == (
        "at postgresql://bot:***@db:5432/cs and postgres://x:***@h/d"
    )
