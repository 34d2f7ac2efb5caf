"""Resuming a paused run whose step is fully decided: exactly one resume per decided step, in any process.

The run is claimed with a compare-and-set pinned to the decided step (a run paused again since is never
resumed with old decisions). Each call the people approved is checked against its policy once more, right
before it runs; a step held for review resumes with the reviews instead (its tools ran already).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot import failpoints
from bot.agent import AgentSnapshot, SnapshotError
from bot.agent.snapshot import REVIEW_STAGE
from bot.agent.stored_snapshot import HistoryRef, parse_stored, with_history
from bot.engine.decisions import step_decisions
from bot.engine.errors import MCPToolsChanged, ToolsNotConfigured
from bot.engine.inbox import Inbox
from bot.engine.leases import Leases
from bot.engine.model import PENDING, ThreadRef
from bot.engine.previewing import Prechecks
from bot.engine.review import review_from_record
from bot.engine.running import Runner
from bot.engine.streaming import THINKING, running
from bot.engine.threads import channel_of, thread_of_run
from bot.engine.work import Work
from bot.messages import ChatMessage
from bot.tools import Tool
from storage import FencedOut, StorageError
from storage.batch import Batch, stores
from storage.protocols import ApprovalRecord, ApprovalStep, PolicyView, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedStep:
    """What the decision that completed a step read in its own transaction, whose claim started the run.

    The step (its run as claimed, its approvals and its snapshot), the history the snapshot refers to, and the policy
    views of the step's tools (``None``: not read there; the resume reads it). The resume reads none of it again.
    """

    step: ApprovalStep
    history: list[ChatMessage] | None = None
    policies: Mapping[str, PolicyView] | None = None


class Resuming:
    """Resumes decided runs (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        *,
        work: Work,
        leases: Leases,
        inbox: Inbox,
        runner: Runner,
        clock: Callable[[], datetime],
        default_ttl: int,
        prechecks: Prechecks | None = None,
    ) -> None:
        self.prechecks = prechecks
        """Issue 30: each approved call's preview computed again right before it runs."""
        self.storage = storage
        self.tools = tools
        self.work = work
        self.leases = leases
        self.inbox = inbox
        self.runner = runner
        self.clock = clock
        self.default_ttl = default_ttl

    def resume_claimed_run(self, claimed: ClaimedStep) -> None:
        """Resume a run this process claimed (and started) with a decision (in the background, as every resume)."""
        run_id = claimed.step.run.run_id
        self.work.spawn(self.resume(run_id, claimed=claimed), name=f"resume-{run_id}")

    async def resume(
        self, run_id: str, paused: ApprovalStep | None = None, *, claimed: ClaimedStep | None = None
    ) -> None:
        """Resume a paused run whose step is fully decided; a no-op for anyone who loses the claim.

        ``paused``: the run, its step's approvals and (fully decided) its snapshot as the caller read them after
        the decision, used instead of reading them again: a decided approval never changes, neither does a
        step's snapshot, and the run is only claimed while it is still paused at that very step.
        ``claimed``: this process claimed and started the run already (``paused → running``), with the decision
        that completed the step, and this is what that transaction read: the step (read after the claim, so its run
        is the run as claimed; it stands for ``paused``), the history its snapshot refers to and the step's policy
        views (either ``None``: read here, right before the calls run).
        """
        if claimed is not None:
            paused = claimed.step
        run: RunRecord = paused.run if paused is not None else await self.storage.runs.get(run_id)
        thread = thread_of_run(run)
        async with self.work.thread_lock(thread.key):
            records: list[ApprovalRecord] = (
                paused.approvals if paused is not None else await self.storage.approvals.for_run(run_id, step=run.step)
            )
            current = await self._claim(run, records, claimed)
            if current is None:
                return  # not this resume's to continue: whoever continues it drains the thread
            # The fence is taken from the run as claimed (the row the claim wrote, or a read after it), with no
            # read of its own. A takeover since is refused by the fenced writes themselves (each checks owner and
            # generation in its transaction: FENCE_CONDITION), starting with resuming -> running below.
            # The claimed run waits its turn among this process's runs (owned, its lease renewed meanwhile).
            async with self.work.admission.admitted(run_id), self.leases.holding(current) as fence:
                if fence is not None:
                    # The step's snapshot came with the step when it was read fully decided: the claim, pinned to
                    # that step, took the run still paused there, so it is the snapshot of the run we hold.
                    snapshot = paused.snapshot if paused is not None else None
                    await self._resume_claimed(run_id, thread, run.requester, records, snapshot, claimed)
        await self.inbox.drain(thread)  # messages that arrived meanwhile

    async def _claim(
        self, run: RunRecord, records: Sequence[ApprovalRecord], claimed: ClaimedStep | None
    ) -> RunRecord | None:
        """The run as this resume claimed it, or ``None`` when it is not this resume's to continue."""
        if claimed is not None:
            # The claim started the run, so no start compare-and-set guards it against a second start here.
            # Each claim is handed to exactly one resume (see Deciding); beyond that, a run this process works on
            # is never started again, and work on a thread is one at a time here (the thread lock), so a second
            # start of the same claim could only come after the first one's work ended: the run is no longer
            # running under the claim's fence then, and every durable write of that start (the ledger's begin
            # before any tool, the history, the answer) is refused by the fence.
            if run.status != "running" or self.leases.fence(run.run_id) is not None:
                return None  # closed meanwhile, or worked on already
            return run
        if not records or any(r.status == PENDING for r in records):
            return None
        # Pinned to the step these decisions belong to: a run that paused again meanwhile (at a later step) is
        # never resumed with them.
        current = await self.storage.leases.claim_paused(
            run.run_id, self.leases.owner, self.leases.lease_until(), step=records[0].step
        )
        if current is None:
            return None  # another worker, replica or a supersede got there first
        failpoints.failpoint("after_claim")
        return current

    async def _resume_claimed(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        records: list[ApprovalRecord],
        snapshot_data: dict[str, Any] | None = None,
        claimed: ClaimedStep | None = None,
    ) -> None:
        """Resume a claimed run from its stored snapshot (``snapshot_data``: already read with its step).

        ``claimed``: the decision's claim moved the run to ``running`` already, so there is no start to make, and
        it read the snapshot's history and the step's policy views with it (either ``None``: read here).
        ``None``: the run was claimed to ``resuming`` (a sweep), and is started here.
        """
        try:
            stored = snapshot_data if snapshot_data is not None else await self.storage.runs.snapshot(run_id)
            snapshot, ref = parse_stored(stored)
        except (SnapshotError, StorageError) as exc:  # a corrupt snapshot fails this run only
            await self.runner.fail_run(run_id, thread, exc)
            return
        missing = [name for name in snapshot.tool_names or () if name not in self.tools]
        if missing:  # paused with tools not configured now (e.g. a rejection taken for such a call)
            await self.runner.fail_run(run_id, thread, ToolsNotConfigured(missing))
            return
        changed = rebound_tools(snapshot, self.tools)
        if changed:  # issue 25: an MCP tool changed on its server since the pause (across a restart): never run
            await self.runner.fail_run(run_id, thread, MCPToolsChanged(changed))
            return
        try:
            started = await self._started(run_id, snapshot, ref, claimed)
            if started is None:
                return
            snapshot, outcome = await self._outcome(run_id, thread, started, records, claimed)
        except FencedOut:
            raise
        except (SnapshotError, StorageError) as exc:  # a lost history (or storage failing) fails this run only
            await self.runner.fail_run(run_id, thread, exc)
            return
        if self.prechecks is not None and "tool_execution_decisions" in outcome:
            # Issue 30: a call whose preview changed since it was approved does not run; it is asked again.
            reask = await self.prechecks.check(run_id, snapshot, records, outcome["tool_execution_decisions"])
            if reask is not None:
                await self.runner.pausing.pause(run_id, thread, requester, reask.pause, reask=reask)
                return
        # The approved calls run first: their status line now, not a "thinking…" that they replace at once.
        to_run = [d.tool_name for d in outcome.get("tool_execution_decisions", ()) if d.execute]
        await self.runner.run_agent(
            run_id,
            thread,
            requester,
            lambda ctx, streaming_callback: self.runner.agent.run_async(
                [],
                snapshot=snapshot,
                chat_message_store_kwargs=self.runner.store_kwargs(run_id, thread),
                confirmation_strategy_context=ctx,
                streaming_callback=streaming_callback,
                **outcome,
            ),
            decided_calls=frozenset(r.tool_call_id for r in records),
            first_status=running(*to_run) if to_run else THINKING,
        )

    async def _started(
        self, run_id: str, snapshot: AgentSnapshot, ref: HistoryRef | None, claimed: ClaimedStep | None
    ) -> AgentSnapshot | None:
        """The snapshot with its history, once the run is started (``None``: another start got there first)."""
        if claimed is not None:
            # Started with its claim. Its history, when not read with it (the hint there did not parse), is read
            # here; either way with_history checks it is exactly what the run paused with.
            if ref is None:
                return snapshot
            history = claimed.history
            if history is None:
                assert snapshot.history_id is not None  # parse_stored gives a reference only with the history's id
                history = await self.storage.messages.retrieve_messages(
                    snapshot.history_id, last_k=ref.count, up_to=ref.up_to
                )
            return with_history(snapshot, ref, history)
        # The compare-and-set that starts the work on a claim: exactly one resume of it moves the run on (a second
        # start of the same claim, or an owner whose run was taken over, gets False and does nothing). The history
        # the snapshot refers to is read back in the same round trip, once.
        batch = Batch()
        batch.require(stores.runs.transition, run_id, "resuming", "running", fence=self.leases.fence(run_id))
        if ref is None:
            return snapshot if (await self.storage.batches.apply(batch)).applied else None
        assert snapshot.history_id is not None  # parse_stored gives a reference only with the history's id
        history = batch.read(stores.messages.retrieve_messages, snapshot.history_id, last_k=ref.count, up_to=ref.up_to)
        begun = await self.storage.batches.apply(batch)
        return with_history(snapshot, ref, begun[history]) if begun.applied else None

    async def _outcome(
        self,
        run_id: str,
        thread: ThreadRef,
        snapshot: AgentSnapshot,
        records: list[ApprovalRecord],
        claimed: ClaimedStep | None,
    ) -> tuple[AgentSnapshot, dict[str, Any]]:
        """What the agent resumes with: the reviews (a step held for review: its tools ran), or the decisions
        (those made at the pause and the people's, each call checked against its policy now)."""
        if snapshot.stage == REVIEW_STAGE:
            return snapshot, {"tool_result_reviews": [review_from_record(r) for r in records]}
        decided = await step_decisions(
            self.storage,
            snapshot.step_message.tool_calls,
            snapshot.decisions,
            records,
            run_id=run_id,
            tools=self.tools,
            context=channel_of(thread),
            default_ttl=self.default_ttl,
            now=self.clock(),
            views=claimed.policies if claimed is not None else None,
        )
        # All of the decisions are handed over, checked, below.
        return replace(snapshot, decisions=[]), {"tool_execution_decisions": decided}


def rebound_tools(snapshot: AgentSnapshot, tools: Mapping[str, Tool]) -> list[str]:
    """The tools of the paused step's calls whose binding (:attr:`Tool.binding`) differs from the one they paused
    with (a step held for review ran its calls already)."""
    if snapshot.stage == REVIEW_STAGE or not snapshot.messages or not snapshot.tool_bindings:
        return []
    called = dict.fromkeys(c.tool_name for c in snapshot.step_message.tool_calls)
    return [
        name
        for name in called
        if name in snapshot.tool_bindings and name in tools and tools[name].binding != snapshot.tool_bindings[name]
    ]
