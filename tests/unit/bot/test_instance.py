"""serve's default instance id: stable across restarts, never shared by two live processes (bot/instance.py).

Each process is a real child Python (a lock is the process's: the kernel drops it when the process dies).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bot.config import Config
from bot.instance import stable_instance_id

HOLD = """
import sys
from pathlib import Path
from bot.config import Config
from bot.instance import stable_instance_id
print(stable_instance_id(Config(db_path=Path(sys.argv[1]), database_url=sys.argv[2] or None)), flush=True)
sys.stdin.read()  # hold the slot until the test closes stdin
"""


def _start(db: Path, url: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def _id_of(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def _stop(child: subprocess.Popen[str]) -> None:
    assert child.stdin is not None
    child.stdin.close()
    assert child.wait(timeout=30) == 0


def test_a_sqlite_process_keeps_its_id_in_a_file_beside_the_database_across_restarts(tmp_path: Path) -> None:
    db = tmp_path / "cs.db"
    first = _start(db)
    kept = _id_of(first)
    first.kill()  # as kill -9: the kernel drops its lock
    first.wait(timeout=30)
    assert (tmp_path / "cs.db.instance").read_text().strip() == kept
    again = _start(db)
    assert _id_of(again) == kept
    _stop(again)


def test_two_live_processes_on_one_sqlite_file_get_two_ids_each_kept_in_its_own_slot(tmp_path: Path) -> None:
    db = tmp_path / "cs.db"
    one, two = _start(db), None
    try:
        first = _id_of(one)
        two = _start(db)
        second = _id_of(two)
        assert first != second
        assert (tmp_path / "cs.db.instance-2").read_text().strip() == second
    finally:
        _stop(one)
        if two is not None:
            _stop(two)
    again = _start(db)
    assert _id_of(again) == first, "the first free slot is the first one again"
    _stop(again)


def test_with_postgresql_the_id_is_the_host_name_and_a_second_live_process_on_the_host_gets_host_2(
    tmp_path: Path,
) -> None:
    import socket

    url = f"postgresql://u@127.0.0.1:1/{tmp_path.name}"  # never connected to: only names the lock
    one = _start(tmp_path / "unused.db", url)
    try:
        assert _id_of(one) == socket.gethostname()
        two = _start(tmp_path / "unused.db", url)
        assert _id_of(two) == f"{socket.gethostname()}-2"
        _stop(two)
    finally:
        _stop(one)


def test_in_this_process_a_second_call_does_not_take_the_first_calls_slot(tmp_path: Path) -> None:
    config = Config(db_path=tmp_path / "cs.db")
    assert stable_instance_id(config) != stable_instance_id(config)
