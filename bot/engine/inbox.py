"""The thread inbox: every message is stored in its thread's inbox before anything else, then run in order.

A run starts for the oldest waiting message only when the thread has no active run (one transaction in
storage), so messages are processed in order, one run at a time, by whichever process gets there. The
process that ends or pauses a run drains the inbox; the sweep starts what a dead process left. A message
stored behind another process's run wakes that process (PostgreSQL ``NOTIFY``); a stopping process wakes
the others for what it leaves behind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from bot.engine.ahead import ReadsAhead
from bot.engine.history import StepHistory
from bot.engine.leases import Leases
from bot.engine.listening import Listening
from bot.engine.model import Inbound, ThreadRef
from bot.engine.outbox import address_of
from bot.engine.running import Runner
from bot.engine.superseding import Superseding
from bot.engine.surface import Surface
from bot.engine.threads import user_message
from bot.engine.waiting import WaitingSeen
from bot.engine.work import Work
from bot.messages import new_id
from storage.batch import Batch, stores
from storage.protocols import InboxItem, RunRecord, ThreadAddress

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

Started = tuple[RunRecord, InboxItem]
"""A run started for a thread's oldest waiting message, with that message's inbox item (this process owns it)."""


Conversation = tuple[str, dict[str, Any]]
"""A platform conversation reference an adapter stores with a message: its key and data (``save_conversation``)."""


Behind = Literal["free", "elsewhere", "paused", "superseded"]
"""What a drain found when no run started for its thread (see :meth:`Inbox._behind_active`)."""


@dataclass(frozen=True)
class Received:
    """A message stored in its thread's inbox, not yet processed."""

    thread: ThreadRef
    item_id: int
    message_id: str | None
    started: Started | None = None
    """The run started for the thread's oldest waiting message in the same write (this process owns it)."""
    admitted: bool = False
    """A place among this process's working runs (:mod:`bot.engine.admission`) was taken for the thread's run;
    :meth:`Inbox.process` uses it, or gives it back."""


