"""Decisions on more than one call at a time: approve every call of a step that someone may decide, and
approve one call while writing a rule that it no longer asks in its channel."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.confirmation import NEVER, channel_scope, matching_condition
from bot.engine.deciding import Deciding
from bot.engine.decisions import authorize_now
from bot.engine.errors import EngineError, NotAnAdmin, NotAnApprover, UnknownAction, refused_while_storage_fails
from bot.engine.gate import Gate
from bot.engine.model import CONFIRM, PENDING, DecisionRequest, DecisionResult
from bot.engine.review import REVIEW
from bot.engine.roles import Roles
from bot.engine.threads import channel_of
from bot.engine.views import Views
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores


class Approving:
    """Approve-all and approve-and-always-allow, each through the one gate, then one decision per call."""

    def __init__(
        self,
        storage: AsyncStores,
        *,
        gate: Gate,
        roles: Roles,
        views: Views,
        deciding: Deciding,
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.gate = gate
        self.roles = roles
        self.views = views
        self.deciding = deciding
        self.clock = clock

    @refused_while_storage_fails
    async def approve_all(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve every pending call of the step that ``actor`` may decide; refusals are reported, not raised.

        Someone who may decide none of the step's calls, or clicks from elsewhere, is refused before
        learning whether (and by whom) the step was decided.
        """
        clicked = await self.views.clicked(approval_id, place)
        record = clicked.record
        step: list[ApprovalRecord] = await self.storage.approvals.for_run(record.run_id, step=record.step)
        await self.gate.admit(
            clicked,
            actor,
            place,
            "approve all",
            authorise=lambda: self._authorize_any(step, record, actor),
            still_open=all(other.status != PENDING for other in step),  # else each decision checks its own
        )
        approved, refused = 0, []
        for other in step:
            if other.status != PENDING:
                continue
            try:
                await self.deciding.decide(
                    DecisionRequest(other.approval_id, actor, CONFIRM, actor_name=actor_name, place=place)
                )
                approved += 1
            except EngineError as exc:
                refused.append(f"{other.tool_name}: {exc}")
        if approved == 0 and refused:
            raise NotAnApprover("Nothing was approved. " + " ".join(refused))
        views = await self.views.step_approvals(approval_id)
        clicked_view = next(v for v in views if v.approval_id == approval_id)
        message = f"Approved {approved} call(s)." + (f" Not approved: {'; '.join(refused)}" if refused else "")
        return DecisionResult(approval=clicked_view, step=tuple(views), message=message, refused=tuple(refused))

    @refused_while_storage_fails
    async def approve_and_always_allow(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve one call and write a ``never`` rule for its tool in its channel (admins who may decide it).

        The rule carries the condition of the rule that asked, when one did (``when env=prod``), so only such
        calls stop asking there. The decision and the rule change are both audited.
        """
        clicked = await self.views.clicked(approval_id, place)
        record = clicked.record

        async def authorise() -> None:
            if record.kind == REVIEW:  # a rule about asking before a call: a result under review is not one
                raise UnknownAction("approve and always allow")
            if not await self.roles.is_admin(actor, record.platform):
                raise NotAnAdmin()

        # Whether the approver may decide the call, and whether it is open, is checked by the decision itself.
        await self.gate.admit(clicked, actor, place, "approve always", authorise=authorise, still_open=False)
        result = await self.deciding.decide(
            DecisionRequest(approval_id, actor, CONFIRM, actor_name=actor_name, place=place)
        )
        context = channel_of(await self.views.thread_of(record))
        scope = channel_scope(context)
        matched = await matching_condition(self.storage, record.tool_name, context, record.arguments)
        if matched is not None:
            condition = matched[2]
            await self.storage.conditions.set_rule(
                scope, record.tool_name, condition, NEVER, updated_by=actor, now=self.clock()
            )
        else:
            condition = None
            await self.storage.policies.set_rule(scope, record.tool_name, updated_by=actor, mode=NEVER)
        await self.storage.audit.append(
            actor,
            "policy set",
            f"{scope}/{record.tool_name}",
            {
                "fields": {"mode": NEVER, "condition": condition},
                "from_approval": approval_id,
                "platform": record.platform,
            },
            now=self.clock(),
        )
        where = f" when {condition}" if condition else ""
        return replace(result, message=f"{result.message} {record.tool_name}{where} will no longer ask here.")

    async def _authorize_any(self, step: Sequence[ApprovalRecord], clicked: ApprovalRecord, actor: str) -> None:
        """Raise the clicked call's :class:`NotAnApprover` unless ``actor`` may decide some call of the step."""
        for other in step:
            try:
                await authorize_now(self.roles, other, actor)
                return
            except NotAnApprover:
                continue
        await authorize_now(self.roles, clicked, actor)
