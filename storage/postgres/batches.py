"""Write batches on PostgreSQL: :class:`PostgresWriteBatches`, several store writes in one transaction.

The design is :mod:`storage.batches`'s. Here the batch opens one transaction
(:meth:`PostgresDatabase.bound`) and awaits each write's store method in order; every statement those
methods make joins that transaction on its connection (their own ``transaction()`` blocks join it too, with no
savepoint: see :meth:`PostgresDatabase.transaction`). A ``required`` write that answers no, or any error, rolls
the whole transaction back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

from storage.errors import CorruptRecord
from storage.protocols import BatchOutcome, Read, Write, checked_reads, checked_writes, read_outcome

if TYPE_CHECKING:
    from storage.batch import Batch


class _Refused(Exception):
    """Raised inside the transaction to roll it back when a required write answered no."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class PostgresWriteBatches:
    """Applies several writes through the stores of one :class:`PostgresStorage` in one transaction."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    @overload
    async def read(self, reads: Batch) -> BatchOutcome: ...

    @overload
    async def read(self, reads: list[Read] | tuple[Read, ...]) -> tuple[Any, ...]: ...

    async def read(self, reads: Sequence[Read] | Batch) -> tuple[Any, ...] | BatchOutcome:
        """Make ``reads`` in order on one connection, in one transaction; see :class:`WriteBatches.read`.

        >>> await storage.batches.read([Read("runs", "latest_for_thread", ("slack:T1:C1:170.1",))])
        (RunRecord(...),)
        """
        calls = [(read, getattr(getattr(self.storage, read.store), read.method)) for read in checked_reads(reads)]
        async with self.storage.db.bound():
            return read_outcome(reads, tuple([await method(*read.args, **read.kwargs) for read, method in calls]))

    async def apply(self, writes: Sequence[Write | Read]) -> BatchOutcome:
        """Apply ``writes`` in order, all or nothing; see :class:`storage.protocols.WriteBatches`.

        >>> (await storage.batches.apply([Write("runs", "record_usage", ("run-1", TokenUsage(21, 7, 28)))])).applied
        True
        """
        calls = [(write, getattr(getattr(self.storage, write.store), write.method)) for write in checked_writes(writes)]
        results: list[Any] = []
        try:
            async with self.storage.db.bound():
                for index, (write, method) in enumerate(calls):
                    arguments = write.arguments(results)
                    try:
                        value = None if arguments is None else await method(*arguments[0], **arguments[1])
                    except CorruptRecord:  # decoded after the statement: the transaction is intact
                        if not (isinstance(write, Read) and write.dependent):
                            raise
                        value = None  # bad data a dependent read found skips the read, never the batch (see Read)
                    if write.required and not value:
                        raise _Refused(index)
                    results.append(value)
        except _Refused as refused:
            return BatchOutcome(applied=False, refused=refused.index, source=writes)
        return BatchOutcome(applied=True, results=tuple(results), source=writes)
