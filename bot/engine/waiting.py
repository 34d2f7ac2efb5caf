"""Whether messages wait in a thread's inbox, as the write that paused or ended its run read it."""

from __future__ import annotations

from collections.abc import Sequence

from bot.engine.model import ThreadRef
from storage.batch import Batch, stores
from storage.protocols import Handle, InboxItem


class WaitingSeen:
    """Per thread: what the last pause or end write of a run read of its inbox (the drain after it goes by it)."""

    def __init__(self) -> None:
        self._seen: dict[str, bool] = {}

    def read(self, batch: Batch, thread: ThreadRef) -> Handle[list[InboxItem]]:
        """The read of the thread's waiting messages that a run's pause or end makes in its own write (first).

        The drain after the run goes by it (:meth:`saw`) instead of reading again. It is as of that write: a
        message stored after it was stored by a writer that saw the run paused or ended, and that writer starts it
        or leaves it for the run's end. On PostgreSQL the read takes the thread's inbox lock (as ``enqueue`` does),
        so an enqueue in flight commits before it or waits for the run's write.
        """
        return batch.read(stores.inbox.waiting, thread.key)

    def saw(self, thread: ThreadRef, items: Sequence[InboxItem]) -> None:
        """Note what :meth:`read` found, for the thread's next drain."""
        self._seen[thread.key] = bool(items)

    def forget(self, thread: ThreadRef) -> None:
        """A run starts on the thread: what an earlier run's write found no longer holds."""
        self._seen.pop(thread.key, None)

    def take(self, thread: ThreadRef) -> bool | None:
        """What the last write found (once), or ``None`` when none has read it since."""
        return self._seen.pop(thread.key, None)
