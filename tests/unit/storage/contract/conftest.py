"""The contract suite's fixture: every test runs once on SQLite and once on PostgreSQL.

``backend`` is the async storage the engine would get from ``open_async_storage`` (a fresh SQLite
file, or a fresh PostgreSQL schema), with ``execute`` for the raw SQL a few tests need to damage a
record or to try what the database must refuse, and ``open_another`` for a second storage on the same
database, as another process (or replica) opens it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

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
    yield Backend(request.param, storage, execute, open_another)
    for other in others:
        await other.aclose()
    await storage.aclose()


@pytest.fixture
def storage(backend):
    """The backend's async storage."""
    return backend.storage
