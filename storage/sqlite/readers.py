"""Reader threads for the async facade: reads run in parallel and their results reach asyncio in batches."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from storage.errors import StorageError
from storage.sqlite.delivery import STOP, Outcome, batches, deliver, here

READER_THREADS = 4
MAX_BATCH = 32
READER_THREAD_NAME = "countersign-db-reader"


class ReadWorkers:
    """A few threads, each with its own SQLite connection, that run read-only store calls.

    >>> readers = ReadWorkers()
    >>> await readers.run(lambda: storage.runs.get("run-1"))
    >>> readers.close()
    """

    def __init__(self, threads: int = READER_THREADS, *, max_batch: int = MAX_BATCH) -> None:
        self.max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"{READER_THREAD_NAME}_{i}", daemon=True) for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, operation: Callable[[], Any]) -> Any:
        """Run ``operation`` on a reader thread and return its result."""
        if self._closed:
            raise StorageError("storage is closed")
        target = here()
        self._queue.put((operation, target))
        return await target

    def close(self) -> None:
        """Finish the queued reads, then stop the threads."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(STOP)
        for thread in self._threads:
            thread.join()

    def _loop(self) -> None:
        for batch in batches(self._queue, self.max_batch):
            outcomes: list[Outcome] = []
            for operation, target in batch:
                try:
                    outcomes.append((target, True, operation()))
                except BaseException as exc:  # delivered to the caller, like any executor would
                    outcomes.append((target, False, exc))
            deliver(outcomes)
