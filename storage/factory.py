"""``open_async_storage``: the one place that chooses the backend.

With a ``postgresql://`` URL the stores live in PostgreSQL (several replicas, one database);
otherwise in the SQLite file, behind :class:`storage.AsyncStorage`. Both have the same shape: the
same store attributes, every method awaitable, ``aclose()``.
"""

from __future__ import annotations

import asyncio
import pathlib

from storage.async_protocols import AsyncStores
from storage.sqlite.aio import AsyncStorage
from storage.sqlite.database import open_storage


async def open_async_storage(
    db_path: str | pathlib.Path,
    *,
    database_url: str | None = None,
    last_k: int = 10,
    pool_size: int | None = None,
    audit_key: bytes | None = None,
    connect_timeout: float | None = None,
    pool_timeout: float | None = None,
) -> AsyncStores:
    """Open PostgreSQL at ``database_url`` when given, else the SQLite file ``db_path``; run pending migrations.

    ``pool_size`` caps PostgreSQL's connections from this process (default 10), ``pool_timeout`` bounds a wait
    for one of them (default 30 s); SQLite ignores both. ``audit_key`` signs the audit log
    (:mod:`storage.audit_chain`). ``connect_timeout`` bounds how long PostgreSQL may take to answer at first
    (default 30 s).

    >>> storage = await open_async_storage("countersign.db", database_url=None, last_k=30)
    >>> await storage.events.first_time("slack:Ev1")
    True
    >>> await storage.aclose()
    """
    if database_url:
        # Imported here: psycopg costs every SQLite user (and every CLI start) a noticeable fraction of a second.
        from storage.postgres import open_postgres_storage
        from storage.postgres.database import DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_POOL_MAX

        return await open_postgres_storage(
            database_url,
            last_k=last_k,
            audit_key=audit_key,
            pool_max=DEFAULT_POOL_MAX if pool_size is None else pool_size,
            connect_timeout=30.0 if connect_timeout is None else connect_timeout,
            acquire_timeout=DEFAULT_ACQUIRE_TIMEOUT if pool_timeout is None else pool_timeout,
        )
    return AsyncStorage(await asyncio.to_thread(open_storage, db_path, last_k=last_k, audit_key=audit_key))
