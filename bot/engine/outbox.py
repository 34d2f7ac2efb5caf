"""Messages owed to threads: written to the durable outbox first, then posted, then marked delivered.

A process may die between computing an answer and posting it, and a surface may be missing or
failing when a notice is due. So every message the engine owes a thread (answers, failure and
recovery notices) is stored in ``storage.outbox`` under a key that names why it is owed (adding the
same key again changes nothing), claimed by this process, posted, and marked delivered. What is left
undelivered is posted by the sweep (:meth:`Deliveries.deliver_due`) of whichever process has a surface
for the platform, once its claim has expired: at least once, never lost.

A :class:`~bot.engine.model.Note` (a notice that names people) is stored as JSON under a key in the
``note:`` namespace, so the sweep posts it as a note again; model text is never read as one.

A paused step's approval card is owed the same way (:func:`bot.engine.cards.owed_card`, the ``card:``
namespace), stored with the pause itself: a process that dies between storing a pause and showing it leaves
the card owed, and the sweep shows it (:attr:`Deliveries.show_card`, given at construction).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.engine.cards import CARD_KEY_PREFIX, card_step, owed_card
from bot.engine.model import Note, ThreadRef
from bot.engine.surface import Surface
from bot.engine.threads import thread_of_run
from storage import RunFence, ThreadAddress
from storage.batch import Batch, stores
from storage.protocols import Handle, TokenUsage

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

__all__ = [
    "CARD_KEY_PREFIX",
    "MAX_RETRY_SECONDS",
    "NOTE_KEY_PREFIX",
    "RETRY_AFTER_SECONDS",
    "Deliveries",
    "ShowCard",
    "Via",
    "address_of",
    "card_step",
    "owed_card",
    "thread_of",
]

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30.0
"""How long a message whose post failed waits before the sweep tries again (doubled per attempt, capped)."""
MAX_RETRY_SECONDS = 900.0
NOTE_KEY_PREFIX = "note:"
"""Outbox keys of messages stored as :class:`Note` JSON (only the engine chooses keys)."""
ShowCard = Callable[[ThreadRef, str, int], Awaitable[None]]
"""Shows a paused step's approvals in its thread: ``(thread, run_id, step)``; raises when it could not."""


Via = Callable[[str], Awaitable[bool]]
"""Shows a message's text some other way (a stream being finished); ``False`` when it could not."""


def address_of(thread: ThreadRef) -> ThreadAddress:
    """The storage address of an engine thread."""
    return ThreadAddress(thread.key, thread.platform, thread.workspace, thread.channel, thread.thread)


def thread_of(address: ThreadAddress) -> ThreadRef:
    """The engine thread of a storage address."""
    return thread_of_run(address)


