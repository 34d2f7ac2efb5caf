"""``open_migrated_database``: connect to PostgreSQL and bring its schema up to date.

Below the stores, so both :func:`storage.postgres.storage.open_postgres_storage` and a memory store opened
from a URL (:class:`storage.postgres.memories.PostgresMemoryStore`) use it without importing each other.
"""

from __future__ import annotations

from storage.postgres.database import (
    DEFAULT_ACQUIRE_TIMEOUT,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_MIN,
    DEFAULT_STATEMENT_TIMEOUT_MS,
    PostgresDatabase,
)
from storage.postgres.migrations import migrate


async def open_migrated_database(
    url: str,
    *,
    pool_min: int = DEFAULT_POOL_MIN,
    pool_max: int = DEFAULT_POOL_MAX,
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
    connect_timeout: float = 30.0,
    acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT,
) -> PostgresDatabase:
    """Connect and run pending migrations (once, whatever number of replicas start together).

    >>> db = await open_migrated_database("postgresql://bot@db.internal/countersign")
    """
    db = await PostgresDatabase.open(
        url,
        min_size=pool_min,
        max_size=pool_max,
        statement_timeout_ms=statement_timeout_ms,
        connect_timeout=connect_timeout,
        acquire_timeout=acquire_timeout,
    )
    try:
        async with db.connection() as conn:
            await migrate(conn)
    except BaseException:
        await db.close()
        raise
    return db
