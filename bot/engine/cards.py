"""Approval cards: a paused step shown in its thread, re-rendered wherever it is shown when it changes.

A card owed in the outbox (:func:`owed_card`, the ``card:`` namespace) is one that a pause stored but that
was not shown yet (the process died, or the platform failed): the outbox sweep shows it through
:meth:`Cards.show_owed_card`, so a paused run is never left without its buttons in silence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.model import PENDING, ApprovalView, ThreadRef
from bot.engine.notices import ApproverNotices
from bot.engine.surface import Surface
from bot.engine.threads import quietly, thread_of_run
from bot.engine.views import Views
from storage import NotFound
from storage.batch import Batch, stores
from storage.protocols import ApprovalRecord, ApprovalStep

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

CARD_KEY_PREFIX = "card:"
"""Outbox keys of approval cards owed to a thread: the text names the paused step (:func:`owed_card`)."""


def owed_card(run_id: str, step: int) -> tuple[str, str]:
    """The outbox key and text under which the approval card of ``run_id``'s ``step`` is owed."""
    return f"{CARD_KEY_PREFIX}{run_id}:{step}", f"{run_id}:{step}"


def card_step(text: str) -> tuple[str, int] | None:
    """The ``(run_id, step)`` an owed card's text names (:func:`owed_card`), or ``None`` for text that names none."""
    run_id, _, step = text.rpartition(":")
    return (run_id, int(step)) if run_id and step.isdigit() else None


class Cards:
    """Shows and re-renders the approval cards of paused steps (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        surfaces: Mapping[str, Surface],
        views: Views,
        notices: ApproverNotices,
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.surfaces = surfaces
        self.views = views
        self.notices = notices
        self.clock = clock

    async def show_step(
        self, thread: ThreadRef, records: Sequence[ApprovalRecord], card_key: str, *, rendered: bool = False
    ) -> None:
        """Render a paused step's approvals in its thread, store where, and settle its owed card (``card_key``).

        ``rendered``: the caller settles the owed card itself (the outbox sweep marks it delivered).
        """
        surface = self.surfaces[thread.platform]
        views = await self.views.views(records, thread)  # the run's thread is known: no read of the run again
        message_ref = await surface.render_approvals(thread, views)
        # The step's statuses once the reference is stored (the same statement, no read after), and the card no
        # longer owed: one write.
        batch = Batch()
        marking = batch.write(stores.approvals.mark_rendered, [r.approval_id for r in records], message_ref)
        if not rendered:
            batch.write(stores.outbox.delivered, card_key, now=self.clock())
        statuses = (await self.storage.batches.apply(batch))[marking]
        await quietly(self.notices.send_direct(thread, records))
        if any(r.approvers for r in records):  # copies went to named approvers: a click meanwhile missed them
            statuses = {
                r.approval_id: r.status
                for r in await self.storage.approvals.for_run(records[0].run_id, step=records[0].step)
            }
        # A click that landed while the message was being posted found no reference to update: catch up.
        if any(status != PENDING for status in statuses.values()):
            await self.update_rendering(records[0])

    async def show_owed_card(self, thread: ThreadRef, run_id: str, step: int) -> None:
        """Show an approval card owed in the outbox (its process died, or the platform failed, before showing it).

        Nothing is shown when nothing of the step waits any more (decided, expired, superseded) or when it is
        shown already; the outbox sweep marks the card delivered after this returns.
        """
        try:
            paused: ApprovalStep = await self.storage.approvals.step(run_id, step)
        except NotFound:
            return
        pending = [a for a in paused.approvals if a.status == PENDING]
        if not pending or all(a.message_ref for a in pending):
            return
        logger.info("showing an owed approval card", extra={"run_id": run_id, "step": step})
        await self.show_step(thread, paused.approvals, owed_card(run_id, step)[0], rendered=True)

    async def update_rendering(self, record: ApprovalRecord) -> list[ApprovalView]:
        """Re-render the step of ``record`` wherever it is shown; its views as read."""
        return (await self.rerender(record))[1]

    async def rerender(
        self, record: ApprovalRecord, paused: ApprovalStep | None = None
    ) -> tuple[ApprovalStep | None, list[ApprovalView]]:
        """Re-render the step of ``record`` wherever it is shown; the step as read (``None``: its run is gone).

        ``paused``: the step as the caller just read it after its change (else it is read here).
        """
        if paused is None:
            try:
                paused = await self.storage.approvals.step(record.run_id, record.step)
            except NotFound:
                paused = None
        views = await self.views.views(paused.approvals, thread_of_run(paused.run)) if paused is not None else []
        refs = [v.message_ref for v in views if v.message_ref]
        surface = self.surfaces.get(record.platform)
        if surface and refs:
            thread = views[0].thread
            await quietly(surface.update_approvals(thread, refs[0], views))
        await quietly(self.notices.update_copies(record, views))
        await self.notices.refresh_homes(record, views, await self.views.deciders(record))
        return paused, views