class Deliveries:
    """Owes, posts and retries the messages of one process (``owner``) through its surfaces.

    >>> deliveries = Deliveries(storage, surfaces, owner="host-1-a", clock=utcnow, claim_seconds=30)
    >>> await deliveries.say(thread, "Deleted a.txt.", key="answer:run-1")
    """

    def __init__(
        self,
        storage: AsyncStores,
        surfaces: Mapping[str, Surface],
        *,
        owner: str,
        clock: Callable[[], datetime],
        claim_seconds: float,
        show_card: ShowCard | None = None,
    ) -> None:
        self.storage = storage
        self.surfaces = surfaces
        self.owner = owner
        self.clock = clock
        self.claim_seconds = claim_seconds
        self.show_card = show_card
        """How an owed approval card is shown; ``None``: cards wait for a process that can show them."""

    async def owe(
        self,
        thread: ThreadRef,
        text: str | Note,
        key: str,
        finishes_run: str | None = None,
        fence: RunFence | None = None,
    ) -> bool:
        """Store the message durably, claimed by this process if it can post it; ``False`` if already owed.

        ``finishes_run``: the message is that run's answer, and the run is marked finished in the same write.
        ``fence``: only while this process still owns the run (else ``False``, nothing stored, nothing posted).
        """
        now = self.clock()
        claimed_by, claim_until = self._claim(thread, now)
        key, stored = _stored(key, text)
        return bool(
            await self.storage.outbox.add(
                key,
                address_of(thread),
                stored,
                claimed_by=claimed_by,
                claim_until=claim_until,
                now=now,
                finishes_run=finishes_run,
                fence=fence,
            )
        )

    def owe_in(
        self,
        batch: Batch,
        thread: ThreadRef,
        text: str | Note,
        key: str,
        finishes_run: str | None = None,
        fence: RunFence | None = None,
        *,
        required: bool = True,
        usage: TokenUsage | None = None,
    ) -> Handle[bool]:
        """:meth:`owe` as a write added to ``batch``. ``required`` (the default): a message owed already (or a
        fence that no longer holds) writes nothing of the batch; else the batch goes on without it. ``usage``: the
        token usage of the run the message finishes, recorded by the same write."""
        now = self.clock()
        claimed_by, claim_until = self._claim(thread, now)
        key, stored = _stored(key, text)
        add = batch.require if required else batch.write
        return add(
            stores.outbox.add,
            key,
            address_of(thread),
            stored,
            claimed_by=claimed_by,
            claim_until=claim_until,
            now=now,
            finishes_run=finishes_run,
            fence=fence,
            usage=usage,
        )

    def _claim(self, thread: ThreadRef, now: datetime) -> tuple[str | None, datetime | None]:
        """Who claims a message owed now (this process, if it can post in the thread's platform), and until when."""
        if thread.platform not in self.surfaces:
            return None, None
        return self.owner, now + timedelta(seconds=self.claim_seconds)

    async def post(self, thread: ThreadRef, text: str | Note, key: str, via: Via | None = None) -> bool:
        """Post a message this process owes and has claimed; mark it delivered. ``False`` if it stays owed.

        ``via``: another way to show the text first (finishing a streamed message); when it returns
        ``False`` the text is posted as usual. A :class:`Note` is always posted.
        """
        if via is not None and isinstance(text, str):
            try:
                shown = await via(text)
            except Exception:  # the usual post below still delivers it
                logger.warning("could not show a message through its stream", extra={"key": key}, exc_info=True)
                shown = False
            if shown:
                await self.storage.outbox.delivered(key, now=self.clock())
                return True
        key, stored = _stored(key, text)
        return await self._deliver(key, thread, stored, attempts=0)

    async def say(self, thread: ThreadRef, text: str | Note, key: str, via: Via | None = None) -> bool:
        """:meth:`owe` then :meth:`post`: the usual way to tell a thread something."""
        if not await self.owe(thread, text, key):
            return False  # owed already (a retry, a recovery): whoever holds it, or the sweep, posts it
        return await self.post(thread, text, key, via)

    async def deliver_due(self, limit: int = 100) -> int:
        """Post undelivered messages for the platforms this process serves; returns how many were posted."""
        now = self.clock()
        posted = 0
        for message in await self.storage.outbox.due(sorted(self.surfaces), now=now, limit=limit):
            until = now + timedelta(seconds=self.claim_seconds)
            if not await self.storage.outbox.claim(message.key, self.owner, until, now=now):
                continue  # another process took it
            if await self._deliver(message.key, thread_of(message.address), message.text, message.attempts):
                posted += 1
        return posted

    async def _deliver(self, key: str, thread: ThreadRef, text: str, attempts: int) -> bool:
        surface = self.surfaces.get(thread.platform)
        if surface is None:
            logger.warning(
                "no surface for the platform; the message waits in the outbox",
                extra={"platform": thread.platform, "key": key},
            )
            return False
        try:
            if key.startswith(CARD_KEY_PREFIX):
                if self.show_card is None:
                    return False  # this process cannot show cards: it stays claimed until the claim expires
                named = card_step(text)
                if named is not None:
                    await self.show_card(thread, *named)
                else:  # damaged outside countersign: nothing can be shown for it
                    logger.warning("an owed approval card names no step; dropped", extra={"key": key})
            else:
                await surface.post_reply(thread, Note.from_json(text) if key.startswith(NOTE_KEY_PREFIX) else text)
        except Exception:  # the message stays owed: the sweep posts it later
            logger.warning("could not post a message; it waits in the outbox", extra={"key": key}, exc_info=True)
            await self.retry_later(key, attempts)
            return False
        await self.storage.outbox.delivered(key, now=self.clock())
        return True

    async def retry_later(self, key: str, attempts: int = 0) -> None:
        """Release this process's claim on an owed message it could not post: the sweep tries again after a delay
        (doubled per attempt, capped)."""
        delay = min(RETRY_AFTER_SECONDS * 2**attempts, MAX_RETRY_SECONDS)
        await self.storage.outbox.retry_later(key, self.clock() + timedelta(seconds=delay))


def _stored(key: str, text: str | Note) -> tuple[str, str]:
    """The outbox key and text of a message: a note goes under the ``note:`` namespace, as JSON."""
    if isinstance(text, Note):
        return NOTE_KEY_PREFIX + key, text.to_json()
    return key, text
