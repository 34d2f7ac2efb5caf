"""``Batch``: a step's writes and reads, named by typed handles, for ``storage.batches.apply`` (one round trip).

A batch names each call by the store protocol's method itself (``stores.runs.transition``), so the type checker
checks its arguments against the protocol's signature and gives its result the protocol's return type. Adding a
write or read returns a :class:`~storage.protocols.Handle`; the result is read through it
(``outcome[handle]``), so another write added to the batch never shifts a result another handle reads.

>>> batch = Batch()
>>> batch.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
>>> moved = batch.require(stores.runs.transition, "run-1", "running", "paused", step=1)
>>> waiting = batch.read(stores.inbox.waiting, "slack:T1:C1:170.1")
>>> batch.write(stores.audit.append, "U1", "paused", "run-1", {"step": 1})
>>> outcome = await storage.batches.apply(batch)
>>> outcome.applied, outcome[moved], outcome[waiting]
(True, True, [])

The rules are :class:`~storage.protocols.WriteBatches`'s: all or nothing, a ``require``-d write that answers
no refuses the whole batch (``outcome.refused_by`` is its handle), audit appends come last. A write or read
``..._from`` takes its arguments, in the transaction, from the results of earlier handles.
"""

from __future__ import annotations

import inspect

from storage.batch_types import (
    Batch,
    BatchOutcome,
    Call,
    Handle,
    ReadStep,
    Results,
    Step,
    StoreMethod,
    WriteStep,
    call,
)
from storage.protocols import (
    STORE_NAMES,
    AccessStore,
    ApprovalPlaces,
    ApprovalStore,
    ApproverGroupStore,
    AuditLog,
    ChatMessageStore,
    ConditionalRuleStore,
    ConversationStore,
    EventDedupe,
    MemoryStore,
    Operations,
    Outbox,
    PolicyStore,
    RunLeases,
    RunStore,
    ThreadInbox,
    ToolLedger,
    ToolSettingStore,
)

__all__ = [
    "STORE_PROTOCOLS",
    "Batch",
    "BatchOutcome",
    "Call",
    "Handle",
    "ReadStep",
    "Results",
    "Step",
    "StoreMethod",
    "Stores",
    "WriteStep",
    "call",
    "checked_reads",
    "checked_writes",
    "stores",
]

STORE_PROTOCOLS: dict[str, type] = {
    "messages": ChatMessageStore,
    "runs": RunStore,
    "approvals": ApprovalStore,
    "ledger": ToolLedger,
    "policies": PolicyStore,
    "audit": AuditLog,
    "events": EventDedupe,
    "conversations": ConversationStore,
    "places": ApprovalPlaces,
    "leases": RunLeases,
    "inbox": ThreadInbox,
    "outbox": Outbox,
    "approver_groups": ApproverGroupStore,
    "access": AccessStore,
    "conditions": ConditionalRuleStore,
    "tool_settings": ToolSettingStore,
    "memories": MemoryStore,
    "ops": Operations,
}
"""Each store a batch can call, by attribute, with the protocol it follows (every store but ``batches``)."""


class _StoreMethods:
    """``stores.<store>`` at run time: one :class:`StoreMethod` attribute per public method of its protocol."""

    def __init__(self, store: str, protocol: type) -> None:
        for name, value in vars(protocol).items():
            if not name.startswith("_") and inspect.isfunction(value):
                setattr(self, name, StoreMethod(store, name))


class Stores:
    """The stores a batch names its calls by. Typed as the store protocols, so ``stores.runs.transition`` has
    the signature and the result type of :meth:`RunStore.transition`; at run time each method is only its name
    (:class:`StoreMethod`): calling it is an error, a :class:`Batch` is what calls it."""

    messages: ChatMessageStore
    runs: RunStore
    approvals: ApprovalStore
    ledger: ToolLedger
    policies: PolicyStore
    audit: AuditLog
    events: EventDedupe
    conversations: ConversationStore
    places: ApprovalPlaces
    leases: RunLeases
    inbox: ThreadInbox
    outbox: Outbox
    approver_groups: ApproverGroupStore
    access: AccessStore
    conditions: ConditionalRuleStore
    tool_settings: ToolSettingStore
    memories: MemoryStore
    ops: Operations

    def __init__(self) -> None:
        for store, protocol in STORE_PROTOCOLS.items():
            setattr(self, store, _StoreMethods(store, protocol))


stores = Stores()
"""Names store methods for a :class:`Batch`: ``batch.write(stores.runs.transition, ...)``."""


def checked_reads(batch: Batch) -> list[ReadStep]:
    """A read batch's reads, checked before any is made: reads only, of known stores, public methods."""
    checked: list[ReadStep] = []
    for step in batch.steps:
        if not isinstance(step, ReadStep):
            raise ValueError(f"a read batch takes only reads, not {step!r}")
        checked.append(step)
        if step.args_from is not None:  # a read batch's reads are independent of each other
            raise ValueError("a read batch's reads take their arguments as given, not args_from")
        if step.store not in STORE_NAMES or step.store == "batches":
            raise ValueError(f"a batch cannot read from {step.store!r}")
        if step.method.startswith("_"):
            raise ValueError(f"a batch cannot call {step.store}.{step.method}")
    return checked


def checked_writes(batch: Batch) -> list[Step]:
    """The batch's writes (and reads), checked before anything is written: known stores, public methods,
    audit last (no read after an append either: it would hold the chain's head longer).

    ``stores`` names only known stores' public methods, so only a hand-made :class:`StoreMethod` fails here."""
    checked = list(batch.steps)
    auditing = False
    for step in checked:
        if step.store not in STORE_NAMES or step.store == "batches":
            raise ValueError(f"a batch cannot write to {step.store!r}")
        if step.method.startswith("_"):
            raise ValueError(f"a batch cannot call {step.store}.{step.method}")
        if auditing and step.store != "audit":
            raise ValueError("audit appends come last in a batch (see WriteBatches)")
        auditing = auditing or step.store == "audit"
    return checked
