"""Superseding a paused run: a newer message is to run in its thread, so the paused step is closed for good.

Its approvals are closed (``superseded``), the paused step is written to the history with a result for each
of its calls (so the newer run's model sees what happened), and its cards are re-rendered without buttons.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from bot.agent import SnapshotError
from bot.agent.snapshot import REVIEW_STAGE
from bot.agent.stored_snapshot import stored_step
from bot.engine.cards import Cards
from bot.engine.sentences import SUPERSEDED_RESULT
from bot.engine.threads import thread_of_run
from bot.hitl.apply import closing_results
from bot.metrics import Observer
from storage import NotFound, StorageError
from storage.protocols import ApprovalStep, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)


class Superseding:
    """Closes paused runs that a newer message replaces (see the module docstring)."""

    def __init__(self, storage: AsyncStores, cards: Cards, observer: Observer, clock: Callable[[], datetime]) -> None:
        self.storage = storage
        self.cards = cards
        self.observer = observer
        self.clock = clock

    async def supersede(self, run: RunRecord) -> None:
        """A newer message is to run while ``run`` is paused: close its approvals and its dangling calls."""
        if not await self.storage.runs.transition(run.run_id, "paused", "finished", error=SUPERSEDED_RESULT):
            return
        self.observer.run_ended("superseded")
        closed = await self.storage.approvals.close_pending_for_run(run.run_id, "superseded", SUPERSEDED_RESULT)
        thread = thread_of_run(run)
        try:
            snapshot = stored_step(await self.storage.runs.snapshot(run.run_id))
            step_messages = [snapshot.step_message]
            # Results held for review ran, but are never released without a decision.
            reason = f"result withheld: {SUPERSEDED_RESULT}" if snapshot.stage == REVIEW_STAGE else SUPERSEDED_RESULT
            closing = closing_results(step_messages, reason)
            await self.storage.messages.write_messages(thread.key, step_messages + closing)
        except (SnapshotError, StorageError) as exc:  # history stays valid: the step was never written
            logger.warning("could not record superseded step", extra={"run_id": run.run_id, "error": repr(exc)})
        await self.storage.audit.append(
            "countersign", "superseded", run.run_id, {"approvals": closed}, now=self.clock()
        )
        try:
            paused: ApprovalStep = await self.storage.approvals.step(run.run_id, run.step)
        except NotFound:
            return
        if paused.approvals:
            await self.cards.rerender(paused.approvals[0], paused)  # the step as just read: no second read
