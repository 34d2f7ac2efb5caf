"""This process's stable instance id, when ``COUNTERSIGN_INSTANCE_ID`` is not set.

A process that restarts (``kill -9`` and systemd, a container restart) under the id of its previous life takes
back that life's runs at once (:meth:`bot.engine.recovery.Recovery.take_back_own`), instead of leaving them
stuck for a whole lease. So ``serve`` defaults the id from a source that survives the restart:

- **SQLite:** a file beside the database, ``<db>.instance``, created once with a random id;
- **PostgreSQL:** the host name (a container's host name is stable across its restarts).

Two live processes must never share an id (each would take the other's live runs), so each slot is held
with an exclusive lock (``flock``) for the life of the process: a second process on the same host finds slot 1
held and takes ``<db>.instance-2`` (SQLite) or ``<hostname>-2`` (PostgreSQL, its lock file in the temporary
directory), and so on. The kernel drops the lock when a process dies, however it dies, so the restarted process
gets its slot back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import secrets
import socket
import tempfile
from pathlib import Path
from typing import IO

from bot.config import Config

logger = logging.getLogger(__name__)

MAX_SLOTS = 64
_held: list[IO[str]] = []
"""The lock files this process holds: open for its whole life (closing one would free its slot)."""


def stable_instance_id(config: Config) -> str:
    """A stable instance id for this process, held (locked) until it exits; see the module's docstring."""
    if config.database_url:
        host = socket.gethostname()
        digest = hashlib.sha256(config.database_url.encode()).hexdigest()[:12]
        folder = Path(tempfile.gettempdir())
        for slot in range(1, MAX_SLOTS + 1):
            if _lock(folder / f"countersign-{digest}-{host}.instance-{slot}") is not None:
                return host if slot == 1 else f"{host}-{slot}"
    else:
        for slot in range(1, MAX_SLOTS + 1):
            suffix = ".instance" if slot == 1 else f".instance-{slot}"
            path = config.db_path.with_name(config.db_path.name + suffix)
            held = _lock(path)
            if held is not None:
                return _read_or_create(held)
    logger.warning("all %d instance slots are held; this process gets a one-off instance id", MAX_SLOTS)
    return config.instance_id


def _lock(path: Path) -> IO[str] | None:
    """``path`` opened and exclusively locked, kept open; ``None`` if another live process holds it."""
    try:
        handle = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held open for the life of the process
    except OSError:
        return None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    _held.append(handle)
    return handle


def _read_or_create(handle: IO[str]) -> str:
    """The id stored in the locked file, written first if the file is new (or unreadable)."""
    handle.seek(0)
    stored = handle.read().strip()
    if stored and len(stored) <= 200 and stored.isprintable():
        return stored
    created = f"{socket.gethostname()}-{secrets.token_hex(4)}"
    with contextlib.suppress(OSError):
        handle.seek(0)
        handle.truncate()
        handle.write(created + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return created
