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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar

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
    Handle,
    MemoryStore,
    Operations,
    Outbox,
    PolicyStore,
    RunLeases,
    RunStore,
    ThreadInbox,
    ToolLedger,
)

P = ParamSpec("P")
T = TypeVar("T")

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
    "memories": MemoryStore,
    "ops": Operations,
}
"""Each store a batch can call, by attribute, with the protocol it follows (every store but ``batches``)."""


@dataclass(frozen=True)
class StoreMethod:
    """The runtime value of ``stores.<store>.<method>``: which store method a batch's write or read calls."""

    store: str
    method: str

    def __str__(self) -> str:
        return f"{self.store}.{self.method}"


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
    memories: MemoryStore
    ops: Operations

    def __init__(self) -> None:
        for store, protocol in STORE_PROTOCOLS.items():
            setattr(self, store, _StoreMethods(store, protocol))


stores = Stores()
"""Names store methods for a :class:`Batch`: ``batch.write(stores.runs.transition, ...)``."""


@dataclass(frozen=True)
class WriteStep:
    """One write of a :class:`Batch` as a backend runs it: ``<store>.<method>(*args, **kwargs)``, as the engine
    would call it alone. Made only by the batch (``batch.write``/``require``/``write_from``); callers hold handles.

    ``required``: the write is a compare-and-set; a falsy result (``False``, ``None``, ``0``) rolls the
    whole batch back, so nothing of it is written.

    ``args_from``: a write whose arguments depend on what the batch did before it (``write_from``). Called in the
    transaction, right before the write, with the results so far (in order), it returns ``(args, kwargs)`` to
    write with, or ``None`` to skip the write (its result is then ``None``, which refuses the batch if it is
    ``required``). It runs on the backend's writer, so it must be cheap and do no I/O. Unlike a read's, an
    exception from it fails the batch: a write's arguments are never guessed.
    """

    store: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    required: bool = False
    args_from: Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], dict[str, Any]] | None] | None = field(
        default=None, compare=False
    )

    def arguments(self, done: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The ``(args, kwargs)`` to write with after the batch's results ``done``; ``None``: skip the write."""
        if self.args_from is None:
            return self.args, self.kwargs
        return self.args_from(tuple(done))


@dataclass(frozen=True)
class ReadStep:
    """One read of a :class:`Batch` as a backend runs it: ``<store>.<method>(*args, **kwargs)``, as the engine
    would call it alone. Made only by the batch (``batch.read``/``read_from``).

    In :meth:`WriteBatches.apply <storage.protocols.WriteBatches.apply>` it runs in the batch's transaction, in
    its place among the writes, so it sees the writes before it and nothing another transaction commits later.
    A read never refuses a batch.

    ``args_from`` (``read_from``, in ``apply`` only): a read whose arguments depend on what the batch did before
    it. Called in the transaction, right before the read, with the results so far (in order), it returns
    ``(args, kwargs)`` to read with, or ``None`` to skip the read (its result is then ``None``). It runs on the
    backend's writer (SQLite: the writer thread, inside its group commit), so it must be cheap and do no I/O. An
    exception from it skips the read too: what it derives arguments from (e.g. a stored snapshot) is data, and
    bad data never fails the writes around it. For the same reason, such a read that finds a corrupt record
    (:class:`~storage.errors.CorruptRecord`, e.g. a stored message that no longer decodes) is skipped as well:
    its caller reads again itself and fails only what needs that data. Any other error of the read fails the
    batch, as any read's (the database failing).
    """

    store: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    required: bool = field(default=False, init=False)
    args_from: Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], dict[str, Any]] | None] | None = field(
        default=None, compare=False
    )

    @property
    def dependent(self) -> bool:
        """Whether its arguments come from the batch's earlier results (``args_from``)."""
        return self.args_from is not None

    def arguments(self, done: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The ``(args, kwargs)`` to read with after the batch's results ``done``; ``None``: skip the read."""
        if self.args_from is None:
            return self.args, self.kwargs
        try:
            return self.args_from(tuple(done))
        except Exception:  # see the class: bad data a read's arguments come from skips the read, never the batch
            return None


Step = WriteStep | ReadStep
"""One write or read of a batch, as a backend runs it."""


class Call(Generic[P]):
    """The arguments a derived write or read (``write_from``/``read_from``) is made with, checked against its method.

    >>> call(stores.audit.append_many, [("countersign", "expired", "a-1", {})], now=now)
    """

    def __init__(self, method: StoreMethod, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.method = method
        self.args = args
        self.kwargs = kwargs


def call(method: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Call[P]:
    """The arguments ``args``/``kwargs`` for ``method``, as a derived write or read returns them."""
    return Call(_named(method), args, kwargs)


class Results:
    """What a derived write or read sees of its batch: the results of the handles before it (``done[handle]``)."""

    def __init__(self, batch: Batch, done: tuple[Any, ...]) -> None:
        self._batch = batch
        self._done = done

    def __getitem__(self, handle: Handle[T]) -> T:
        if handle.batch is not self._batch:
            raise ValueError("this handle belongs to another batch")
        if handle.index >= len(self._done):
            raise LookupError(f"handle {handle.index} of the batch comes after the write or read asking for it")
        return self._done[handle.index]


class Batch:
    """A step's writes and reads, in order, each named by the handle adding it returned.

    Hand it to ``storage.batches.apply`` (writes and reads, one transaction) or, with reads only, to
    ``storage.batches.read`` (one read transaction); both answer a :class:`~storage.protocols.BatchOutcome`.
    """

    def __init__(self) -> None:
        self._steps: list[Step] = []
        self._handles: list[Handle[Any]] = []

    @property
    def handles(self) -> Sequence[Handle[Any]]:
        """Every handle of the batch, in the order of its writes and reads."""
        return tuple(self._handles)

    @property
    def steps(self) -> Sequence[Step]:
        """Its writes and reads, in order, as the backends run them (``steps[handle.index]`` is the handle's)."""
        return tuple(self._steps)

    def write(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Handle[T]:
        """Add the write ``method(*args, **kwargs)``."""
        named = _named(method)
        return self._add(WriteStep(named.store, named.method, args, kwargs))

    def require(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Handle[T]:
        """Add a compare-and-set write: if it answers no (a falsy result), nothing of the batch is written."""
        named = _named(method)
        return self._add(WriteStep(named.store, named.method, args, kwargs, required=True))

    def read(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Handle[T]:
        """Add the read ``method(*args, **kwargs)``: in its place, it sees the batch's writes before it."""
        named = _named(method)
        return self._add(ReadStep(named.store, named.method, args, kwargs))

    def write_from(
        self, method: Callable[P, T], derive: Callable[[Results], Call[P] | None], *, required: bool = False
    ) -> Handle[T | None]:
        """Add a write whose arguments ``derive`` works out, in the transaction, from earlier handles' results.

        ``derive`` returning ``None`` skips the write (its result is ``None``; a ``required`` one then refuses the
        batch); an exception from it fails the batch: a write's arguments are never guessed. It runs on the
        backend's writer, so it must be cheap and do no I/O.

        >>> expired = batch.write(stores.approvals.expire_due, now=now)
        >>> batch.write_from(stores.audit.append_many,
        ...     lambda done: call(stores.audit.append_many, entries_of(done[expired])) if done[expired] else None)
        """
        named = _named(method)
        return self._add(
            WriteStep(named.store, named.method, required=required, args_from=self._deriving(named, derive))
        )

    def read_from(self, method: Callable[P, T], derive: Callable[[Results], Call[P] | None]) -> Handle[T | None]:
        """Add a read whose arguments ``derive`` works out from earlier handles' results, as :meth:`write_from`.

        Unlike a write's, a read that cannot work out its arguments (``derive`` returns ``None`` or raises), or that
        finds a corrupt record, is skipped (its result is ``None``), never failing the batch: see
        :class:`ReadStep`.
        """
        named = _named(method)
        return self._add(ReadStep(named.store, named.method, args_from=self._deriving(named, derive)))

    def _deriving(
        self, named: StoreMethod, derive: Callable[[Results], Call[...] | None]
    ) -> Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], dict[str, Any]] | None]:
        def arguments(done: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
            derived = derive(Results(self, done))
            if derived is None:
                return None
            if derived.method != named:
                raise ValueError(f"a call of {derived.method} cannot make the arguments of {named}")
            return derived.args, derived.kwargs

        return arguments

    def _add(self, step: Step) -> Handle[Any]:
        if self._steps and self._steps[-1].store == "audit" and step.store != "audit":
            raise ValueError("audit appends come last in a batch (see WriteBatches)")
        handle: Handle[Any] = Handle(self, len(self._steps))
        self._steps.append(step)
        self._handles.append(handle)
        return handle


def _named(method: Callable[..., Any]) -> StoreMethod:
    """The store method ``stores.<store>.<method>`` names (a live store's method is refused: it would run now)."""
    if not isinstance(method, StoreMethod):
        raise TypeError(
            f"name a batch's call through storage.batch.stores (e.g. stores.runs.transition), not {method!r}"
        )
    return method


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
