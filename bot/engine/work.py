"""This process's background work: the tasks it runs, its per-thread locks, and whether it still takes work."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from typing import Any

from bot.engine.admission import Admission

DEFAULT_ACTIVE_RUNS = 20
"""The admission limit of a :class:`Work` built without one (``Config.active_runs_limit`` with its defaults)."""


class Work:
    """Tracks background tasks (resumes, recoveries, inbox drains) and in-flight message processing.

    >>> work = Work()
    >>> work.spawn(engine_part.resume("run-1"), name="resume-run-1")
    >>> await work.wait_idle()
    """

    def __init__(self, active_runs: int = DEFAULT_ACTIVE_RUNS) -> None:
        self.admission = Admission(active_runs)
        """At most ``active_runs`` runs work at once here; the others wait their turn (:mod:`bot.engine.admission`)."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """Background work in flight; :meth:`wait_idle` and shutdown wait for it."""
        self.inflight: set[asyncio.Task[Any]] = set()
        """Messages being processed now (an adapter's call), which a graceful shutdown also waits for."""
        self.stopping = False
        """Set by a graceful shutdown: this process takes no new work (stored work is another process's)."""
        # Weak: a thread's lock lives only while someone holds or awaits it, so idle threads cost nothing.
        self._thread_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` in the background; :meth:`wait_idle` and shutdown wait for it."""
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def track(self, task: asyncio.Task[Any] | None) -> None:
        """Count ``task`` as in-flight work that a graceful shutdown waits for."""
        if task is not None:
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)

    async def wait_idle(self) -> None:
        """Wait until every background task has finished (tasks may start further tasks)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def thread_lock(self, thread_key: str) -> asyncio.Lock:
        """This process's lock of a thread: spares a storage round trip when it already works on the thread.

        Only an optimisation: the database enforces one active run per thread across processes.
        """
        lock = self._thread_locks.get(thread_key)
        if lock is None:
            lock = asyncio.Lock()
            self._thread_locks[thread_key] = lock
        return lock
