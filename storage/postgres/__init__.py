"""countersign: the PostgreSQL backend, for several replicas on several hosts sharing one database.

Every store of :mod:`storage.protocols`, natively async on one ``psycopg_pool.AsyncConnectionPool``,
with the semantics of the SQLite classes; its own forward migrations (:mod:`storage.postgres.migrations`).

>>> storage = await open_postgres_storage("postgresql://bot@db.internal/countersign")
"""

from storage.postgres.approvals import PostgresApprovalStore
from storage.postgres.audit import PostgresAuditLog
from storage.postgres.conversations import PostgresConversationStore
from storage.postgres.database import PostgresDatabase
from storage.postgres.events import PostgresEventDedupe
from storage.postgres.ledger import PostgresToolLedger
from storage.postgres.lifecycle import PostgresOutbox, PostgresRunLeases, PostgresThreadInbox
from storage.postgres.memories import PostgresMemoryStore
from storage.postgres.messages import PostgresChatMessageStore
from storage.postgres.migrations import LATEST_VERSION, MIGRATIONS, migrate
from storage.postgres.places import PostgresApprovalPlaces
from storage.postgres.policies import PostgresPolicyStore
from storage.postgres.runs import PostgresRunStore
from storage.postgres.storage import PostgresStorage, open_postgres_storage

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "PostgresApprovalPlaces",
    "PostgresApprovalStore",
    "PostgresAuditLog",
    "PostgresChatMessageStore",
    "PostgresConversationStore",
    "PostgresDatabase",
    "PostgresEventDedupe",
    "PostgresMemoryStore",
    "PostgresOutbox",
    "PostgresPolicyStore",
    "PostgresRunLeases",
    "PostgresRunStore",
    "PostgresStorage",
    "PostgresThreadInbox",
    "PostgresToolLedger",
    "migrate",
    "open_postgres_storage",
]
