"""Write batches on SQLite: :class:`SQLiteWriteBatches`, several writes of one step in one transaction.

Design. The engine's steps each make a few writes (a pause: the run's usage, its approvals, the run's
status and snapshot, the audit entry). One call per write costs one round trip to a storage thread each,
and on PostgreSQL one network round trip and one commit each. A batch describes the step's writes as
a :class:`~storage.batch.Batch` (each write the store method it calls, with its arguments) and applies them
with one call:

- **One mechanism, no new SQL.** Each write is the store method the engine would call alone, so it keeps
  its meaning exactly (fences, compare-and-sets, validation, the audit chain); the batch adds only
  atomicity. Both backends run the same list the same way; the engine never learns which it has.
- **SQLite: one hop.** ``batches.apply`` is a write like any other, so the async facade sends it to the
  group-commit writer thread as one operation: the writes run one after another inside the writer's
  transaction, each store joining it (``Connector.writing`` nests), under a ``SAVEPOINT`` of the batch's own.
  A write that raises, or a ``required`` one (a compare-and-set) that answers no, rolls back to that
  savepoint: nothing of the batch is written, the rest of the group commit is untouched.
- **PostgreSQL: one connection, one transaction** (:mod:`storage.postgres.batches`): the batch binds the
  transaction's connection for the stores' statements, which then run on it instead of the pool.
- **Reads join.** A read in the batch (``batch.read``) is the store's read method, run in its
  place in the same transaction (on SQLite on the writer's connection): it sees the batch's writes before
  it, and what it reads is what the step committed with (e.g. the thread's waiting messages as of a pause).
- **Dependent reads.** A read's arguments may come from the results before it (``batch.read_from``), e.g. the
  history a decided step's snapshot refers to, read only if the batch's claim won: one round trip, not two.
- **Read batches.** ``batches.read(batch)``, a batch of reads only, makes several independent reads of one step (e.g. a
  message's arrival: the thread's latest run and the channel's access rules) in one round trip: on SQLite one
  hop to a reader thread, in one read transaction (one snapshot); on PostgreSQL on one connection.
- **Audit last.** Appends to the hash chain come after every other write of a batch (checked): PostgreSQL
  locks the chain's head from an append to the commit, so batches take their locks in one order.

>>> batch = Batch()
>>> moved = batch.require(stores.runs.transition, "run-1", "running", "paused")
>>> audit_id = batch.write(stores.audit.append, "U1", "paused", "run-1", {"step": 1})
>>> outcome = storage.batches.apply(batch)
>>> outcome.applied, outcome[moved], outcome[audit_id]
(True, True, 1)
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

from storage.batch import Batch, ReadStep, checked_reads, checked_writes
from storage.errors import CorruptRecord
from storage.protocols import BatchOutcome

SAVEPOINT = "countersign_batch"


class SQLiteWriteBatches:
    """Applies several writes through the stores of one :class:`storage.Storage` in one transaction."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    def read(self, batch: Batch) -> BatchOutcome:
        """Make ``batch``'s reads in one read transaction (one hop to a reader thread); see
        :class:`WriteBatches.read`."""
        calls = [(read, getattr(getattr(self.storage, read.store), read.method)) for read in checked_reads(batch)]
        with self.storage.connector.reading() as db:
            # The stores' reads on this thread join it (their reading() is this connection): one snapshot.
            own = not db.conn.in_transaction
            if own:
                db.execute("BEGIN")
            try:
                return BatchOutcome(batch, [method(*read.args, **read.kwargs) for read, method in calls])
            finally:
                if own and db.conn.in_transaction:
                    db.execute("COMMIT")

    def apply(self, batch: Batch) -> BatchOutcome:
        """Apply ``batch``'s writes in order, all or nothing; see :class:`storage.protocols.WriteBatches`."""
        calls = [(write, getattr(getattr(self.storage, write.store), write.method)) for write in checked_writes(batch)]
        with self.storage.connector.writing() as db:
            db.execute(f"SAVEPOINT {SAVEPOINT}")
            results: list[Any] = []
            try:
                for index, (write, method) in enumerate(calls):
                    arguments = write.arguments(results)
                    try:
                        value = None if arguments is None else method(*arguments[0], **arguments[1])
                    except CorruptRecord:
                        if not (isinstance(write, ReadStep) and write.dependent):
                            raise
                        value = None  # bad data a dependent read found skips the read, never the batch (see ReadStep)
                    if write.required and not value:
                        _undo(db)
                        return BatchOutcome(batch, refused_by=batch.handles[index])
                    results.append(value)
            except BaseException:
                _undo(db)
                raise
            db.execute(f"RELEASE {SAVEPOINT}")
        return BatchOutcome(batch, results)


def _undo(db: Any) -> None:
    """Roll back to the batch's savepoint (unless SQLite already abandoned the whole transaction)."""
    if not db.conn.in_transaction:
        return
    # If the transaction is gone meanwhile, the caller's writing() (or the group commit) rolls back.
    with contextlib.suppress(sqlite3.Error):
        db.execute(f"ROLLBACK TO {SAVEPOINT}")
        db.execute(f"RELEASE {SAVEPOINT}")
