"""A clean shutdown merges SQLite's write-ahead log into the database file (issue 27).

After SIGTERM, ``cs.db`` alone must hold the data: operators copy that one file (or a volume snapshot sees
it before the ``-wal`` file). ``wal_checkpoint(TRUNCATE)`` on close leaves no ``-wal`` content behind.
"""

from __future__ import annotations

import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request

from storage import LATEST_VERSION
from tests.unit.bot.test_cli import TIMEOUT, clean_env


def _alone(tmp_path, name: str = "cs.db") -> sqlite3.Connection:
    """A copy of the database file without its -wal and -shm files, opened read-only."""
    copy = tmp_path / "copy"
    copy.mkdir(exist_ok=True)
    shutil.copy(tmp_path / name, copy / name)
    return sqlite3.connect(f"file:{copy / name}?mode=ro", uri=True)


def test_after_sigterm_the_database_file_alone_holds_the_data(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        log: list[str] = []
        url = None
        while url is None:
            assert time.monotonic() < deadline and process.poll() is None, "".join(log)
            log.append(process.stderr.readline())
            if match := re.search(r"listening on (http://127\.0\.0\.1:\d+)", log[-1]):
                url = match.group(1)
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:  # serving: the signals are handled
            assert response.status == 200
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    wal = tmp_path / "cs.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    with _alone(tmp_path) as conn:
        assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == LATEST_VERSION
