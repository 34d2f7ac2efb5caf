"""``AsyncStorage``: the stores for asyncio code, never blocking the event loop.

Every public method of every store becomes awaitable. On a database file of its own, writes go to the
group-commit writer thread (:mod:`storage.group_commit`) and reads to the reader threads
(:mod:`storage.readers`); otherwise every call runs on one small ``ThreadPoolExecutor`` (threads named
``countersign-db``). Either way one call is one hop off the event loop, so several writes of one step
go together through ``batches.apply`` (:mod:`storage.batches`): one hop, one transaction.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

from storage.async_protocols import (
    AsyncAccessStore,
    AsyncApprovalPlaces,
    AsyncApprovalStore,
    AsyncApproverGroupStore,
    AsyncAuditLog,
    AsyncChatMessageStore,
    AsyncConditionalRuleStore,
    AsyncConversationStore,
    AsyncEventDedupe,
    AsyncMemoryStore,
    AsyncOperations,
    AsyncOutbox,
    AsyncPolicyStore,
    AsyncRunLeases,
    AsyncRunStore,
    AsyncThreadInbox,
    AsyncToolLedger,
    AsyncToolSettingStore,
    AsyncWriteBatches,
)
from storage.protocols import STORE_NAMES
from storage.sqlite.connection import ThreadLocalConnector
from storage.sqlite.database import Storage
from storage.sqlite.group_commit import GroupCommitWriter
from storage.sqlite.readers import ReadWorkers
from storage.sqlite.wakeups import LocalWakeups

EXECUTOR_THREADS = 4
THREAD_NAME_PREFIX = "countersign-db"
READ_METHODS = frozenset(
    {
        "get",
        "retrieve_messages",
        "count_messages",
        "for_run",
        "get_clicked",
        "values",
        "is_not",
        "step",
        "votes",
        "pending",
        "due_for_expiry",
        "snapshot",
        "active_for_thread",
        "latest_for_thread",
        "list_by_status",
        "executing",
        "resolve",
        "view",
        "views",
        "unchanged",
        "get_rule",
        "list_rules",
        "groups",
        "is_confirmed",
        "recent",
        "load",
        "shown_in",
        "expired",
        "decided_paused",
        "waiting",
        "is_waiting",
        "orphaned",
        "due",
        "undelivered",
        "search_memories",
        "count_memories",
        "usage",
        "list_groups",
        "rules",
        "direct_messages_allowed",
        "pending_by_tool",
        "inbox_depth",
        "readiness_problem",
        "since",
        "verify",
        "read",  # batches.read: several reads in one hop
    }
)
"""Methods that only read: they run in parallel on the pool; every other method is a write."""


class AsyncStore:
    """Wraps one store: ``await proxy.method(...)`` runs ``store.method(...)`` on the executor.

    >>> await AsyncStore(storage.runs, executor).get("run-1")
    """

    def __init__(
        self,
        store: Any,
        executor: Executor,
        writer: GroupCommitWriter | None = None,
        readers: ReadWorkers | None = None,
    ) -> None:
        self._store = store
        self._executor = executor
        self._writer = writer
        self._readers = readers

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        executor = self._executor
        is_read = name in READ_METHODS
        worker = self._readers if is_read else self._writer

        @functools.wraps(attribute)
        async def call(*args: Any, **kwargs: Any) -> Any:
            # Looked up per call, so a store (or method) replaced later, e.g. to inject faults, is what runs.
            operation = functools.partial(getattr(self._store, name), *args, **kwargs)
            if worker is not None:
                return await worker.run(operation)
            return await asyncio.get_running_loop().run_in_executor(executor, operation)

        # Built once per method: the next lookups find it on the instance and skip __getattr__. Making
        # the wrapper (functools.wraps copies five attributes) on every call was 10-15 % of the event loop.
        setattr(self, name, call)
        return call


class AsyncStorage:
    """The async facade of a :class:`Storage`: same attributes, awaitable methods.

    >>> db = AsyncStorage(open_storage("countersign.db"))
    >>> await db.events.first_time("slack:Ev1")
    True
    >>> await db.aclose()
    """

    # Typed as the async twins of the store protocols: each is an AsyncStore at run time (set below).
    messages: AsyncChatMessageStore
    runs: AsyncRunStore
    approvals: AsyncApprovalStore
    ledger: AsyncToolLedger
    policies: AsyncPolicyStore
    audit: AsyncAuditLog
    events: AsyncEventDedupe
    conversations: AsyncConversationStore
    places: AsyncApprovalPlaces
    approver_groups: AsyncApproverGroupStore
    access: AsyncAccessStore
    conditions: AsyncConditionalRuleStore
    tool_settings: AsyncToolSettingStore
    leases: AsyncRunLeases
    inbox: AsyncThreadInbox
    outbox: AsyncOutbox
    memories: AsyncMemoryStore
    ops: AsyncOperations
    batches: AsyncWriteBatches

    def __init__(self, storage: Storage, executor: Executor | None = None) -> None:
        self.storage = storage
        self._owns_executor = executor is None
        self.executor: Executor = executor or ThreadPoolExecutor(
            max_workers=EXECUTOR_THREADS, thread_name_prefix=THREAD_NAME_PREFIX
        )
        # On a file of our own, writes share commits and reads run on reader threads; a shared connection
        # (":memory:") keeps the pool.
        own_file = isinstance(storage.connector, ThreadLocalConnector)
        self.writer = GroupCommitWriter(storage.connector) if own_file else None
        self.readers = ReadWorkers() if own_file else None
        for name in STORE_NAMES:
            setattr(self, name, AsyncStore(getattr(storage, name), self.executor, self.writer, self.readers))
        self.wakeups = LocalWakeups()
        """Wake-ups within this process only (see :mod:`storage.wakeups`)."""

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run any blocking storage call (e.g. a few statements together) on the executor.

        >>> await db.run(lambda: db.storage.runs.get("run-1"))
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(function, *args, **kwargs))

    def close(self) -> None:
        """Stop the executor (waiting for running calls) and close the storage."""
        if self.readers is not None:
            self.readers.close()
        if self.writer is not None:
            self.writer.close()
        if self._owns_executor:
            self.executor.shutdown(wait=True)
        self.storage.close()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.to_thread(self.close)
