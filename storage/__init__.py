"""countersign: storage.

Everything countersign must not lose — thread history, runs and their snapshots, approvals and
votes, the tool execution ledger, policies, the audit log, event dedupe keys and conversation
references — behind the protocols of :mod:`storage.protocols`: in one SQLite file through
sqlite-utils by default (:mod:`storage.sqlite`), or in PostgreSQL (:mod:`storage.postgres`) for several
replicas; :func:`open_async_storage` (:mod:`storage.factory`) chooses.

The top of the package holds what both backends share: the protocols and records, the errors, the codecs,
and the rules they both apply (``policy_rules``, ``run_rules``, ``team_rules``, ``approval_rows``,
``message_rows``, ``memory_rows``). It imports from ``bot`` only the leaf types (messages, canonical JSON,
JSON I/O, redaction, ids); pyproject.toml's import contracts hold that. This module also names the SQLite
classes, as API.md promises (``storage.SQLiteChatMessageStore``).

>>> storage = open_storage("countersign.db")
>>> storage.runs.create("run-1", chat_history_id="slack:T1:C1:170.1", platform="slack",
...     workspace="T1", channel="C1", thread="170.1", requester="U1")
"""

from storage.async_protocols import AsyncStores
from storage.audit_chain import AuditVerification
from storage.batch import Batch, Call, Results, StoreMethod, Stores, call, stores
from storage.errors import (
    ActiveRunExists,
    AlreadyExists,
    CorruptRecord,
    DatabaseUnreachable,
    FencedOut,
    NotFound,
    StorageError,
    UnknownSchemaVersion,
)
from storage.factory import open_async_storage
from storage.policy_rules import ANY_TOOL, scope_channel, scope_global, scope_workspace
from storage.protocols import (
    ApprovalPlaces,
    ApprovalRecord,
    ApprovalStep,
    ApprovalStore,
    AuditEntry,
    AuditLog,
    BatchOutcome,
    ChatMessageStore,
    ClickedApproval,
    ConversationStore,
    EffectiveRule,
    EventDedupe,
    Handle,
    InboxItem,
    LedgerEntry,
    Memory,
    MemoryStore,
    NewApproval,
    Operations,
    Outbox,
    OutboxMessage,
    PolicyRule,
    PolicyStore,
    PolicyView,
    PruneCounts,
    RunFence,
    RunLeases,
    RunRecord,
    RunStore,
    ThreadAddress,
    ThreadInbox,
    TokenUsage,
    ToolLedger,
    Vote,
    WriteBatches,
)
from storage.sqlite.aio import AsyncStorage, AsyncStore
from storage.sqlite.approvals import SQLiteApprovalStore
from storage.sqlite.audit import SQLiteAuditLog
from storage.sqlite.batches import SQLiteWriteBatches
from storage.sqlite.conversations import SQLiteConversationStore
from storage.sqlite.database import Storage, open_storage
from storage.sqlite.events import SQLiteEventDedupe
from storage.sqlite.ledger import SQLiteToolLedger
from storage.sqlite.lifecycle import SQLiteOutbox, SQLiteRunLeases, SQLiteThreadInbox
from storage.sqlite.memories import SQLiteMemoryStore
from storage.sqlite.messages import SQLiteChatMessageStore
from storage.sqlite.migrations import LATEST_VERSION, MIGRATIONS, migrate
from storage.sqlite.ops import SQLiteOperations
from storage.sqlite.places import SQLiteApprovalPlaces
from storage.sqlite.policies import SQLitePolicyStore

__all__ = [
    "AsyncStores",
    "Batch",
    "Call",
    "Handle",
    "Results",
    "StoreMethod",
    "Stores",
    "call",
    "stores",
    "ANY_TOOL",
    "ActiveRunExists",
    "InboxItem",
    "Outbox",
    "OutboxMessage",
    "RunLeases",
    "SQLiteOutbox",
    "SQLiteRunLeases",
    "SQLiteThreadInbox",
    "ThreadAddress",
    "ThreadInbox",
    "LATEST_VERSION",
    "MIGRATIONS",
    "AlreadyExists",
    "ApprovalPlaces",
    "ApprovalRecord",
    "ApprovalStore",
    "AsyncStorage",
    "AsyncStore",
    "AuditEntry",
    "AuditVerification",
    "Operations",
    "PruneCounts",
    "SQLiteOperations",
    "AuditLog",
    "ApprovalStep",
    "BatchOutcome",
    "WriteBatches",
    "SQLiteWriteBatches",
    "ChatMessageStore",
    "ClickedApproval",
    "ConversationStore",
    "CorruptRecord",
    "EffectiveRule",
    "EventDedupe",
    "LedgerEntry",
    "Memory",
    "MemoryStore",
    "SQLiteMemoryStore",
    "NewApproval",
    "NotFound",
    "PolicyRule",
    "PolicyStore",
    "PolicyView",
    "RunRecord",
    "RunStore",
    "SQLiteApprovalPlaces",
    "SQLiteApprovalStore",
    "SQLiteAuditLog",
    "SQLiteChatMessageStore",
    "SQLiteConversationStore",
    "SQLiteEventDedupe",
    "SQLitePolicyStore",
    "SQLiteToolLedger",
    "Storage",
    "DatabaseUnreachable",
    "StorageError",
    "FencedOut",
    "RunFence",
    "TokenUsage",
    "ToolLedger",
    "UnknownSchemaVersion",
    "Vote",
    "migrate",
    "open_async_storage",
    "open_storage",
    "scope_channel",
    "scope_global",
    "scope_workspace",
]
