"""``open_postgres_storage``: every store on one PostgreSQL database, natively async.

The object has the shape of :class:`storage.AsyncStorage` (the same store attributes, every method
awaitable, ``aclose()``), so the engine never learns which backend it has.
"""

from __future__ import annotations

from typing import Any

from storage.postgres.approvals import PostgresApprovalStore
from storage.postgres.audit import PostgresAuditLog
from storage.postgres.batches import PostgresWriteBatches
from storage.postgres.conversations import PostgresConversationStore
from storage.postgres.database import (
    DEFAULT_ACQUIRE_TIMEOUT,
    DEFAULT_POOL_MAX,
    DEFAULT_POOL_MIN,
    DEFAULT_STATEMENT_TIMEOUT_MS,
    PostgresDatabase,
)
from storage.postgres.events import PostgresEventDedupe
from storage.postgres.ledger import PostgresToolLedger
from storage.postgres.lifecycle import PostgresOutbox, PostgresRunLeases, PostgresThreadInbox
from storage.postgres.memories import PostgresMemoryStore
from storage.postgres.messages import PostgresChatMessageStore
from storage.postgres.migrations import schema_version
from storage.postgres.opening import open_migrated_database
from storage.postgres.ops import PostgresOperations
from storage.postgres.places import PostgresApprovalPlaces
from storage.postgres.policies import PostgresPolicyStore
from storage.postgres.runs import PostgresRunStore
from storage.postgres.team import PostgresAccessStore, PostgresApproverGroups, PostgresConditionalRules
from storage.postgres.tool_settings import PostgresToolSettings
from storage.postgres.wakeups import PostgresWakeups


class PostgresStorage:
    """Every store of one PostgreSQL database (and schema), as attributes.

    >>> storage = await open_postgres_storage("postgresql://bot@db.internal/countersign")
    >>> await storage.events.first_time("slack:Ev1")
    True
    >>> await storage.aclose()
    """

    def __init__(self, db: PostgresDatabase, *, last_k: int = 10, audit_key: bytes | None = None) -> None:
        self.db = db
        self.messages = PostgresChatMessageStore(db, last_k=last_k)
        self.runs = PostgresRunStore(db)
        self.approvals = PostgresApprovalStore(db)
        self.ledger = PostgresToolLedger(db)
        self.policies = PostgresPolicyStore(db)
        self.audit = PostgresAuditLog(db, key=audit_key)
        self.events = PostgresEventDedupe(db)
        self.conversations = PostgresConversationStore(db)
        self.places = PostgresApprovalPlaces(db)
        self.leases = PostgresRunLeases(db)
        self.inbox = PostgresThreadInbox(db, self.messages)
        self.outbox = PostgresOutbox(db)
        self.memories = PostgresMemoryStore(db)
        self.approver_groups = PostgresApproverGroups(db)
        self.access = PostgresAccessStore(db)
        self.conditions = PostgresConditionalRules(db)
        self.tool_settings = PostgresToolSettings(db)
        self.ops = PostgresOperations(db)
        self.batches = PostgresWriteBatches(self)
        self.wakeups = PostgresWakeups(db)

    async def schema_version(self) -> int:
        """The schema version of the database.

        >>> await storage.schema_version()
        1
        """
        async with self.db.connection() as conn:
            return await schema_version(conn)

    def pool_stats(self) -> dict[str, int]:
        """The connection pool's counters and gauges (:meth:`PostgresDatabase.pool_stats`), for ``/metrics``."""
        return self.db.pool_stats()

    async def aclose(self) -> None:
        """Close the listening connection and the pool; later calls raise :class:`storage.StorageError`."""
        await self.wakeups.aclose()
        await self.db.close()

    async def __aenter__(self) -> PostgresStorage:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


async def open_postgres_storage(
    url: str,
    *,
    last_k: int = 10,
    pool_min: int = DEFAULT_POOL_MIN,
    pool_max: int = DEFAULT_POOL_MAX,
    statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
    connect_timeout: float = 30.0,
    acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT,
    audit_key: bytes | None = None,
) -> PostgresStorage:
    """Connect, run pending migrations (once, whatever number of replicas start together) and return the stores.

    The schema is the first of the URL's ``search_path`` (``?options=-csearch_path%3Dcountersign``),
    ``public`` by default. Raises :class:`storage.UnknownSchemaVersion` for a schema written by a newer
    countersign and :class:`storage.StorageError` if the server cannot be reached.

    >>> async with await open_postgres_storage("postgresql://bot@db.internal/countersign") as storage:
    ...     await storage.schema_version()
    1
    """
    db = await open_migrated_database(
        url,
        pool_min=pool_min,
        pool_max=pool_max,
        statement_timeout_ms=statement_timeout_ms,
        connect_timeout=connect_timeout,
        acquire_timeout=acquire_timeout,
    )
    return PostgresStorage(db, last_k=last_k, audit_key=audit_key)
