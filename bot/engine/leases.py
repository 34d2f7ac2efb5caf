"""Owners, leases and fences: which runs this process works on, and the proof that they are still its own.

A process (its ``instance_id``) owns each run it works on until a lease expires, and renews the leases of
all its runs on a heartbeat (:meth:`Leases.beat`). It holds a :class:`~storage.protocols.RunFence` (its
instance id and the run's takeover generation) for each of them, and every durable write it makes for the
run is conditional on that fence in the same transaction. An owner that stalled past its lease and wakes
after a takeover has its first write refused: it drops the run at once, without a second result or answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from bot.engine.model import WORKING_RUN_STATUSES
from storage.protocols import RunFence, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

T = TypeVar("T")


class LeaseLost(Exception):
    """Another process took over the run this process was working on (its lease had expired)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} was taken over by another process")
        self.run_id = run_id


class Leases:
    """This process's runs: their fences while it works on them, and the leases it renews."""

    def __init__(
        self, storage: AsyncStores, *, owner: str, clock: Callable[[], datetime], lease_seconds: float
    ) -> None:
        self.storage = storage
        self.owner = owner
        self.clock = clock
        self.lease_seconds = lease_seconds
        self._working: dict[str, asyncio.Task[Any]] = {}
        self._lost: set[str] = set()
        self._fences: dict[str, RunFence] = {}
        self._held: dict[str, RunRecord] = {}

    def lease_until(self) -> datetime:
        """When a lease taken or renewed now expires."""
        return self.clock() + timedelta(seconds=self.lease_seconds)

    def fence(self, run_id: str) -> RunFence | None:
        """The fence this process holds on the run while it works on it, else ``None``."""
        return self._fences.get(run_id)

    def held(self, run_id: str) -> RunRecord | None:
        """The run as this process claimed it, while it works on it under :meth:`fence`, else ``None``.

        Its step and generation are still the run's: only the owner's pause moves the step (and ends the work),
        and a takeover, which moves the generation, fences out every write this process would make.
        """
        return self._held.get(run_id)

    @asynccontextmanager
    async def holding(self, run: RunRecord) -> AsyncIterator[RunFence | None]:
        """Work on a run this process just claimed, under the fence it claimed it with.

        Yields ``None`` (hold nothing, write nothing) if the run is not this process's: it was taken
        over between the claim and this read.
        """
        if run.owner != self.owner or not RunFence.of(run).holds_for(run):
            logger.warning("run taken over before work on it began; dropping it here", extra={"run_id": run.run_id})
            yield None
            return
        fence = RunFence.of(run)
        self._fences[run.run_id] = fence
        self._held[run.run_id] = run
        try:
            yield fence
        finally:
            if self._fences.get(run.run_id) == fence:
                del self._fences[run.run_id]
                del self._held[run.run_id]

    def dropped(self, run_id: str) -> None:
        """Log, once, that this process's write for a run was fenced out and its work on the run dropped."""
        logger.warning(
            "run taken over by another process; this process's work on it was dropped",
            extra={"run_id": run_id, "owner": self.owner},
        )

    async def beat(self) -> None:
        """Renew this process's leases; stop working on any run another process has taken over meanwhile.

        A process that stalled longer than its lease (a long pause, a suspended VM) finds its run continued
        elsewhere: it drops its own work on the run without writing anything, so nothing is done twice.
        """
        renewed = set(await self.storage.leases.renew(self.owner, self.lease_until()))
        for run_id, task in list(self._working.items()):
            if run_id in renewed or task.done():
                continue
            run: RunRecord = await self.storage.runs.get(run_id)
            # While this process works on it, only a take-over changes the run's owner or status.
            if run.status not in WORKING_RUN_STATUSES or run.owner != self.owner:
                logger.warning("another process took over a run; stopping here", extra={"run_id": run_id})
                self._lost.add(run_id)
                task.cancel()

    async def guarded(self, run_id: str, work: Awaitable[T]) -> T:
        """Await the agent's work on a run; :class:`LeaseLost` if the heartbeat finds the run taken over."""
        task = asyncio.ensure_future(work)
        self._working[run_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if run_id in self._lost and not (current is not None and current.cancelling()):
                raise LeaseLost(run_id) from None
            raise
        finally:
            self._working.pop(run_id, None)
            self._lost.discard(run_id)
            # The task holds the work's exception (a pause, usually), whose traceback holds this frame:
            # dropping the frame's reference leaves no cycle for the garbage collector to find.
            del task
