"""Group commit: one writer thread runs queued writes in shared transactions, one commit for many.

With ``synchronous=FULL`` every commit waits for the disk (2-3 ms here), and an engine conversation
makes about 17 writes; a thousand concurrent conversations would queue 17,000 disk syncs. The writer
drains whatever is queued, runs each write in its own ``SAVEPOINT`` inside one ``BEGIN IMMEDIATE``
transaction, commits once, and only then reports each result: a caller still learns of its write
only after it is durable, and a failing write rolls back alone. Compare-and-set writes stay correct:
they run one after another on one connection, and the transaction holds SQLite's write lock against
other processes.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from storage.errors import StorageError
from storage.sqlite.connection import Connector
from storage.sqlite.delivery import STOP, Outcome, Target, batches, deliver, here, start

logger = logging.getLogger(__name__)

MAX_BATCH = 256
WRITER_THREAD_NAME = "countersign-db-writer"


class GroupCommitWriter:
    """Runs write operations on one thread, committing queued ones together.

    >>> writer = GroupCommitWriter(storage.connector)
    >>> writer.submit(lambda: storage.events.first_time("slack:Ev1")).result()
    True
    >>> writer.close()
    """

    def __init__(self, connector: Connector, *, max_batch: int = MAX_BATCH) -> None:
        self.connector = connector
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self.commits = 0
        """How many transactions were committed (each may hold many writes)."""
        self._thread = threading.Thread(target=self._loop, name=WRITER_THREAD_NAME, daemon=True)
        self._thread.start()

    def submit(self, operation: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Queue ``operation`` (which writes through the stores); its future resolves after the commit."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._put(operation, future)
        return future

    async def run(self, operation: Callable[[], Any]) -> Any:
        """:meth:`submit` for asyncio callers: results of one commit reach the loop with one wakeup."""
        target = here()
        self._put(operation, target)
        return await target

    def _put(self, operation: Callable[[], Any], target: Target) -> None:
        if self._closed:
            raise StorageError("storage is closed")
        self._queue.put((operation, target))

    def close(self) -> None:
        """Finish the queued writes, then stop the thread."""
        if not self._closed:
            self._closed = True
            self._queue.put(STOP)
            self._thread.join()

    def _loop(self) -> None:
        for batch in batches(self._queue, self.max_batch):
            self._run_batch(batch)

    @staticmethod
    def _undo_one(db: Any) -> bool:
        """Roll back to the operation's savepoint; ``False`` if the transaction itself is gone."""
        if not db.conn.in_transaction:
            return False
        try:
            db.execute("ROLLBACK TO countersign_op")
            db.execute("RELEASE countersign_op")
        except sqlite3.Error:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            return False
        return True

    def _run_batch(self, batch: list[tuple[Callable[[], Any], Target]]) -> None:
        live = [(op, target) for op, target in batch if start(target)]
        if not live:
            return
        try:
            db = self.connector.database()
            db.execute("BEGIN IMMEDIATE")
        except (sqlite3.Error, StorageError) as exc:
            error = exc if isinstance(exc, StorageError) else StorageError(f"SQLite error: {exc}")
            deliver((target, False, error) for _op, target in live)
            return
        outcomes: list[Outcome] = []
        execute = db.conn.execute  # the savepoints go straight to sqlite3: two statements per write
        for operation, target in live:
            execute("SAVEPOINT countersign_op")
            try:
                value = operation()
            except BaseException as exc:  # this write alone is undone; the batch goes on
                error = StorageError(f"SQLite error: {exc}") if isinstance(exc, sqlite3.Error) else exc
                if not self._undo_one(db):
                    # SQLite abandoned the whole transaction (e.g. disk full): nothing of the batch is written.
                    lost = StorageError(f"the transaction was rolled back: {error}")
                    deliver(
                        [(done, False, lost) for done, _ok, _value in outcomes]
                        + [(target, False, error)]
                        + [(waiting, False, lost) for _op, waiting in live[len(outcomes) + 1 :]]
                    )
                    return
                outcomes.append((target, False, error))
                continue
            execute("RELEASE countersign_op")
            outcomes.append((target, True, value))
        try:
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            logger.error("group commit failed", extra={"writes": len(outcomes)})
            error = StorageError(f"SQLite error on commit: {exc}")
            deliver((target, False, error) for target, _ok, _value in outcomes)
            return
        self.commits += 1
        deliver(outcomes)
