"""Pausing a run: its snapshot and one approval per pending call, stored in one write, then shown.

A pause is all or nothing: the run's compare-and-set (under its fence), the approvals, the usage so far,
where the card will be shown and the card owed in the outbox go in one batch. If a policy that was read
ahead at the run's start changed since, nothing is stored and the step is decided again on fresh reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from bot import failpoints
from bot.agent.snapshot import REVIEW_STAGE
from bot.agent.stored_snapshot import stored_snapshot_data
from bot.engine import justification, tainted_rules
from bot.engine.cards import Cards, owed_card
from bot.engine.confirmation import EffectivePolicy, PoliciesRead, effective_policy
from bot.engine.decisions import approval_call_key
from bot.engine.history import PendingHistory, StepHistory, add_history
from bot.engine.leases import Leases
from bot.engine.model import ThreadRef
from bot.engine.outbox import Deliveries
from bot.engine.previewing import Reask, pause_previews, stored_preview
from bot.engine.provenance import RunProvenance, audited_taints
from bot.engine.review import REVIEW, held_result
from bot.engine.surface import Surface
from bot.engine.threads import channel_of, quietly
from bot.engine.waiting import WaitingSeen
from bot.hitl.breakpoint import HITLBreakpointException
from bot.ids import new_approval_id
from bot.messages import ToolCall
from bot.tools import Tool
from storage import NewApproval, TokenUsage
from storage.batch import Batch, stores
from storage.protocols import ApprovalRecord, PolicyView, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)


@dataclass
class _PauseWrites:
    """The approvals of one pause and the policy checks their asking depends on (see :meth:`Pausing.pause`)."""

    approvals: list[NewApproval]
    checks: dict[str, PolicyView]
    """Per tool: the view read ahead that its calls were asked about with (still stored, or nothing is)."""


class Pausing:
    """Stores and shows the pauses of this process's runs (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        surfaces: Mapping[str, Surface],
        *,
        leases: Leases,
        waiting: WaitingSeen,
        history: StepHistory,
        deliveries: Deliveries,
        cards: Cards,
        clock: Callable[[], datetime],
        default_ttl: int,
        preview_seconds: float = 10.0,
    ) -> None:
        self.preview_seconds = preview_seconds
        """``COUNTERSIGN_PREVIEW_TIMEOUT``: how long each call's preview may take at the pause (issue 30)."""
        self.storage = storage
        self.tools = tools
        self.surfaces = surfaces
        self.leases = leases
        self.waiting = waiting
        self.history = history
        self.deliveries = deliveries
        self.cards = cards
        self.clock = clock
        self.default_ttl = default_ttl

    async def pause(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        pause: HITLBreakpointException,
        policies_read: PoliciesRead | None = None,
        *,
        provenance: RunProvenance | None = None,
        reask: Reask | None = None,
    ) -> bool:
        """Store the snapshot and one approval per pending call, then render them.

        ``provenance``: the run's tainted arguments (issue 31), stored with each approval and in the audit entry.

        ``reask``: calls whose preview changed since they were approved (issue 30), asked again with both previews.

        ``policies_read``: the policies this step's checks read moments ago; a pending call's approval is
        stored with the policy that paused it, and only a call no check noted reads storage again. A policy that
        came from the views read ahead at the run's start is checked in the pause's own transaction
        (``policies.unchanged``): if it changed since, nothing of the pause is stored, the run's waiting history
        writes wait again, and this returns ``True``: the caller decides the step again on fresh reads.
        """
        snapshot = pause.snapshot
        assert snapshot is not None
        fence = self.leases.fence(run_id)
        step = await self._step_of(run_id)
        now = self.clock()
        planned = await self._approvals(run_id, step, thread, requester, pause, policies_read, now, provenance, reask)
        if policies_read is not None:
            policies_read.clear()  # the step ends here: nothing read for it is used again
        surface = self.surfaces.get(thread.platform)
        if surface is None:
            logger.error("no surface registered for platform", extra={"platform": thread.platform})
        approval_ids = [a.approval_id for a in planned.approvals if a.approval_id is not None]  # each is given one
        checks = planned.checks
        # One write, all or nothing: a pause that loses its compare-and-set (or its fence) stores no approval.
        history = self.history.take(run_id)
        batch = Batch()
        # Whether messages wait for the thread, as of this pause (read first: see WaitingSeen.read).
        waiting = self.waiting.read(batch, thread)
        # The policies asked with as read ahead at the run's start: still what is stored, or nothing is written.
        context = channel_of(thread)
        unchanged = [
            batch.require(
                stores.policies.unchanged,
                tool_name,
                seen,
                platform=context["platform"],
                workspace=context["workspace"],
                channel=context["channel"],
            )
            for tool_name, seen in checks.items()
        ]
        # The run's history not yet written (an earlier step's results): before the snapshot referring to it.
        add_history(batch, history)
        # Where the approvals are shown, recorded with them (before the message exists: a click can land while it
        # is being posted).
        shown_in = thread.place if surface is not None and approval_ids else None
        created = batch.write(stores.approvals.create_many, planned.approvals, shown_in=shown_in, shown_at=now)
        batch.require(
            stores.runs.transition,
            run_id,
            "running",
            "paused",
            fence=fence,
            # The usage so far, with the pause: a run that pauses and is never resumed (superseded, expired) counts.
            usage=TokenUsage.of(snapshot.token_usage),
            snapshot_json=stored_snapshot_data(snapshot),
            step=step,
        )
        card_key = None
        if surface is not None and approval_ids:
            # The card is owed with the pause (claimed by this process): if it dies before showing it, the sweep does.
            card_key, card = owed_card(run_id, step)
            self.deliveries.owe_in(batch, thread, card, card_key, required=False)
        details: dict[str, object] = {"approvals": approval_ids, "step": step}
        tainted = audited_taints(planned.approvals)
        if tainted:
            details["tainted"] = tainted
        reasons = {a.approval_id: a.request_reason for a in planned.approvals if a.request_reason and a.approval_id}
        if reasons:
            details["request_reasons"] = reasons  # issue 31: the reason the request gave, per approval
        if reask is not None:
            details["reasked"] = reask.audit  # what changed since each was approved (issue 30)
        batch.write(stores.audit.append, requester, "paused", run_id, details, now=now)
        failpoints.failpoint("while_pausing")
        try:
            outcome = await self.storage.batches.apply(batch)
        except Exception:
            self.history.give_back(run_id, history)
            raise
        if not outcome.applied:
            policy_changed = any(outcome.refused_by is check for check in unchanged)
            return await self._refused(run_id, policy_changed, history, step, checks)
        self.waiting.saw(thread, outcome[waiting])
        records = outcome[created]
        logger.info(
            "run paused for approval",
            extra={"step": step, "approvals": len(records), "tools": ",".join(sorted({r.tool_name for r in records}))},
        )
        failpoints.failpoint("after_pause")
        if card_key is not None:
            await self._show(run_id, thread, step, records, card_key)
        return False

    async def _step_of(self, run_id: str) -> int:
        """The step number the pause takes (one past the run's, and past any a half-done pause left)."""
        # The run as this process claimed it: its step is still the run's (only this pause moves it). A run taken
        # over while the model answered is refused by the pause's one write (its fenced transition is required:
        # nothing of the pause is stored), so no read is needed to check the fence first.
        run: RunRecord | None = self.leases.held(run_id)
        if run is None:  # not worked on under a fence (no claim to go by): read it
            run = await self.storage.runs.get(run_id)
        assert run is not None
        step = run.step + 1
        if run.recoveries:  # a pause that died half-way left (cancelled) approvals under the next step number
            step = max([step, *(a.step + 1 for a in await self.storage.approvals.for_run(run_id))])
        return step

    async def _approvals(
        self,
        run_id: str,
        step: int,
        thread: ThreadRef,
        requester: str,
        pause: HITLBreakpointException,
        policies_read: PoliciesRead | None,
        now: datetime,
        provenance: RunProvenance | None = None,
        reask: Reask | None = None,
    ) -> _PauseWrites:
        """One new approval per pending call of the paused step, each with the policy that paused it."""
        snapshot = pause.snapshot
        assert snapshot is not None
        context = channel_of(thread)
        planned = _PauseWrites([], {})
        review = snapshot.stage == REVIEW_STAGE
        calls = snapshot.step_message.tool_calls
        asked = [i for i, call in enumerate(calls) if any(call is p for p in pause.pending_tool_calls)]
        # Issue 30: what each call would do, computed now (concurrently, time-limited); a re-ask brings its own.
        brought = reask.previews if reask is not None else {}
        fresh = [i for i in asked if approval_call_key(calls[i].id, snapshot.step_message.id, i) not in brought]
        previews = {} if review else await pause_previews(self.tools, calls, self.preview_seconds, fresh)
        taints = (
            {i: provenance.stored(calls[i].tool_name, calls[i].id) for i in asked} if provenance and not review else {}
        )
        # Issue 31: a tool's rule for its tainted calls (four-eyes, approvers), read only when a call is tainted.
        strict = await tainted_rules.rules(self.storage) if any(taints.values()) else {}
        because = None if review else justification.reason_of_request(snapshot.messages, requester)
        for position in asked:
            call = calls[position]
            key = approval_call_key(call.id, snapshot.step_message.id, position)
            policy = await self._policy_of(call, context, policies_read, planned.checks)
            taint, rule = taints.get(position), strict.get(call.tool_name)
            if taint and rule:
                policy, taint = rule.apply(policy), {**taint, "rule": rule.stored()}
            preview = brought.get(key)
            if preview is None and position in previews:
                preview = stored_preview(previews[position])
            planned.approvals.append(
                NewApproval(
                    run_id=run_id,
                    step=step,
                    tool_call_id=key,
                    tool_name=call.tool_name,
                    arguments=reask.arguments.get(key, call.arguments) if reask is not None else call.arguments,
                    requester=requester,
                    platform=thread.platform,
                    chat_history_id=thread.key,
                    expires_at=now + timedelta(seconds=policy.ttl_seconds),
                    mode=policy.mode,
                    approvers=policy.approvers,
                    quorum=policy.quorum,
                    four_eyes=policy.four_eyes,
                    created_at=now,
                    kind=REVIEW if review else "approval",
                    result=held_result(snapshot, call) if review else None,
                    approval_id=new_approval_id(),
                    provenance=taint,
                    request_reason=because,
                    preview=preview,
                )
            )
        return planned

    async def _policy_of(
        self,
        call: ToolCall,
        context: dict[str, str],
        policies_read: PoliciesRead | None,
        checks: dict[str, PolicyView],
    ) -> EffectivePolicy:
        """The policy that paused ``call``: as its check noted it (read ahead: checked by the pause), else read."""
        noted = policies_read.take_checked(call.tool_name, call.id, call.arguments) if policies_read else None
        if noted is None:
            return await effective_policy(
                self.storage, self.tools.get(call.tool_name), context, self.default_ttl, arguments=call.arguments
            )
        policy, seen = noted
        if seen is not None:
            checks[call.tool_name] = seen
        return policy

    async def _refused(
        self,
        run_id: str,
        policy_changed: bool,
        history: list[PendingHistory],
        step: int,
        tools: Mapping[str, PolicyView],
    ) -> bool:
        """A pause whose write was refused: decide the step again (``True``), or drop or close it (``False``)."""
        fence = self.leases.fence(run_id)
        if policy_changed:
            self.history.give_back(run_id, history)  # the run is still ours: they go with its next batch
            logger.info(
                "policy changed since the run started; deciding the step again",
                extra={"step": step, "tools": ",".join(sorted(tools))},
            )
            return True
        if fence is not None and not fence.holds_for(await self.storage.runs.get(run_id)):
            # Taken over in the moment since the check above: closing the run's pending approvals could close
            # the new owner's, so nothing more is written here.
            self.leases.dropped(run_id)
            return False
        # Closed meanwhile (stopped, failed): nothing of this pause was stored; approvals an older, half-done
        # pause may have left are closed as before.
        await self.storage.approvals.close_pending_for_run(run_id, "cancelled", "the run was closed")
        return False

    async def _show(
        self, run_id: str, thread: ThreadRef, step: int, records: list[ApprovalRecord], card_key: str
    ) -> None:
        """Show the stored pause; if the platform fails, the card stays owed and the thread is told so."""
        try:
            await self.cards.show_step(thread, records, card_key)
        except Exception:  # the approvals are stored: they stay decidable through `pending` and App Home
            logger.exception("could not render approvals", extra={"run_id": run_id})
            await quietly(self.deliveries.retry_later(card_key))  # the sweep tries again later
            names = ", ".join(r.tool_name for r in records)
            await quietly(
                self.deliveries.say(
                    thread,
                    f"I need approval to run {names}, but could not show the buttons yet. I will try again; "
                    "meanwhile, try `pending`.",
                    f"render-failed:{run_id}:{step}",
                )
            )
