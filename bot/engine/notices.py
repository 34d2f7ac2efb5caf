"""Telling people about approvals: direct messages to the designated approvers, one reminder, expiry notices.

- When a step pauses on calls that name approvers, each approver (people, and members of named or
  platform groups; not the requester) gets the same interactive message in a direct message, where the
  surface can open one (:meth:`bot.engine.surface.Surface.direct_thread`). Where each was shown is
  recorded, so a click there may decide, and a decision anywhere re-renders every copy.
- Once a fraction of the TTL has passed (``COUNTERSIGN_REMIND_AT``), the approvers who have not answered
  are reminded, once per approval across all processes (recorded on the approval itself, so for any TTL).
- When an approval expires, the requester is told in the thread (through the durable outbox, once).
- When a step changes, its deciders' personal lists (Slack's App Home) are shown again.

Everything here is cosmetic with respect to the decision itself: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bot.engine.model import ApprovalView, Mention, Note, ThreadRef

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

MAX_DIRECT_MESSAGES = 50
"""At most this many approvers get a direct message for one step (a huge group is named in the thread)."""


def renderings_key(run_id: str, step: int) -> str:
    """Where the direct-message copies of one step's approval message are listed."""
    return f"approval-copies:{run_id}:{step}"


class ApproverNotices:
    """See the module docstring."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.storage = engine.storage

    async def approvers_of(self, records: Sequence[Any], *, fresh: bool = False) -> list[str]:
        """The people designated to decide ``records`` (groups expanded), without the requester."""
        people: dict[str, None] = {}
        for record in records:
            if not record.approvers:
                continue
            for person in await self.engine.roles.people(record.approvers, record.platform, fresh=fresh):
                if person != record.requester:
                    people.setdefault(person, None)
        return list(people)

    async def send_direct(self, thread: ThreadRef, records: Sequence[Any]) -> None:
        """Give each designated approver the step's approval message in a direct message."""
        surface = self.engine.surfaces.get(thread.platform)
        opener = getattr(surface, "direct_thread", None)
        if opener is None or not records:
            return
        copies = []
        for person in (await self.approvers_of(records))[:MAX_DIRECT_MESSAGES]:
            try:
                direct = await opener(thread.workspace, person)
                if direct is None:
                    continue  # e.g. Teams without a personal chat: the thread's card names them
                await self.engine.note_shown(direct.place, [r.approval_id for r in records])
                always = await self.engine.roles.is_admin(person, thread.platform, fresh=False)
                views = offered(await self.engine.step_approvals(records[0].approval_id), always)
                ref = await surface.render_approvals(direct, views)
            except Exception:
                logger.warning("approval not sent to an approver", extra={"run_id": records[0].run_id}, exc_info=True)
                continue
            copies.append({"person": person, "thread": _thread_dict(direct), "ref": ref, "always": always})
        if copies:
            key = renderings_key(records[0].run_id, records[0].step)
            await self.storage.conversations.save(key, {"copies": copies})

    async def update_copies(self, record: Any, views: Sequence[Any]) -> None:
        """Re-render every direct-message copy of the step of ``record``."""
        surface = self.engine.surfaces.get(record.platform)
        # Copies go only to approvers named on the step's calls (send_direct), and a call's approvers never
        # change: a step that names none has no copies, so there is nothing to read.
        if surface is None or not any(view.approvers for view in views):
            return
        saved = await self.storage.conversations.load(renderings_key(record.run_id, record.step))
        if not saved:
            return
        for copy in saved.get("copies") or []:
            try:
                shown = offered(views, bool(copy.get("always")))
                await surface.update_approvals(ThreadRef(**copy["thread"]), copy["ref"], shown)
            except Exception:
                logger.warning("approval copy not updated", extra={"run_id": record.run_id}, exc_info=True)

    async def refresh_homes(self, record: Any, views: Sequence[ApprovalView], deciders: Sequence[str]) -> None:
        """Re-show the personal approval lists (Slack App Home) of the step's deciders after it changed."""
        surface = self.engine.surfaces.get(record.platform)
        refresh = getattr(surface, "refresh_home", None)
        if refresh is None or not views:
            return
        try:
            await refresh(views[0].thread.workspace, list(dict.fromkeys(deciders))[:MAX_DIRECT_MESSAGES])
        except Exception:
            logger.warning("personal approval lists not refreshed", extra={"run_id": record.run_id}, exc_info=True)

    async def remind_due(self) -> int:
        """Remind, once, the approvers who have not answered approvals past the reminder point; how many."""
        fraction = self.engine.config.remind_at
        if not fraction:
            return 0
        now = self.engine.clock()
        reminded = 0
        for record in await self.storage.approvals.pending():
            if not record.approvers or now >= record.expires_at:
                continue
            if now < record.created_at + (record.expires_at - record.created_at) * fraction:
                continue
            if not await self.storage.approvals.mark_reminded(record.approval_id, now=now):
                continue  # another process (or an earlier sweep) reminded them, however long ago
            voted = {v.voter for v in await self.storage.approvals.votes(record.approval_id)}
            people = [p for p in await self.approvers_of([record], fresh=True) if p not in voted]
            thread = await self.engine._thread_of(record)
            text = Note(
                (
                    f"Reminder: a call of {record.tool_name} asked by ",
                    Mention(record.requester),
                    f" is waiting for your decision. It expires at {record.expires_at:%Y-%m-%d %H:%M} UTC "
                    "and is rejected if nobody decides.",
                )
            )
            for person in people:
                await self._tell(thread, person, text)
                reminded += 1
            await self.storage.audit.append("countersign", "reminded", record.approval_id, {"people": people}, now=now)
        return reminded

    async def tell_expired(self, records: Sequence[Any]) -> None:
        """Tell each expired step's requester, in its thread, that the call was not run."""
        for record in {(r.run_id, r.step): r for r in records}.values():
            try:
                thread = await self.engine._thread_of(record)
                names = ", ".join(sorted({r.tool_name for r in records if r.run_id == record.run_id}))
                text = Note(
                    (
                        Mention(record.requester),
                        f": the approval for {names} expired without a decision, so it was not run.",
                    )
                )
                await self.engine.lifecycle.deliveries.say(thread, text, f"expired:{record.run_id}:{record.step}")
            except Exception:
                logger.warning("expiry notice not sent", extra={"run_id": record.run_id}, exc_info=True)

    async def _tell(self, thread: ThreadRef, person: str, text: Note) -> None:
        surface = self.engine.surfaces.get(thread.platform)
        if surface is None:
            return
        try:
            opener = getattr(surface, "direct_thread", None)
            direct = await opener(thread.workspace, person) if opener is not None else None
            if direct is not None:
                await surface.post_reply(direct, text)
            else:
                await surface.tell_user(thread, person, text)
        except Exception:
            logger.warning("reminder not delivered", extra={"thread": thread.key}, exc_info=True)


def offered(views: Sequence[ApprovalView], always: bool) -> list[ApprovalView]:
    """``views`` as one admin sees them alone: pending calls offer "Approve and always allow here"."""
    return [replace(v, offer_always_allow=always and v.is_pending and v.kind == "approval") for v in views]


def _thread_dict(thread: ThreadRef) -> dict[str, str]:
    return {
        "platform": thread.platform,
        "workspace": thread.workspace,
        "channel": thread.channel,
        "thread": thread.thread,
    }
