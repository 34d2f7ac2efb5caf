"""Telling people about approvals: direct messages to the designated approvers, one reminder, expiry notices.

- When a step pauses on calls that name approvers, each approver (people, and members of named or
  platform groups; not the requester) gets the same interactive message in a direct message, where the
  surface can open one (:meth:`bot.engine.surface.Surface.direct_thread`). Where each was shown is
  recorded, so a click there may decide, and a decision anywhere re-renders every copy.
- Once a fraction of the TTL has passed (``COUNTERSIGN_REMIND_AT``), the approvers who have not answered
  are reminded, once per approval across all processes (recorded on the approval itself, so for any TTL).
- When a step changes, its deciders' personal lists (Slack's App Home) are shown again.

Everything here is cosmetic with respect to the decision itself: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.model import ApprovalView, Mention, Note, ThreadRef
from bot.engine.roles import Roles
from bot.engine.surface import Surface
from bot.engine.views import Views, offered
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

MAX_DIRECT_MESSAGES = 50
"""At most this many approvers get a direct message for one step (a huge group is named in the thread)."""


def renderings_key(run_id: str, step: int) -> str:
    """Where the direct-message copies of one step's approval message are listed."""
    return f"approval-copies:{run_id}:{step}"


class ApproverNotices:
    """See the module docstring."""

    def __init__(
        self,
        storage: AsyncStores,
        roles: Roles,
        surfaces: Mapping[str, Surface],
        views: Views,
        clock: Callable[[], datetime],
        *,
        remind_at: float | None,
    ) -> None:
        self.storage = storage
        self.roles = roles
        self.surfaces = surfaces
        self.views = views
        self.clock = clock
        self.remind_at = remind_at
        """The fraction of an approval's TTL after which its approvers are reminded (``None`` or 0: never)."""

    async def approvers_of(self, records: Sequence[ApprovalRecord], *, fresh: bool = False) -> list[str]:
        """The people designated to decide ``records`` (groups expanded), without the requester."""
        people: dict[str, None] = {}
        for record in records:
            if not record.approvers:
                continue
            for person in await self.roles.people(record.approvers, record.platform, fresh=fresh):
                if person != record.requester:
                    people.setdefault(person, None)
        return list(people)

    async def send_direct(self, thread: ThreadRef, records: Sequence[ApprovalRecord]) -> None:
        """Give each designated approver the step's approval message in a direct message."""
        surface = self.surfaces.get(thread.platform)
        if surface is None or not records:
            return
        copies: list[dict[str, Any]] = []
        for person in (await self.approvers_of(records))[:MAX_DIRECT_MESSAGES]:
            try:
                direct = await surface.direct_thread(thread.workspace, person)
                if direct is None:
                    continue  # no direct messages there (e.g. Teams without a personal chat): the card names them
                await self.views.note_shown(direct.place, [r.approval_id for r in records])
                always = await self.roles.is_admin(person, thread.platform, fresh=False)
                views = offered(await self.views.step_approvals(records[0].approval_id), always)
                ref = await surface.render_approvals(direct, views)
            except Exception:
                logger.warning("approval not sent to an approver", extra={"run_id": records[0].run_id}, exc_info=True)
                continue
            copies.append({"person": person, "thread": _thread_dict(direct), "ref": ref, "always": always})
        if copies:
            key = renderings_key(records[0].run_id, records[0].step)
            await self.storage.conversations.save(key, {"copies": copies})

    async def update_copies(self, record: ApprovalRecord, views: Sequence[ApprovalView]) -> None:
        """Re-render every direct-message copy of the step of ``record``."""
        surface = self.surfaces.get(record.platform)
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

    async def refresh_homes(
        self, record: ApprovalRecord, views: Sequence[ApprovalView], deciders: Sequence[str]
    ) -> None:
        """Re-show the personal approval lists (Slack App Home) of the step's deciders after it changed."""
        surface = self.surfaces.get(record.platform)
        if surface is None or not views:
            return
        try:
            await surface.refresh_home(views[0].thread.workspace, list(dict.fromkeys(deciders))[:MAX_DIRECT_MESSAGES])
        except Exception:
            logger.warning("personal approval lists not refreshed", extra={"run_id": record.run_id}, exc_info=True)

    async def remind_due(self) -> int:
        """Remind, once, the approvers who have not answered approvals past the reminder point; how many."""
        fraction = self.remind_at
        if not fraction:
            return 0
        now = self.clock()
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
            thread = await self.views.thread_of(record)
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

    async def _tell(self, thread: ThreadRef, person: str, text: Note) -> None:
        surface = self.surfaces.get(thread.platform)
        if surface is None:
            return
        try:
            direct = await surface.direct_thread(thread.workspace, person)
            if direct is not None:
                await surface.post_reply(direct, text)
            else:
                await surface.tell_user(thread, person, text)
        except Exception:
            logger.warning("reminder not delivered", extra={"thread_key": thread.key}, exc_info=True)


def _thread_dict(thread: ThreadRef) -> dict[str, str]:
    return {
        "platform": thread.platform,
        "workspace": thread.workspace,
        "channel": thread.channel,
        "thread": thread.thread,
    }
