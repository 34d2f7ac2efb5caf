"""The one gate every decision passes: the place of the click, then who may decide, then whether it is still
open, and an audit entry for every refusal.

Checked in this order, so someone who may not decide learns neither the outcome nor who decided. Lists
(a person's pending approvals, a personal view of a step) use the same rule without auditing, read from
the group cache; the click that follows is checked again, afresh.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from bot.agent.tool_runner import OUTCOME_UNKNOWN
from bot.engine.decisions import ID_LESS_PREFIX, authorize_now, check_open
from bot.engine.errors import AlreadyDecided, EngineError, NotShownHere
from bot.engine.ledger import ledger_key
from bot.engine.roles import Roles
from storage.protocols import TERMINAL_RUN_STATUSES, ApprovalRecord, ClickedApproval, LedgerEntry, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

Authorise = Callable[[], Awaitable[None]]
"""Raises why the actor may not do what the click asks (:class:`NotAnApprover`, :class:`NotAnAdmin`, ...)."""


class Gate:
    """Place → actor → still open → audit, in one place (see the module docstring)."""

    def __init__(self, storage: AsyncStores, roles: Roles, clock: Callable[[], datetime]) -> None:
        self.storage = storage
        self.roles = roles
        self.clock = clock

    async def check(
        self,
        clicked: ClickedApproval,
        actor: str,
        place: str | None,
        *,
        authorise: Authorise | None = None,
        still_open: bool = True,
    ) -> None:
        """Raise why ``actor``'s click from ``place`` may not decide ``clicked`` now; return if it may.

        ``authorise``: who may act, if not the approval's own rule (:func:`authorize_now`); ``still_open``:
        whether the approval must still be open (an action on a whole step may check that itself).
        """
        if not place or not clicked.shown_here:  # never shown there, or no place at all
            raise NotShownHere(place)
        if authorise is None:
            await authorize_now(self.roles, clicked.record, actor)
        else:
            await authorise()
        if still_open:
            check_open(self.clock(), clicked.record)

    async def admit(
        self,
        clicked: ClickedApproval,
        actor: str,
        place: str | None,
        action: str,
        *,
        authorise: Authorise | None = None,
        still_open: bool = True,
        audited: tuple[type[EngineError], ...] = (EngineError,),
    ) -> None:
        """:meth:`check`, with an audit entry for a refusal (of the ``audited`` kinds) before it is raised."""
        try:
            await self.check(clicked, actor, place, authorise=authorise, still_open=still_open)
        except EngineError as refusal:
            if isinstance(refusal, audited):
                await self.audit_refusal(actor, clicked.record, action, refusal, place)
            raise

    async def audit_refusal(
        self, actor: str, record: ApprovalRecord, action: str, refusal: EngineError, place: str | None
    ) -> None:
        """The audit entry of a refused click."""
        await self.storage.audit.append(
            actor,
            "decision refused",
            record.approval_id,
            {"action": action, "reason": type(refusal).__name__, "tool": record.tool_name, "place": place},
            now=self.clock(),
        )

    async def may_decide(self, record: ApprovalRecord, actor: str) -> bool:
        """Whether ``actor`` may decide ``record`` now, as a list shows it (groups from the cache, no audit)."""
        try:
            check_open(self.clock(), record)
            await authorize_now(self.roles, record, actor, fresh=False)
        except EngineError:
            return False
        return True

    async def explain_refusal(self, record: ApprovalRecord, refusal: EngineError) -> EngineError:
        """A click on an approved call that never ran, or whose outcome is unknown, is told exactly that."""
        if not isinstance(refusal, AlreadyDecided) or refusal.status not in ("approved", "modified"):
            return refusal
        if record.tool_call_id.startswith(ID_LESS_PREFIX):
            return refusal
        who = f" by {refusal.decided_by}" if refusal.decided_by else ""
        entry: LedgerEntry | None = await self.storage.ledger.get(ledger_key(record.run_id, record.tool_call_id))
        if entry is not None and entry.status == "failed" and entry.result == OUTCOME_UNKNOWN:
            detail = (
                f"This call was already {refusal.status}{who}, but the bot stopped while it was running: "
                "its outcome is unknown, and it was not run again."
            )
        elif entry is None and (await self._run(record)).status in TERMINAL_RUN_STATUSES:
            detail = (
                f"This call was already {refusal.status}{who}, but it never ran: its run stopped before it started."
            )
        else:
            return refusal
        return AlreadyDecided(refusal.status, refusal.decided_by, refusal.decided_at, detail=detail)

    async def _run(self, record: ApprovalRecord) -> RunRecord:
        return await self.storage.runs.get(record.run_id)
