"""Expiry: an approval nobody decided in time is rejected (never approved), audited, and its requester told.

However many processes sweep at once, each due approval is claimed by exactly one of them (one statement per
batch, with its audit entries in the same write). Steps now fully decided are resumed once each.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.deciding import Deciding
from bot.engine.model import Mention, Note
from bot.engine.outbox import Deliveries
from bot.engine.views import Views
from bot.metrics import Observer
from storage.batch import Batch, Call, call, stores
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)


class Expiry:
    """Expires due approvals and follows up on them (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        *,
        views: Views,
        deciding: Deciding,
        deliveries: Deliveries,
        observer: Observer,
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.views = views
        self.deciding = deciding
        self.deliveries = deliveries
        self.observer = observer
        self.clock = clock

    async def sweep_expired(self, batch: int = 500) -> int:
        """Expire every due approval (never approve), update renderings, resume fully decided runs.

        Returns how many approvals this process expired. See :meth:`expire_due` and :meth:`after_expiry`.
        """
        records = await self.expire_due(batch)
        await self.after_expiry(records)
        return len(records)

    async def expire_due(self, batch: int = 500) -> list[ApprovalRecord]:
        """Claim and audit every due approval, a batch per statement; the approvals this process expired.

        However many processes sweep at once, each approval is claimed by exactly one of them.
        """
        now = self.clock()
        claimed: list[ApprovalRecord] = []
        # Each batch of expiries and its audit entries are one write: no approval expires unaudited.
        expiring = Batch()
        expired = expiring.write(stores.approvals.expire_due, now=now, limit=batch)
        expiring.write_from(stores.audit.append_many, lambda done: _expiry_audit(done[expired], now))
        while True:
            records = (await self.storage.batches.apply(expiring))[expired]
            for _record in records:
                self.observer.decision("expire", "expired")
            claimed += records
            if len(records) < batch:
                return claimed

    async def after_expiry(self, records: Sequence[ApprovalRecord], concurrency: int = 64) -> None:
        """Re-render each expired approval's step and resume the steps now fully decided (once per step)."""
        steps = list({(r.run_id, r.step): r for r in records}.values())
        await self.tell_expired(records)
        for start in range(0, len(steps), concurrency):
            chunk = steps[start : start + concurrency]
            await asyncio.gather(*(self.deciding.after_decision_quietly(r, "Expired.") for r in chunk))

    async def tell_expired(self, records: Sequence[ApprovalRecord]) -> None:
        """Tell each expired step's requester, in its thread (through the durable outbox, once), that the call
        was not run."""
        for record in {(r.run_id, r.step): r for r in records}.values():
            try:
                thread = await self.views.thread_of(record)
                names = ", ".join(sorted({r.tool_name for r in records if r.run_id == record.run_id}))
                text = Note(
                    (
                        Mention(record.requester),
                        f": the approval for {names} expired without a decision, so it was not run.",
                    )
                )
                await self.deliveries.say(thread, text, f"expired:{record.run_id}:{record.step}")
            except Exception:
                logger.warning("expiry notice not sent", extra={"run_id": record.run_id}, exc_info=True)


def _expiry_audit(records: list[ApprovalRecord], now: datetime) -> Call[...] | None:
    """The audit entries of the approvals a batch of ``expire_due`` claimed (the call of ``append_many``), or
    ``None`` when it claimed none."""
    if not records:
        return None
    entries = [
        ("countersign", "expired", r.approval_id, {"tool": r.tool_name, "run_id": r.run_id, "kind": r.kind})
        for r in records
    ]
    return call(stores.audit.append_many, entries, now=now)
