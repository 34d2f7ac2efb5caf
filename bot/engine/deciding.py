"""Deciding approvals: exactly one decision wins, is audited with it, and (when it completes its step) claims
the run for its resume in the same write.

Every click passes :class:`~bot.engine.gate.Gate` first. A decision's write also reads what the re-render and
the resume need (the step, and, if the claim won, the snapshot's history and the policies of the calls it is
to run), so neither reads storage again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot import failpoints
from bot.agent.snapshot import REVIEW_STAGE
from bot.agent.stored_snapshot import history_to_read
from bot.canonical import args_digest
from bot.engine import breakglass, justification, responding
from bot.engine.cards import Cards
from bot.engine.confirmation import ONCE, channel_scope
from bot.engine.decisions import STATUS_OF_ACTION, check_open
from bot.engine.errors import (
    AlreadyDecided,
    ApprovalExpired,
    DecidedButUnfinished,
    EngineError,
    InvalidEdit,
    MCPServerNotConnected,
    NotShownHere,
    ToolsNotConfigured,
    UnknownAction,
    refused_while_storage_fails,
)
from bot.engine.gate import Gate
from bot.engine.leases import Leases
from bot.engine.model import (
    ACTIONS,
    BREAKGLASS,
    CONFIRM,
    MODIFY,
    REJECT,
    RESPOND,
    ApprovalView,
    DecisionRequest,
    DecisionResult,
)
from bot.engine.params import merge_edit
from bot.engine.previewing import PreviewRequired, approve_refusal, audit_preview
from bot.engine.responding import add_ledger_entry, checked_response
from bot.engine.resuming import ClaimedStep, Resuming
from bot.engine.review import REVIEW, edited_result
from bot.engine.threads import channel_of, quietly
from bot.engine.views import Views
from bot.engine.work import Work
from bot.logs import log_context
from bot.mcp.tools import MCPTool
from bot.metrics import Observer
from bot.tools import Tool
from storage import StorageError
from storage.batch import Batch, Call, call, stores
from storage.protocols import COUNTED_VOTES, ApprovalRecord, ApprovalStep, ClickedApproval, RunRecord

if TYPE_CHECKING:
    from bot.mcp import MCPManager
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

RESPOND_VOTE = "respond"
"""A Respond among a quorum's votes (issue 30): it counts like an approval; the reached quorum answers in the tool's
place with the latest Respond's text (stored with the pending approval, ``approvals.add_vote``)."""
QUORUM_CANNOT_EDIT = "this call needs several approvals, so it cannot be edited; reject it with feedback instead"

"""A batch read's ``(args, kwargs)``, computed in the batch's transaction from what it did before."""