class Inbox:
    """Stores messages in their threads' inboxes and starts their runs in order (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        surfaces: Mapping[str, Surface],
        *,
        work: Work,
        leases: Leases,
        waiting: WaitingSeen,
        ahead: ReadsAhead,
        history: StepHistory,
        listening: Listening,
        superseding: Superseding,
        runner: Runner,
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.surfaces = surfaces
        self.work = work
        self.leases = leases
        self.waiting = waiting
        self.ahead = ahead
        self.history = history
        self.listening = listening
        self.superseding = superseding
        self.runner = runner
        self.clock = clock

    async def receive(self, inbound: Inbound, conversation: Conversation | None = None) -> Received | None:
        """Store a person's message in its thread's inbox, durably; ``None`` for a redelivered event.

        The platform's event id is marked seen in the same write, so a redelivery is stored once. An
        adapter awaits this before it acknowledges the event: what the platform saw acknowledged is stored.
        ``conversation``: a conversation reference (key, data) the adapter keeps with the message, saved in
        the same write (one transaction before the acknowledgement, not two).
        """
        thread = inbound.thread_ref
        now = self.clock()
        message = user_message(inbound)
        address, stored = address_of(thread), message.to_dict()
        event_key = f"{inbound.platform}:event:{inbound.event_id}"
        started = None
        admission = self.work.admission
        # The run starts in the same write only with a place free among this process's runs: under a burst the
        # message is stored alone, acknowledged at once, and its run waits its turn in the inbox (stored).
        admitted = not self.work.stopping and not self.work.thread_lock(thread.key).locked() and admission.try_enter()
        if not admitted:
            # A batch even alone: on PostgreSQL a batch is one pipeline, with no BEGIN and COMMIT of its own.
            batch = Batch()
            enqueued = batch.require(
                stores.inbox.enqueue, address, inbound.user, stored, inbound.message_id, now=now, event_key=event_key
            )
            if conversation is not None:
                batch.write(stores.conversations.save, conversation[0], conversation[1])
            item_id = (await self.storage.batches.apply(batch)).get(enqueued)
        else:
            batch = Batch()
            enqueued = batch.require(
                stores.inbox.enqueue, address, inbound.user, stored, inbound.message_id, now=now, event_key=event_key
            )
            # The thread is free here: the run for its oldest waiting message starts in the same write (one round
            # trip; the database still allows one active run per thread), and :meth:`process` runs it.
            starting = batch.write(
                stores.inbox.start_next, thread.key, new_id(), self.leases.owner, self.leases.lease_until(), now=now
            )
            if conversation is not None:
                batch.write(stores.conversations.save, conversation[0], conversation[1])
            # What the run reads first (its history, with this message, and its memories) is read in the same write,
            # after the run and its message are stored: what the run would read itself, one round trip less each.
            ahead = self.ahead.for_message(batch, inbound, message)
            try:
                outcome = await self.storage.batches.apply(batch)
            except BaseException:
                admission.leave()
                raise
            item_id, started = outcome.get(enqueued), outcome.get(starting)
            if started is not None:
                self.history.prefetched(started[0].run_id, [(read.call, outcome[read.handle]) for read in ahead])
        if item_id is None:
            if admitted:
                admission.leave()
            logger.info("duplicate event ignored", extra={"event_id": inbound.event_id})
            return None
        return Received(thread, item_id, inbound.message_id, started, admitted)

    async def process(self, received: Received) -> None:
        """Process the thread of a received message (or leave the message queued behind its active run)."""
        if self.work.stopping:
            if received.admitted:
                self.work.admission.leave()
            await self.hand_over(address_of(received.thread))  # stored: another process starts it
            return
        self.work.track(asyncio.current_task())
        await self.drain(
            received.thread,
            waiting=(received.item_id, received.message_id),
            started=received.started,
            admitted=received.admitted,
        )

    async def drain(
        self,
        thread: ThreadRef,
        waiting: tuple[int, str | None] | None = None,
        started: Started | None = None,
        admitted: bool = False,
    ) -> None:
        """Start runs for the thread's waiting messages, oldest first, while the thread is free.

        ``waiting`` names a message just stored: if it cannot start now, the person is shown that it is queued.
        ``started``: the run :meth:`receive` started already (with its inbox item); it runs first.
        ``admitted``: :meth:`receive` took a place for the thread's run already (:mod:`bot.engine.admission`).
        Each run takes a place before it starts (waiting its turn, the message still waiting in the inbox), and
        gives it back when it ends or pauses.
        """
        admission = self.work.admission
        lock = self.work.thread_lock(thread.key)
        shown = False
        if waiting is not None and started is None and lock.locked():
            # This process is busy with the thread: the holder starts the message.
            shown = await self._show_queued(thread, waiting)
        held = admitted  # whether this drain holds a place now
        try:
            async with lock:
                fresh = waiting is not None  # a message was just stored: try to start at once
                while not self.work.stopping:
                    if started is None:
                        if not fresh and not await self._anything_waits(thread):
                            return
                        if not held:  # every place taken: the message waits its turn, "waiting" in the inbox
                            await admission.enter()
                            held = True
                            if self.work.stopping:
                                break
                        starting = Batch()
                        start = starting.write(
                            stores.inbox.start_next,
                            thread.key,
                            new_id(),
                            self.leases.owner,
                            self.leases.lease_until(),
                            now=self.clock(),
                        )
                        started = (await self.storage.batches.apply(starting))[start]
                    fresh = False
                    if started is None:
                        behind = await self._behind_active(thread)
                        if behind == "superseded":
                            continue
                        if behind == "elsewhere" and waiting is not None and not shown:
                            shown = await self._show_queued(thread, waiting)  # another process runs this thread
                        return
                    (run, item), started = started, None
                    # The place goes with the run (a started run always holds one), which gives it back.
                    reserved, held = held, False
                    async with admission.admitted(run.run_id, reserved=reserved), self.leases.holding(run) as fence:
                        if fence is not None:
                            await self.runner.run_agent(
                                run.run_id,
                                thread,
                                run.requester,
                                self.runner.from_history(run.run_id, thread),
                                message_id=item.message_ref,
                            )
                # Stopping: what still waits for the thread is another process's to start.
                await self.hand_over(address_of(thread), unless_empty=True)
        finally:
            if held:
                admission.leave()

    async def _anything_waits(self, thread: ThreadRef) -> bool:
        """Whether a message waits for the thread, after a run: as its pause or end write read it, else read now.

        A writer that saw the run active has committed its message before looking, so this read sees it.
        """
        seen = self.waiting.take(thread)
        return seen if seen is not None else bool(await self.storage.inbox.waiting(thread.key))

    async def _behind_active(self, thread: ThreadRef) -> Behind:
        """Why nothing started for the thread: no active run, or one that runs elsewhere, or a paused one that a
        waiting message may replace (it is superseded here, so the drain tries again)."""
        active: RunRecord | None = await self.storage.runs.active_for_thread(thread.key)
        if active is None:
            return "free"
        if active.status != "paused":
            return "elsewhere"
        queued = await self.storage.inbox.waiting(thread.key)
        # Messages queued while the run ran, none by someone who may replace it: they wait for its end.
        if not any([await self.listening.may_supersede(active, q.requester) for q in queued]):
            return "paused"
        await self.superseding.supersede(active)
        return "superseded"

    async def _show_queued(self, thread: ThreadRef, waiting: tuple[int, str | None]) -> bool:
        surface = self.surfaces.get(thread.platform)
        if surface is not None:
            try:
                await surface.show_queued(thread, waiting[1])
            except Exception:  # cosmetic: the message is queued either way
                logger.warning("could not show that a message is queued", exc_info=True)
        return True

    async def hand_over(self, address: ThreadAddress | None, *, unless_empty: bool = False) -> None:
        """Wake the other processes for work this stopping process leaves behind (``None``: runs it released).

        ``unless_empty``: only if the thread's inbox holds a message (a stopping drain that started nothing).
        """
        try:
            if unless_empty and address is not None and not await self.storage.inbox.waiting(address.chat_history_id):
                return
            await self.storage.wakeups.wake(address)
        except Exception:  # the work is stored either way: another process's sweep finds it
            logger.warning("could not wake another process; its sweep will find the work", exc_info=True)
