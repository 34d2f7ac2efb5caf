"""Retention while serving: ended runs lose their snapshots, and (when configured) old records are pruned.

``COUNTERSIGN_SNAPSHOT_RETENTION`` (default 7 days) drops the snapshot of a run that ended that long
ago: the snapshot is only needed to resume a paused run, and is the largest avoidable growth of the
database. ``COUNTERSIGN_RETENTION_DAYS`` (default off) prunes ended runs with their approvals and
ledger entries, the history of threads idle that long, and delivered outbox rows (see
:class:`storage.protocols.Operations` for what is never touched). ``COUNTERSIGN_AUDIT_RETENTION_DAYS``
(default: never) prunes the audit log, which keeps its hash chain verifiable from the first entry left.
They run from the periodic sweep, at most once per :data:`RETENTION_INTERVAL_SECONDS` per process;
``countersign db prune`` prunes on demand.

With ``COUNTERSIGN_AUDIT_CHANNEL`` the same pass posts the audit log's head there once a day (through the
outbox, under a key of the day, so several replicas post it once): a later rewrite of the log then contradicts
a chat message that whoever rewrote the database cannot edit (docs/audit.md).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot.config import Config
from bot.engine.model import ThreadRef

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

RETENTION_INTERVAL_SECONDS = 3600.0
"""Retention is cheap to skip and not urgent: once an hour is plenty."""


Say = Callable[[ThreadRef, str, str], Awaitable[bool]]
"""Stores a message owed to a thread under a key, then posts it (:meth:`bot.engine.outbox.Deliveries.say`)."""


def audit_channel_thread(channel: str) -> ThreadRef:
    """``COUNTERSIGN_AUDIT_CHANNEL`` (``platform:workspace:channel[:thread]``) as the thread the head goes to.

    >>> audit_channel_thread("slack:T1:C_AUDIT").key
    'slack:T1:C_AUDIT:'
    """
    platform, workspace, rest = (channel.split(":", 2) + ["", ""])[:3]
    channel_id, _, thread = rest.partition(":")
    return ThreadRef(platform, workspace, channel_id, thread)


class Retention:
    """Applies the configured retention to ``storage`` (the async facade of either backend)."""

    def __init__(
        self, storage: AsyncStores, config: Config, clock: Callable[[], datetime], say: Say | None = None
    ) -> None:
        self.storage = storage
        self.config = config
        self.clock = clock
        self.say = say
        self._last: datetime | None = None

    async def maybe_apply(self) -> None:
        """:meth:`apply`, unless it ran less than :data:`RETENTION_INTERVAL_SECONDS` ago in this process."""
        now = self.clock()
        if self._last is not None and (now - self._last).total_seconds() < RETENTION_INTERVAL_SECONDS:
            return
        self._last = now
        await self.apply(now)

    async def apply(self, now: datetime) -> None:
        """Drop old snapshots and prune old records, as configured; logs what it did."""
        if self.config.snapshot_retention_seconds is not None:
            dropped = await self.storage.ops.drop_snapshots(
                finished_before=now - timedelta(seconds=self.config.snapshot_retention_seconds)
            )
            if dropped:
                logger.info("retention: dropped snapshots of ended runs", extra={"snapshots": dropped})
        if self.config.retention_seconds is not None:
            counts = await self.storage.ops.prune(older_than=now - timedelta(seconds=self.config.retention_seconds))
            if any(counts.as_dict().values()):
                logger.info("retention: pruned old records", extra=counts.as_dict())
        if self.config.audit_retention_seconds is not None:
            pruned = await self.storage.audit.prune(
                older_than=now - timedelta(seconds=self.config.audit_retention_seconds)
            )
            if pruned:
                logger.info(
                    "retention: pruned old audit entries (the chain keeps its anchor)", extra={"entries": pruned}
                )
        await self.post_audit_head(now)

    async def post_audit_head(self, now: datetime) -> bool:
        """Post the audit log's head to ``COUNTERSIGN_AUDIT_CHANNEL``, once per day; whether it was owed now."""
        if not self.config.audit_channel or self.say is None:
            return False
        head = await self.storage.audit.head()
        if head.entry_id == 0:
            return False
        thread = audit_channel_thread(self.config.audit_channel)
        text = (
            f"Audit log head on {now:%Y-%m-%d}: entry {head.entry_id}. Keep this line; "
            f"`countersign audit verify --against {head.text()}` shows whether anything up to it was changed."
        )
        return await self.say(thread, text, f"audit-head:{thread.key}:{now:%Y-%m-%d}")