class Deciding:
    """Records decisions and starts what follows them (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        *,
        gate: Gate,
        views: Views,
        cards: Cards,
        resuming: Resuming,
        leases: Leases,
        work: Work,
        observer: Observer,
        clock: Callable[[], datetime],
        glass: breakglass.BreakGlass | None = None,
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.glass = glass
        """Issue 31: checks and follows up break-glass decisions (``None``: break-glass is refused)."""
        self.gate = gate
        self.views = views
        self.cards = cards
        self.resuming = resuming
        self.leases = leases
        self.work = work
        self.observer = observer
        self.clock = clock
        self.mcp: MCPManager | None = None
        """The MCP servers (set by ``Engine.create``): a call of a tool of one that is down waits for it."""

    def not_configured(self, tool_name: str) -> ToolsNotConfigured | None:
        """Why a call of ``tool_name`` can't be approved here (its tool is not configured now, or its MCP server
        is not connected), else ``None``."""
        tool = self.tools.get(tool_name)
        server = None
        if isinstance(tool, MCPTool) and tool.mcp is not None:
            server = tool.mcp.server
        elif tool is None and self.mcp is not None:  # a server down since start-up: its tools were never listed
            server = self.mcp.server_of(tool_name)
        if server is not None and self.mcp is not None and not self.mcp.connected(server):
            return MCPServerNotConnected(server, tool_name)
        return None if tool is not None else ToolsNotConfigured([tool_name])

    def mcp_changed(self, tool_name: str) -> str | None:
        """Why an approval of a call of ``tool_name`` is refused: its MCP tool changed on the server since it was
        offered (``notifications/tools/list_changed``), else ``None``."""
        tool = self.tools.get(tool_name)
        return tool.refusal() if isinstance(tool, MCPTool) else None

    @refused_while_storage_fails
    async def check_can_decide(self, approval_id: str, actor: str, place: str | None = None) -> ApprovalView:
        """Raise what :meth:`decide` would raise for this actor, clicking in ``place``, now (before opening a form)."""
        clicked = await self.views.clicked(approval_id, place)
        await self.gate.admit(clicked, actor, place, "open form", audited=(NotShownHere,))
        return await self.views.view(clicked.record)

    @refused_while_storage_fails
    async def check_can_break_glass(self, approval_id: str, actor: str, place: str | None = None) -> ApprovalView:
        """Raise what a break-glass by ``actor`` from ``place`` would raise now, whatever its reason (issue 31: before
        asking for the reason)."""
        clicked = await self.views.clicked(approval_id, place)
        glass, record = self.glass, clicked.record
        if glass is None:
            raise breakglass.BreakGlassRefused("Break-glass is not turned on here.")

        async def authorise() -> None:
            await glass.check_offer(record, actor)
            await glass.check_limits(record, actor)
            await glass.check_rate(actor)

        await self.gate.admit(clicked, actor, place, BREAKGLASS, authorise=authorise)
        return await self.views.view(record)

    @refused_while_storage_fails
    async def decide(self, request: DecisionRequest, *, render_later: bool = False) -> DecisionResult:
        """Record one decision (exactly one wins), update the rendering, and resume when the step is decided.

        Checked in this order: the place of the click, who may decide, then whether the approval is still
        open, so someone who may not decide learns neither the outcome nor who decided.

        With ``render_later`` it returns once the decision and its audit entry are stored: re-rendering
        (a slow chat API) and the resume run as a tracked background task (:meth:`Work.wait_idle` waits for it).
        Adapters that must answer within a deadline use it, e.g. a Slack modal decided before its ack.
        """
        clicked = await self.views.clicked(request.approval_id, request.place)  # the approval and its places
        record = clicked.record
        with log_context(
            approval_id=record.approval_id, tool=record.tool_name, run_id=record.run_id, surface=record.platform
        ):
            return await self._decide(clicked, request, render_later)

    async def _decide(self, clicked: ClickedApproval, request: DecisionRequest, render_later: bool) -> DecisionResult:
        record = clicked.record
        claimed: ClaimedStep | None = None
        try:
            if request.action not in ACTIONS:
                raise UnknownAction(request.action)
            if request.action == BREAKGLASS:
                request = await self._admit_breakglass(clicked, request)
            else:
                await self.gate.check(clicked, request.actor, request.place)
            missing = self.not_configured(record.tool_name)
            gone = isinstance(missing, MCPServerNotConnected) and record.tool_name not in self.tools
            if missing is not None and (request.action != REJECT or gone):  # a rejection waits for a tool to come
                raise missing
            changed = self.mcp_changed(record.tool_name) if request.action in (CONFIRM, MODIFY) else None
            if changed is not None:  # issue 25: never run against a changed MCP tool; the approval is refused
                request = replace(request, action=REJECT, feedback=changed[0].upper() + changed[1:] + ".")
            action, final_arguments, final_result = self._final(record, request)
            if action in (CONFIRM, MODIFY):  # issue 30: preview_required refuses an approval without a good preview
                refusal = approve_refusal(self.tools.get(record.tool_name), record)
                if refusal is not None:
                    raise PreviewRequired(refusal)
            if action == RESPOND:  # issue 30: the person's text is the call's answer
                allowed = await responding.allowed_by_policy(self.storage, record.tool_name)
                tool = self.tools.get(record.tool_name)
                text = checked_response(tool, record, request.feedback, policy_allows=allowed)
                request = replace(request, feedback=text)
            if action in (CONFIRM, MODIFY, RESPOND) and record.quorum > 1:
                if action == MODIFY:
                    raise InvalidEdit({"_": QUORUM_CANNOT_EDIT})
                counted = await self._vote(record, request, action)
                if counted is not None:
                    return counted
                action, request = await self._quorum_outcome(record, request, action)
            claimed = await self._record_decision(record, request, action, final_arguments, final_result)
        except EngineError as refused:
            refusal = await self.gate.explain_refusal(record, refused)
            self.observer.decision(_action_label(request.action), type(refusal).__name__)
            await self.gate.audit_refusal(request.actor, record, request.action, refusal, request.place)
            if refusal is refused:
                raise
            raise refusal from refused
        try:
            return await self._after_won_decision(record, request, action, render_later, claimed)
        except StorageError as exc:  # the decision stands: never tell the person that nothing was decided
            logger.warning(
                "decision stored, follow-up failed: storage unavailable (%s)",
                exc,
                extra={"approval_id": record.approval_id},
            )
            raise DecidedButUnfinished() from exc

    async def _admit_breakglass(self, clicked: ClickedApproval, request: DecisionRequest) -> DecisionRequest:
        """The gate for a break-glass (issue 31): the place, the break-glass rules instead of who may decide, still
        open; the request with its reason marked, as it is stored."""
        glass, record = self.glass, clicked.record
        if glass is None:
            raise breakglass.BreakGlassRefused("Break-glass is not turned on here.")

        async def authorise() -> None:
            await glass.authorise(record, request.actor, request.feedback)

        await self.gate.check(clicked, request.actor, request.place, authorise=authorise)
        reason = (request.feedback or "").strip()[: breakglass.MAX_REASON_CHARS]
        return replace(request, feedback=breakglass.MARK + reason, edited_params=None, edited_result=None)

    def _final(self, record: ApprovalRecord, request: DecisionRequest) -> tuple[str, Any, Any]:
        """The action as it stands, with the final arguments or result of an edit (an edit that changes nothing
        is a confirmation)."""
        action, final_arguments, final_result = request.action, None, None
        if action == MODIFY and record.kind == REVIEW:
            final_result = edited_result(request.edited_result)
            if final_result == record.result:
                action, final_result = CONFIRM, None
        elif action == MODIFY:
            final_arguments = self._merged_edit(record, request.edited_params or {})
            if final_arguments == record.arguments:
                action, final_arguments = CONFIRM, None
        return action, final_arguments, final_result

    async def _record_decision(
        self,
        record: ApprovalRecord,
        request: DecisionRequest,
        action: str,
        final_arguments: Any,
        final_result: Any,
    ) -> ClaimedStep | None:
        """The decision (exactly one wins) and its audit entry: one write, durable before anyone is told.

        If this decision completes the step, the run is claimed for its resume and started (paused -> running,
        owned and leased) in the same write, pinned to this decision's step (a run paused again since is never
        resumed with it): what that transaction read for the resume, else ``None``.
        """
        batch = Batch()
        # Issue 31: an approval without a reason checks, in this write, that the tool needs none.
        reason_check = (
            justification.add_check(batch, record)
            if justification.needs_check(record, action, request.feedback)
            else None
        )
        batch.require(
            stores.approvals.decide,
            record.approval_id,
            status=STATUS_OF_ACTION[action],
            decided_by=request.actor,
            feedback=request.feedback,
            final_arguments=final_arguments,
            now=self.clock(),
            final_result=final_result,
        )
        if action == RESPOND:  # the ledger records the call as answered by a person, in the decision's write
            add_ledger_entry(batch, record, request.feedback or "")
        # When stopping, another process's sweep resumes the run.
        claim = (
            None
            if self.work.stopping
            else batch.write(
                stores.leases.claim_paused,
                record.run_id,
                self.leases.owner,
                self.leases.lease_until(),
                decided=True,
                step=record.step,
                start=True,
            )
        )
        # The step as of this decision (and its claim), read in the same transaction: the re-render and the resume
        # use it, with no read of their own.
        step = batch.read(stores.approvals.step, record.run_id, record.step)
        history = policies = None
        if claim is not None:
            claimed = claim  # bound for the derivations below
            # The history the step's snapshot refers to, and the policies of the calls it is to run (a deny set
            # since stops an approved call: step_decisions), read only if the claim won (else nothing is read).
            history = batch.read_from(
                stores.messages.retrieve_messages, lambda done: _claimed_history(done[claimed], done[step])
            )
            policies = batch.read_from(stores.policies.views, lambda done: _claimed_policies(done[claimed], done[step]))
        # Issue 31: the break-glass rate limit, counted with this decision's own audit entry (audit steps come last).
        limit_check = self.glass.add_limit_check(batch, request.actor) if action == BREAKGLASS and self.glass else None
        self._decision_audit(batch, record, request, action, final_arguments)
        won = await self.storage.batches.apply(batch)
        if not won.applied:
            if reason_check is not None and won.refused_by is reason_check:
                raise justification.JustificationRequired(record.tool_name)
            if limit_check is not None and won.refused_by is limit_check and self.glass is not None:
                raise self.glass.limit_refusal()
            check_open(self.clock(), await self.views.record(record.approval_id))
            raise AlreadyDecided("decided", None, None)
        failpoints.failpoint("after_decide")
        # Only a claimed step is taken as read in the transaction: without the claim, a concurrent decision of the
        # same step (PostgreSQL) may commit after this read, and a read after the commit sees it.
        if claim is None or history is None or policies is None or not won[claim]:
            return None
        failpoints.failpoint("after_claim")  # claimed and started: the run is running, owned by us
        return ClaimedStep(won[step], won[history], won[policies])

    async def _after_won_decision(
        self,
        record: ApprovalRecord,
        request: DecisionRequest,
        action: str,
        render_later: bool,
        claimed: ClaimedStep | None,
    ) -> DecisionResult:
        """Remember an ask-once confirmation, re-render and resume, once ``decide`` won (and audited) the approval.

        ``claimed``: the decision's write claimed (and started) the run for its resume, and this is what its
        transaction read for it; the resume starts whatever fails here (else the run would stay claimed by this
        process, its lease renewed, and never resumed).
        """
        resumes_later = False
        try:
            self.observer.decision(
                action, "recorded", waited_seconds=(self.clock() - record.created_at).total_seconds()
            )
            logger.info("decision recorded", extra={"action": action})
            if action == CONFIRM and record.mode == ONCE and record.kind != REVIEW:
                scope = channel_scope(channel_of(await self.views.thread_of(record)))
                await self.storage.policies.remember_confirmation(
                    scope, record.tool_name, args_digest(record.arguments), request.actor, now=self.clock()
                )
            message = f"{STATUS_OF_ACTION[action].capitalize()}."
            if action == BREAKGLASS and self.glass is not None:  # issue 31: the channel post and the approvers' DMs
                message = "Break glass: the call runs once, and a review is due."
                await self.glass.announce(record, breakglass.reason_of(request.feedback))
            if not render_later:
                resumes_later = True  # after_decision starts a claimed run's resume (once), whatever happens in it
                return await self.after_decision(record, message, claimed)
            self.work.spawn(self._after_decision_logged(record, message, claimed), name=f"decided-{record.approval_id}")
            resumes_later = True
            views = await self.views.step_approvals(record.approval_id)
            clicked = next(v for v in views if v.approval_id == record.approval_id)
            return DecisionResult(approval=clicked, step=tuple(views), message=message)
        finally:
            if claimed is not None and not resumes_later:
                self.resuming.resume_claimed_run(claimed)

    def _decision_audit(
        self, batch: Batch, record: ApprovalRecord, request: DecisionRequest, action: str, final_arguments: Any
    ) -> None:
        """Add the audit entry of a decision to ``batch``, written in the same batch as the decision itself."""
        changed = final_arguments or {}
        details = {
            "tool": record.tool_name,
            "run_id": record.run_id,
            "kind": record.kind,
            "feedback": request.feedback,
            "changed": sorted(k for k in changed if changed[k] != record.arguments.get(k)),
        }
        details.update(audit_preview(record))  # issue 30: the preview's digest the decision was made on
        if record.request_reason:  # issue 31: the reason the request gave (the approver's, if any, is the feedback)
            details["request_reason"] = record.request_reason
        if record.kind == REVIEW:  # whether the model saw an edited result; the texts stay in the approval row only
            details["edited"] = action == MODIFY
        audited_as = breakglass.AUDIT_ACTION if action == BREAKGLASS else STATUS_OF_ACTION[action]
        batch.write(stores.audit.append, request.actor, audited_as, record.approval_id, details, now=self.clock())

    async def _vote(self, record: ApprovalRecord, request: DecisionRequest, action: str) -> DecisionResult | None:
        """Count a confirm (or respond) vote toward the quorum; ``None`` once the quorum is reached (decide then)."""
        prior = await self.storage.approvals.votes(record.approval_id)
        if any(v.voter == request.actor for v in prior):
            counted = sum(1 for v in prior if v.vote in COUNTED_VOTES)
            raise AlreadyDecided("approved", f"you (waiting for {record.quorum - counted} more)", None)
        vote = RESPOND_VOTE if action == RESPOND else CONFIRM
        feedback = request.feedback if action == RESPOND else None
        count = await self.storage.approvals.add_vote(
            record.approval_id, request.actor, vote, now=self.clock(), feedback=feedback
        )
        if count is None:
            check_open(self.clock(), await self.views.record(record.approval_id))
            raise ApprovalExpired()
        if count >= record.quorum:
            return None
        self.observer.decision(CONFIRM, "voted")
        await self.storage.audit.append(
            request.actor,
            "voted",
            record.approval_id,
            {"tool": record.tool_name, "kind": record.kind, "votes": count, "vote": vote, "feedback": feedback},
            now=self.clock(),
        )
        views = await self.cards.update_rendering(record)
        clicked = next(v for v in views if v.approval_id == record.approval_id)
        what = "answer" if action == RESPOND else "approval"
        return DecisionResult(
            approval=clicked, step=tuple(views), message=f"Your {what} was recorded ({count}/{record.quorum})."
        )

    async def _quorum_outcome(
        self, record: ApprovalRecord, request: DecisionRequest, action: str
    ) -> tuple[str, DecisionRequest]:
        """The decision a reached quorum makes (issue 30): answered by a person, with the latest Respond's text, when
        any of its votes is a Respond; else approved."""
        if action == RESPOND:
            return action, request
        votes = await self.storage.approvals.votes(record.approval_id)
        if not any(v.vote == RESPOND_VOTE for v in votes):
            return action, request
        answer = (await self.views.record(record.approval_id)).feedback or ""
        return RESPOND, replace(request, feedback=answer)

    async def after_decision(
        self, record: ApprovalRecord, message: str, claimed: ClaimedStep | None = None
    ) -> DecisionResult:
        """Re-render the step; resume the run when the step is decided (``claimed``: this process claimed the run
        with the decision, so it resumes it whatever the re-render does, from what the decision's transaction read;
        else the step is read here)."""
        paused: ApprovalStep | None = claimed.step if claimed is not None else None
        try:
            paused, views = await self.cards.rerender(record, paused)
        finally:
            if claimed is not None:  # the step as read after the claim: the resume reads none of it again
                self.resuming.resume_claimed_run(claimed)
        clicked = next(v for v in views if v.approval_id == record.approval_id)
        complete = claimed is not None or all(not v.is_pending for v in views)
        # Decided but not claimed with the decision (a concurrent decision of the same step committed later):
        # whoever claims it first resumes it. When stopping, another process's sweep resumes it.
        if complete and claimed is None and not self.work.stopping:
            # The step as just read: every approval in it is decided, and decisions never change again.
            self.work.spawn(self.resuming.resume(record.run_id, paused), name=f"resume-{record.run_id}")
        return DecisionResult(approval=clicked, step=tuple(views), message=message, resumed=complete)

    async def after_decision_quietly(self, record: ApprovalRecord, message: str) -> None:
        """:meth:`after_decision` where a failure is only logged (an expiry: recovery resumes what it could not)."""
        await quietly(self.after_decision(record, message))

    async def _after_decision_logged(
        self, record: ApprovalRecord, message: str, claimed: ClaimedStep | None = None
    ) -> None:
        try:
            # A claimed run's resume starts in there, always.
            await self.after_decision(record, message, claimed)
        except Exception:  # the decision is stored; recovery resumes the run if this process cannot
            logger.exception("after a decision: re-render or resume failed", extra={"approval_id": record.approval_id})

    def _merged_edit(self, record: ApprovalRecord, edited: dict[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(record.tool_name)
        if tool is None:
            raise InvalidEdit({"_": f"the tool '{record.tool_name}' is no longer available"})
        return merge_edit(tool, record.arguments, edited)


def _claimed_history(claim: RunRecord | None, paused: ApprovalStep) -> Call[...] | None:
    """A decision batch's history read (``read_from``): the history the decided step's snapshot refers to, if the
    claim won; ``None`` (read nothing) otherwise. Runs in the decision's transaction, so it looks at the reference
    only (the resume parses and checks the whole snapshot)."""
    if not claim or paused.snapshot is None:
        return None
    target = history_to_read(paused.snapshot)
    if target is None:  # self-contained: nothing to read
        return None
    history_id, ref = target
    return call(stores.messages.retrieve_messages, history_id, last_k=ref.count, up_to=ref.up_to)


def _claimed_policies(claim: RunRecord | None, paused: ApprovalStep) -> Call[...] | None:
    """A decision batch's policy read (``read_from``): the policy views in the run's channel of the tools whose calls
    the decided step may run (its approvals' and those the policy let run at the pause), if the claim won; ``None``
    (read nothing) otherwise, or for a step held for review (its tools ran). Cheap: it looks at the stored snapshot's
    decisions only; the resume reads what this did not."""
    if not claim:
        return None
    data = paused.snapshot
    if isinstance(data, dict) and data.get("stage") == REVIEW_STAGE:
        return None
    names = [a.tool_name for a in paused.approvals]
    if isinstance(data, dict):
        names += [d["tool_name"] for d in data.get("decisions") or () if d.get("execute") is True]
    channel = channel_of(paused.run)
    return call(
        stores.policies.views,
        tuple(dict.fromkeys(names)),
        platform=channel["platform"],
        workspace=channel["workspace"],
        channel=channel["channel"],
    )


def _action_label(action: object) -> str:
    """A decision's action as a metric label: one of the known actions, else ``unknown`` (clicks are untrusted)."""
    return action if isinstance(action, str) and action in ACTIONS else "unknown"
