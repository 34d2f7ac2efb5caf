"""The run lifecycle across processes: the heartbeat, the sweep, wake-ups and graceful shutdown.

Several ``countersign serve`` processes may share one database. The parts below keep their work apart and
make sure none of it is lost: owners, leases and fences (:mod:`bot.engine.leases`), the thread inbox
(:mod:`bot.engine.inbox`), recovery by what is durable (:mod:`bot.engine.recovery`) and the outbox
(:mod:`bot.engine.outbox`). This module runs them over time:

- **The heartbeat** renews this process's leases, and stops its work on any run taken over meanwhile.
- **The sweep** expires due approvals, sends due reminders, recovers abandoned runs, starts orphaned
  messages, delivers the outbox and applies retention.
- **Wake-ups.** A message stored behind another process's run wakes that process (PostgreSQL ``NOTIFY``);
  whoever is woken starts the thread's waiting messages at once instead of at its next sweep.
- **Graceful shutdown.** A stopping process takes no new work, lets in-flight work finish within a grace
  period, then releases its leases (and wakes the others) so another process continues at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.expiry import Expiry
from bot.engine.inbox import Inbox, Received
from bot.engine.leases import LeaseLost, Leases
from bot.engine.model import Inbound, ThreadRef
from bot.engine.notices import ApproverNotices
from bot.engine.outbox import Deliveries, thread_of
from bot.engine.recovery import HISTORY_LOOKBACK, MAX_RECOVERIES, NOT_RUN_AFTER_CRASH, Recovery, RecoveryReport
from bot.engine.retention import Retention
from bot.engine.threads import user_message
from bot.engine.work import Work
from storage.protocols import RunFence, Wakeup

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

__all__ = [
    "HISTORY_LOOKBACK",
    "MAX_RECOVERIES",
    "NOT_RUN_AFTER_CRASH",
    "LeaseLost",
    "Received",
    "RecoveryReport",
    "RunLifecycle",
    "user_message",
]

logger = logging.getLogger(__name__)

EVENT_RETENTION_SECONDS = 7 * 86400
"""How long a platform event id is remembered for deduplication."""


class RunLifecycle:
    """One process's side of the lifecycle: its heartbeat, sweep, wake-ups and shutdown, over the parts below."""

    def __init__(
        self,
        storage: AsyncStores,
        *,
        work: Work,
        leases: Leases,
        inbox: Inbox,
        recovery: Recovery,
        expiry: Expiry,
        notices: ApproverNotices,
        deliveries: Deliveries,
        retention: Retention,
        clock: Callable[[], datetime],
        heartbeat_seconds: float,
        sweep_interval_seconds: float,
        offers: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self.offers = offers
        """Issue 31: tells requesters they may break glass once a call waited past its tool's delay."""
        self.storage = storage
        self.work = work
        self.leases = leases
        self.inbox = inbox
        self.recovery = recovery
        self.expiry = expiry
        self.notices = notices
        self.deliveries = deliveries
        self.retention = retention
        self.clock = clock
        self.heartbeat_seconds = heartbeat_seconds
        self.sweep_interval_seconds = sweep_interval_seconds
        self._background: list[asyncio.Task[None]] = []

    # --- what other code asks of the lifecycle -------------------------------------------------------

    @property
    def owner(self) -> str:
        """This process's instance id: the owner of the runs it works on."""
        return self.leases.owner

    @property
    def stopping(self) -> bool:
        """Whether this process is shutting down (it takes no new work)."""
        return self.work.stopping

    def fence(self, run_id: str) -> RunFence | None:
        """The fence this process holds on the run while it works on it, else ``None``."""
        return self.leases.fence(run_id)

    async def beat(self) -> None:
        """One heartbeat (see :meth:`Leases.beat`)."""
        await self.leases.beat()

    async def receive(self, inbound: Inbound) -> Received | None:
        """Store a person's message in its thread's inbox (see :meth:`Inbox.receive`)."""
        return await self.inbox.receive(inbound)

    async def process(self, received: Received) -> None:
        """Process a received message's thread (see :meth:`Inbox.process`)."""
        await self.inbox.process(received)

    async def drain(self, thread: ThreadRef) -> None:
        """Start runs for the thread's waiting messages (see :meth:`Inbox.drain`)."""
        await self.inbox.drain(thread)

    async def recover(self) -> None:
        """Recover what stopped processes left (see :meth:`Recovery.recover`)."""
        await self.recovery.recover()

    # --- over time ----------------------------------------------------------------------------------

    async def listen(self) -> None:
        """Start receiving wake-ups (before recovery, so none sent meanwhile is missed); never fails the start.

        If the database refuses the listening connection now, it keeps being retried in the background and
        the sweep finds waiting messages meanwhile.
        """
        try:
            await self.storage.wakeups.listen()
        except Exception:
            logger.warning("not listening for wake-ups yet; the sweep finds waiting messages meanwhile", exc_info=True)

    def start(self, *, sweep: bool) -> None:
        """Start the heartbeat, acting on wake-ups, and the sweep if asked."""
        self._background.append(asyncio.create_task(self._heartbeat(), name="countersign-heartbeat"))
        self._background.append(asyncio.create_task(self._wakeups_forever(), name="countersign-wakeups"))
        if sweep:
            self._background.append(asyncio.create_task(self._sweep_forever(), name="countersign-sweep"))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                await self.leases.beat()
            except asyncio.CancelledError:
                raise
            except Exception:  # a missed beat is survivable; the lease is three beats long by default
                logger.exception("could not renew leases")

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_seconds)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # the sweep must outlive a transient storage error
                logger.exception("sweep failed")

    async def sweep(self) -> None:
        """One pass: expire due approvals, send due reminders, recover abandoned runs, start orphaned messages,
        deliver the outbox."""
        await self.expiry.sweep_expired()
        await self.notices.remind_due()
        if self.offers is not None:
            await self.offers()
        await self.recovery.recover()
        await self.storage.events.prune(EVENT_RETENTION_SECONDS)
        await self.retention.maybe_apply()

    async def _wakeups_forever(self) -> None:
        while True:
            self.woken(await self.storage.wakeups.next())

    def woken(self, wakeup: Wakeup) -> None:
        """Act on a wake-up: start the thread's waiting messages, or look at everything (as the sweep does)."""
        if self.work.stopping or wakeup.owner not in (None, self.leases.owner):
            return
        if wakeup.address is None:
            self.work.spawn(self._recover_quietly(), name="recover-on-wakeup")
            return
        thread = thread_of(wakeup.address)
        if self.work.thread_lock(thread.key).locked():
            return  # this process works on the thread: it drains the inbox when that work ends
        self.work.spawn(self.inbox.drain(thread), name=f"drain-{thread.key}")

    async def _recover_quietly(self) -> None:
        try:
            await self.recovery.recover()
        except Exception:  # the sweep tries again
            logger.exception("recovery after a wake-up failed")

    # --- shutdown -----------------------------------------------------------------------------------

    async def shutdown(self, grace: float) -> None:
        """Take no new work; let in-flight work finish within ``grace`` seconds; then release this process's runs."""
        self.work.stopping = True
        deadline = asyncio.get_running_loop().time() + grace
        while True:
            pending = [t for t in (*self.work.inflight, *self.work.tasks) if t is not asyncio.current_task()]
            if not pending:
                break
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
            await asyncio.wait(pending, timeout=remaining)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        released = await self.storage.leases.release(self.leases.owner, now=self.clock())
        if released:
            logger.info("released runs for another process", extra={"runs": released, "owner": self.leases.owner})
            await self.inbox.hand_over(None)
