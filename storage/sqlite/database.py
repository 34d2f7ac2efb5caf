"""``open_storage``: one SQLite file holding everything countersign must not lose."""

from __future__ import annotations

import pathlib
from typing import Any

from sqlite_utils import Database

from storage.sqlite.approvals import SQLiteApprovalStore
from storage.sqlite.audit import SQLiteAuditLog
from storage.sqlite.batches import SQLiteWriteBatches
from storage.sqlite.connection import DEFAULT_BUSY_TIMEOUT, Connector, connector_for
from storage.sqlite.conversations import SQLiteConversationStore
from storage.sqlite.events import SQLiteEventDedupe
from storage.sqlite.ledger import SQLiteToolLedger
from storage.sqlite.lifecycle import SQLiteOutbox, SQLiteRunLeases, SQLiteThreadInbox
from storage.sqlite.memories import SQLiteMemoryStore
from storage.sqlite.messages import SQLiteChatMessageStore
from storage.sqlite.migrations import schema_version
from storage.sqlite.ops import SQLiteOperations
from storage.sqlite.places import SQLiteApprovalPlaces
from storage.sqlite.policies import SQLitePolicyStore
from storage.sqlite.runs import SQLiteRunStore
from storage.sqlite.team import SQLiteAccessStore, SQLiteApproverGroups, SQLiteConditionalRules
from storage.sqlite.tool_settings import SQLiteToolSettings


class Storage:
    """Every store of one database, as attributes.

    >>> storage = open_storage("countersign.db")
    >>> storage.events.first_time("slack:Ev1")
    True
    >>> storage.close()
    """

    def __init__(
        self, connector: Connector, *, owned: bool = True, last_k: int = 10, audit_key: bytes | None = None
    ) -> None:
        self.connector = connector
        self._owned = owned
        self.messages = SQLiteChatMessageStore(self, last_k=last_k)
        self.runs = SQLiteRunStore(connector)
        self.approvals = SQLiteApprovalStore(connector)
        self.ledger = SQLiteToolLedger(connector)
        self.policies = SQLitePolicyStore(connector)
        self.audit = SQLiteAuditLog(connector, key=audit_key)
        self.events = SQLiteEventDedupe(connector)
        self.conversations = SQLiteConversationStore(connector)
        self.places = SQLiteApprovalPlaces(connector)
        self.leases = SQLiteRunLeases(connector)
        self.inbox = SQLiteThreadInbox(connector, self.messages)
        self.outbox = SQLiteOutbox(connector)
        self.memories = SQLiteMemoryStore(self)
        self.approver_groups = SQLiteApproverGroups(connector)
        self.access = SQLiteAccessStore(connector)
        self.conditions = SQLiteConditionalRules(connector)
        self.tool_settings = SQLiteToolSettings(connector)
        self.ops = SQLiteOperations(connector)
        self.batches = SQLiteWriteBatches(self)

    @property
    def path(self) -> str:
        """The database file (``":memory:"`` for an in-memory database)."""
        return self.connector.path

    @property
    def db(self) -> Database:
        """The calling thread's sqlite-utils ``Database``, for ad-hoc queries.

        >>> storage.db["approvals"].count
        0
        """
        return self.connector.database()

    def schema_version(self) -> int:
        """The schema version of the database.

        >>> storage.schema_version()
        3
        """
        with self.connector.reading() as db:
            return schema_version(db)

    def close(self) -> None:
        """Close every connection this storage opened (in every thread); later calls raise StorageError.

        >>> storage.close()
        """
        if self._owned:
            self.connector.close()

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def open_storage(
    path: str | pathlib.Path | Database,
    *,
    synchronous: str = "FULL",
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    last_k: int = 10,
    audit_key: bytes | None = None,
) -> Storage:
    """Open or create the database, switch it to WAL and run pending migrations.

    >>> with open_storage("countersign.db") as storage:
    ...     storage.schema_version()
    3

    ``path`` may also be ``":memory:"`` (one connection shared by all threads) or a sqlite-utils
    ``Database``. ``synchronous="NORMAL"`` trades durability against power loss for cheaper commits.
    Raises :class:`UnknownSchemaVersion` for a file written by a newer countersign.
    """
    connector, owned = connector_for(path, busy_timeout=busy_timeout, synchronous=synchronous)
    return Storage(connector, owned=owned, last_k=last_k, audit_key=audit_key)
