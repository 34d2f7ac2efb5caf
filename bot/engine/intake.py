"""Intake and access: which messages the bot acts on, who may ask it here, and storing what it acts on.

A message the bot does not act on (:mod:`bot.engine.listening`) is not stored; its author may get a private
note about an approval waiting in the thread. A person who may not ask here (:mod:`bot.engine.access`) is
told so privately, and the refusal is audited. Everything else goes to the thread's inbox.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.access import AccessControl
from bot.engine.inbox import Conversation, Inbox, Received
from bot.engine.listening import Listening, pending_note
from bot.engine.model import UNREAD, Inbound
from bot.engine.surface import Surface
from bot.engine.threads import quietly
from bot.engine.work import Work
from storage.batch import Batch
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)


class Intake:
    """Hears, admits and stores people's messages (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        surfaces: Mapping[str, Surface],
        *,
        listening: Listening,
        access: AccessControl,
        inbox: Inbox,
        work: Work,
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.surfaces = surfaces
        self.listening = listening
        self.access = access
        self.inbox = inbox
        self.work = work
        self.clock = clock

    async def receive(self, inbound: Inbound, conversation: Conversation | None = None) -> Received | None:
        """Store a person's message durably (once per platform event); ``None`` for a redelivery.

        Adapters await this before acknowledging the platform's event, then process it after. A message
        the bot does not act on is not stored (``None``); its author may get a private note about an
        approval waiting in the thread. ``conversation``: a reference the adapter keeps (key, data), saved with
        the message in its write, or alone when the message is not stored.
        """
        received = await self._receive(inbound, conversation)
        if received is None and conversation is not None:
            await self.storage.conversations.save(
                conversation[0], conversation[1]
            )  # the message was not stored: the reference is
        return received

    async def _receive(self, inbound: Inbound, conversation: Conversation | None) -> Received | None:
        if not self.listening.needs_read(inbound):
            hearing = await self.listening.hear(inbound)
            rules: Any = UNREAD
        else:  # the thread's latest run and the access rules: one round trip
            batch = Batch()
            latest, reading_rules = self.listening.read(batch, inbound), self.access.read(batch, inbound)
            read = await self.storage.batches.read(batch)
            rules = read[reading_rules]
            hearing = await self.listening.hear(inbound, read[latest])
        if hearing.waiting is not None:
            self.work.spawn(self._note_pending(inbound, hearing.waiting), name=f"note-{inbound.event_id}")
        if not hearing.act:
            return None
        refusal = await self.access.refusal(inbound, rules)
        if refusal is not None:
            await self.storage.audit.append(
                inbound.user, "ask refused", inbound.thread_ref.key, {"direct": inbound.is_direct}, now=self.clock()
            )
            surface = self._surface(inbound.platform)
            if surface is not None:
                self.work.spawn(
                    quietly(surface.tell_user(inbound.thread_ref, inbound.user, refusal)),
                    name=f"refuse-{inbound.event_id}",
                )
            return None
        return await self.inbox.receive(inbound, conversation)

    async def _note_pending(self, inbound: Inbound, record: ApprovalRecord) -> None:
        """Tell someone privately, once per approval, that it waits and who can decide it."""
        if not await self.storage.events.first_time(f"pending-note:{record.approval_id}:{inbound.user}"):
            return
        surface = self._surface(inbound.platform)
        if surface is not None:
            await quietly(surface.tell_user(inbound.thread_ref, inbound.user, pending_note(record)))

    def _surface(self, platform: str) -> Surface | None:
        surface = self.surfaces.get(platform)
        if surface is None:
            logger.error("no surface registered for platform", extra={"platform": platform})
        return surface
