"""countersign: storage.

Everything countersign must not lose — thread history, runs and their snapshots, approvals and
votes, the tool execution ledger, policies, the audit log, event dedupe keys and conversation
references — behind the protocols of :mod:`storage.protocols`: in one SQLite file through
sqlite-utils by default, or in PostgreSQL (:mod:`storage.postgres`) for several replicas;
:func:`open_async_storage` chooses.

>>> storage = open_storage("countersign.db")
>>> storage.runs.create("run-1", chat_history_id="slack:T1:C1:170.1", platform="slack",
...     workspace="T1", channel="C1", thread="170.1", requester="U1")
"""

from storage.aio import AsyncStorage, AsyncStore
from storage.approvals import SQLiteApprovalStore
from storage.async_protocols import AsyncStores
from storage.audit import SQLiteAuditLog
from storage.audit_chain import AuditVerification
from storage.batch import Batch, Call, Results, StoreMethod, Stores, call, stores
from storage.batches import SQLiteWriteBatches
from storage.conversations import SQLiteConversationStore
from storage.database import Storage, open_storage
from storage.errors import (
    ActiveRunExists,
    AlreadyExists,
    CorruptRecord,
    FencedOut,
    NotFound,
    StorageError,
    UnknownSchemaVersion,
)
from storage.events import SQLiteEventDedupe
from storage.factory import open_async_storage
from storage.ledger import SQLiteToolLedger
from storage.lifecycle import SQLiteOutbox, SQLiteRunLeases, SQLiteThreadInbox
from storage.memories import SQLiteMemoryStore
from storage.messages import SQLiteChatMessageStore
from storage.migrations import LATEST_VERSION, MIGRATIONS, migrate
from storage.ops import SQLiteOperations
from storage.places import SQLiteApprovalPlaces
from storage.policies import ANY_TOOL, SQLitePolicyStore, scope_channel, scope_global, scope_workspace
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
    Read,
    RunFence,
    RunLeases,
    RunRecord,
    RunStore,
    ThreadAddress,
    ThreadInbox,
    TokenUsage,
    ToolLedger,
    Vote,
    Write,
    WriteBatches,
)

__all__ = [
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
    "AsyncStores",
    "AuditEntry",
    "AuditVerification",
    "Operations",
    "PruneCounts",
    "SQLiteOperations",
    "AuditLog",
    "ApprovalStep",
    "Batch",
    "BatchOutcome",
    "Call",
    "Handle",
    "Results",
    "StoreMethod",
    "Stores",
    "call",
    "stores",
    "Read",
    "Write",
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
