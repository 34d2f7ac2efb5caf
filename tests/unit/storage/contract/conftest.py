"""The contract suite's fixture: every test runs once on SQLite and once on PostgreSQL.

``backend`` is the async storage the engine would get from ``open_async_storage`` (a fresh SQLite
file, or a fresh PostgreSQL schema), with ``execute`` for the raw SQL a few tests need to damage a
record or to try what the database must refuse, and ``open_another`` for a second storage on the same
database, as another process (or replica) opens it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from storage import open_async_storage

BACKENDS = ("sqlite", "postgres")


@dataclass
class Backend:
    """One opened backend: its name, its async storage, and raw SQL on its database."""

    name: str
    storage: Any
    execute: Callable[[str], Awaitable[None]]
    open_another: Callable[..., Awaitable[Any]]
    sever: Callable[[], None]
    """Lose the current batch's connection, from inside the batch (a write's ``derive``): PostgreSQL terminates
    its backend (as a restart or a failover does), SQLite's driver fails as on a disk that went away."""


def _sqlite_sever(storage: Any) -> Callable[[], None]:
    def sever() -> None:
        # The writer's connection failing as one on a vanished disk does: the driver's own error, mid-transaction.
        raise sqlite3.OperationalError("disk I/O error")

    return sever


def _postgres_sever(storage: Any, url: str) -> Callable[[], None]:
    def sever() -> None:
        from storage.postgres.database import _BOUND

        bound = _BOUND.get()
        assert bound is not None, "sever() is called from inside a batch"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (bound[1].info.backend_pid,))

    return sever


def _sqlite_execute(storage: Any) -> Callable[[str], Awaitable[None]]:
    async def execute(sql: str) -> None:
        def run() -> None:
            with storage.storage.connector.writing() as db:
                db.execute(sql)

        await asyncio.to_thread(run)

    return execute


def _postgres_execute(storage: Any) -> Callable[[str], Awaitable[None]]:
    async def execute(sql: str) -> None:
        async with storage.db.connection() as conn:
            await conn.execute(sql)

    return execute


@pytest.fixture(params=BACKENDS)
async def backend(request, tmp_path):
    """The storage of one backend, opened as the engine opens it, closed after the test."""
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    others: list[Any] = []

    async def open_another(**options: Any) -> Any:
        other = await open_async_storage(tmp_path / "countersign.db", database_url=url, last_k=10, **options)
        others.append(other)
        return other

    storage = await open_async_storage(tmp_path / "countersign.db", database_url=url, last_k=10)
    execute = _sqlite_execute(storage) if url is None else _postgres_execute(storage)
    sever = _sqlite_sever(storage) if url is None else _postgres_sever(storage, url)
    yield Backend(request.param, storage, execute, open_another, sever)
    for other in others:
        await other.aclose()
    await storage.aclose()


@pytest.fixture
def storage(backend):
    """The backend's async storage."""
    return backend.storage
