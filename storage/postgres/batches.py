"""Write batches on PostgreSQL: :class:`PostgresWriteBatches`, several store writes in one transaction.

The design is :mod:`storage.batches`'s. Here the batch opens one transaction
(:meth:`PostgresDatabase.bound`) and awaits each write's store method in order; every statement those
methods make joins that transaction on its connection (their own ``transaction()`` blocks join it too, with no
savepoint: see :meth:`PostgresDatabase.transaction`). A ``required`` write that answers no, or any error, rolls
the whole transaction back.
"""

from __future__ import annotations

from typing import Any

from storage.batch import Batch, ReadStep, checked_reads, checked_writes
from storage.errors import CorruptRecord
from storage.protocols import BatchOutcome


class _Refused(Exception):
    """Raised inside the transaction to roll it back when a required write answered no."""

    def __init__(self, index: int) -> None:
        super().__init__(index)
        self.index = index


class PostgresWriteBatches:
    """Applies several writes through the stores of one :class:`PostgresStorage` in one transaction."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    async def read(self, batch: Batch) -> BatchOutcome:
        """Make ``batch``'s reads in order on one connection, in one transaction; see :class:`WriteBatches.read`."""
        calls = [(read, getattr(getattr(self.storage, read.store), read.method)) for read in checked_reads(batch)]
        async with self.storage.db.bound():
            return BatchOutcome(batch, [await method(*read.args, **read.kwargs) for read, method in calls])

    async def apply(self, batch: Batch) -> BatchOutcome:
        """Apply ``batch``'s writes in order, all or nothing; see :class:`storage.protocols.WriteBatches`."""
        calls = [(write, getattr(getattr(self.storage, write.store), write.method)) for write in checked_writes(batch)]
        results: list[Any] = []
        try:
            async with self.storage.db.bound():
                for index, (write, method) in enumerate(calls):
                    arguments = write.arguments(results)
                    try:
                        value = None if arguments is None else await method(*arguments[0], **arguments[1])
                    except CorruptRecord:  # decoded after the statement: the transaction is intact
                        if not (isinstance(write, ReadStep) and write.dependent):
                            raise
                        value = None  # bad data a dependent read found skips the read, never the batch (see ReadStep)
                    if write.required and not value:
                        raise _Refused(index)
                    results.append(value)
        except _Refused as refused:
            return BatchOutcome(batch, refused_by=batch.handles[refused.index])
        return BatchOutcome(batch, results)
