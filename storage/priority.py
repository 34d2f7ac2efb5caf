"""``urgent()``: mark the storage work of the current task as urgent, ahead of the queue for a connection.

A person's message must be stored before the platform's event is acknowledged (Slack waits 3 s). Under a
burst, every pooled connection is busy with runs' steps and a FIFO queue would put the acknowledgement
behind hundreds of them. A backend with a bounded pool (PostgreSQL) keeps a connection for urgent work: the
rest queue for the others. SQLite ignores it. The mark is a context variable: tasks the urgent work spawns
inherit it, which is meant for the short follow-ups of intake only.

>>> with urgent():
...     received = await storage.batches.apply(batch)   # stored ahead of the runs waiting for a connection
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

_URGENT: contextvars.ContextVar[bool] = contextvars.ContextVar("countersign_storage_urgent", default=False)


@contextmanager
def urgent() -> Iterator[None]:
    """Within the block, this task's storage work goes ahead of the queue for a connection."""
    token = _URGENT.set(True)
    try:
        yield
    finally:
        _URGENT.reset(token)


def is_urgent() -> bool:
    """Whether the current task's storage work is marked urgent."""
    return _URGENT.get()
