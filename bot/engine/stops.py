"""Stopping a run from chat: after its current step, in whichever process runs it, by its requester or an admin.

The request is stored (so the process that runs the run, this one or another, stops it at its next step
boundary) and, here, handed straight to the run's live answer. A tool that runs is not interrupted, except a
call a tool source can cancel (an MCP call in flight here: :attr:`Stops.cancel_calls`), whose outcome is then
unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.errors import NotAllowedToStop
from bot.engine.ledger import StorageExecutionLedger
from bot.engine.model import WORKING_RUN_STATUSES, ThreadRef
from bot.engine.roles import Roles
from bot.engine.sentences import NOTHING_TO_STOP, STOPPING
from bot.engine.streaming import LiveAnswer
from storage import NotFound, StorageError
from storage.batch import Batch, stores
from storage.protocols import RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

MAX_RUN_ID_LENGTH = 200


def _no_calls(_run_id: str, _actor: str) -> list[str]:
    return []


def stopping_sentence(cancelled: list[str]) -> str:
    """What the person who stopped a run is told: :data:`STOPPING`, naming the calls cancelled, if any."""
    if not cancelled:
        return STOPPING
    names = ", ".join(dict.fromkeys(cancelled))
    return f"{STOPPING} The call to {names} in flight was cancelled; its outcome is unknown."


class Stops:
    """Stop requests for runs, checked against who may stop them (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        roles: Roles,
        ledger: StorageExecutionLedger,
        live: dict[str, LiveAnswer],
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.roles = roles
        self.ledger = ledger
        self.live = live
        """The live answer of every run this process works on now (shared with the runs and the Stop hook)."""
        self.clock = clock
        self.cancel_calls: Callable[[str, str], list[str]] = _no_calls
        """Cancels a run's calls in flight that can be cancelled (MCP; set once the servers are connected); the
        tools cancelled."""

    async def may_stop(self, actor: str, requester: str, platform: str) -> bool:
        """Whether ``actor`` may stop a run of ``requester``'s: the requester, or an admin (groups expanded)."""
        return actor == requester or await self.roles.is_admin(actor, platform)

    async def request_stop(self, thread: ThreadRef, actor: str) -> str:
        """Stop the run this process works on in ``thread`` after its current step (the console's Ctrl-C).

        :class:`NotAllowedToStop` for anyone but the run's requester or an admin.
        """
        for live in list(self.live.values()):
            if live.thread == thread:
                if not await self.may_stop(actor, live.requester, thread.platform):
                    raise NotAllowedToStop()
                live.stop(actor)
                return stopping_sentence(self.cancel_calls(live.run_id, actor))
        return NOTHING_TO_STOP

    async def stop_run(self, run_id: str, actor: str) -> str:
        """Stop a run after its current step (its MCP calls in flight here are cancelled), in whichever process runs it.

        Only the run's requester or an admin may stop it (:class:`NotAllowedToStop`). Returns the sentence
        for the person who asked.
        """
        run = await self._run(run_id)
        if run is None:
            return NOTHING_TO_STOP
        if not await self.may_stop(actor, run.requester, run.platform):
            await self.storage.audit.append(actor, "stop refused", run_id, {}, now=self.clock())
            raise NotAllowedToStop()
        if run.status not in WORKING_RUN_STATUSES:
            return NOTHING_TO_STOP
        # Stored (with its audit entry, in one write), so the process that runs it (this one or another) stops it at
        # its next step boundary.
        batch = Batch()
        batch.require(stores.runs.request_stop, run_id, actor)
        batch.write(stores.audit.append, actor, "stop requested", run_id, {}, now=self.clock())
        stopping = await self.storage.batches.apply(batch)
        if not stopping.applied:
            return NOTHING_TO_STOP
        live = self.live.get(run_id)
        if live is not None:
            live.stop(actor)
        return stopping_sentence(self.cancel_calls(run_id, actor))

    async def stop_requested(self, run_id: str) -> str | None:
        """Who asked (in any process) that the run stop, or ``None``; a storage hiccup is not a stop."""
        seen, asked_by = self.ledger.stop_seen(run_id)
        if seen:  # read with the step's last tool outcome, in its transaction: no read of its own
            return asked_by
        try:
            run: RunRecord = await self.storage.runs.get(run_id)
        except StorageError:
            return None
        return run.stop_requested_by

    async def _run(self, run_id: object) -> RunRecord | None:
        """The run a Stop control names, or ``None`` (an id from a click is untrusted)."""
        if not isinstance(run_id, str) or len(run_id) > MAX_RUN_ID_LENGTH:
            return None
        try:
            return await self.storage.runs.get(run_id)
        except NotFound:
            return None
