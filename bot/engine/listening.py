"""Whom the bot listens to in a thread, and who may supersede an approval that waits there.

The one place these rules live (adapters only say who wrote, where, and whether the bot was mentioned):

- A direct message is always addressed to the bot.
- In a channel thread, ``COUNTERSIGN_REPLY_MODE`` decides: ``requester`` (default) acts on a reply that
  mentions the bot or comes from the person who started the thread's current run; ``mention`` only on
  mentions; ``all`` on every reply. A reply the bot does not act on is never stored and changes nothing.
- While an approval waits, only a message the bot acts on from the requester or an admin starts
  something new (which supersedes the approval). Anyone else who writes gets a private note, once per
  person per approval: an approval is pending, and who can decide it. No model call is made for them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.engine.decisions import who_decides
from bot.engine.model import PENDING, UNREAD, Inbound, Note
from storage.batch import Batch, stores
from storage.protocols import ApprovalRecord, Handle, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

REQUESTER, MENTION, ALL = "requester", "mention", "all"


@dataclass(frozen=True)
class Hearing:
    """What the engine does with one inbound message: act on it, or not; and the approval to tell about."""

    act: bool
    waiting: Any = None
    """When not acting because an approval waits: one pending approval record of the paused step."""


class Listening:
    """Decides whether the bot acts on an inbound message (see the module docstring).

    >>> (await Listening(storage, "requester", roles).hear(inbound)).act
    True
    """

    def __init__(self, storage: AsyncStores, reply_mode: str, roles: Any) -> None:
        self.storage = storage
        self.reply_mode = reply_mode
        self.roles = roles

    def needs_read(self, inbound: Inbound) -> bool:
        """Whether :meth:`hear` needs a read for ``inbound`` (:meth:`read`; a direct message needs none)."""
        return not inbound.is_direct

    def read(self, batch: Batch, inbound: Inbound) -> Handle[RunRecord | None]:
        """Add the read :meth:`hear` needs for ``inbound`` to ``batch``, to make together with others."""
        return batch.read(stores.runs.latest_for_thread, inbound.thread_ref.key)

    async def hear(self, inbound: Inbound, latest: Any = UNREAD) -> Hearing:
        """Whether to act on ``inbound``; when an approval waits and it may not supersede it, that approval.

        ``latest``: the result of :meth:`read`, if the caller made it (else it is read here).
        """
        if inbound.is_direct:
            return Hearing(act=True)  # a DM is one person's conversation with the bot; its own run supersedes
        if latest is UNREAD:
            latest = await self.storage.runs.latest_for_thread(inbound.thread_ref.key)
        addressed = (
            inbound.mentioned
            or self.reply_mode == ALL
            or (self.reply_mode == REQUESTER and latest is not None and latest.requester == inbound.user)
        )
        waiting = await self._waiting_approval(latest)
        if waiting is None:
            return Hearing(act=addressed)
        assert latest is not None  # an approval waits in it
        if addressed and await self.may_supersede(latest, inbound.user):
            return Hearing(act=True)
        if inbound.user == latest.requester:
            return Hearing(act=False)  # the requester chatting without addressing the bot: nothing to tell
        return Hearing(act=False, waiting=waiting)

    async def may_supersede(self, run: RunRecord, user: str) -> bool:
        """Whether a message from ``user`` may replace the paused ``run`` (and close its approvals)."""
        return user == run.requester or await self.roles.is_admin(user, run.platform)

    async def _waiting_approval(self, run: RunRecord | None) -> ApprovalRecord | None:
        if run is None or run.status != "paused":
            return None
        pending = [r for r in await self.storage.approvals.for_run(run.run_id, step=run.step) if r.status == PENDING]
        return pending[0] if pending else None


def pending_note(record: ApprovalRecord) -> Note:
    """The private note for someone who writes while ``record`` waits and may not start something new."""
    return Note(
        (
            f"An approval is pending in this thread ({record.tool_name}), so I am not acting on your message. "
            "It can be decided by ",
            *who_decides(record),
            ". Only the person who asked or an admin can start something new here.",
        )
    )
