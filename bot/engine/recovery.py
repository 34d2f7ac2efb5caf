"""Recovery by what is durable: runs whose owner stopped are taken over and finished or continued.

A call whose ledger entry is ``executing`` gets "outcome unknown" and never runs again; a call that people
approved but that has no ledger entry has not started and runs now, once, through the ledger's claim; a run
that died between durable points is continued from its stored history. The thread is always told what
happened. Only runs whose lease expired are recovered, each claimed with a compare-and-set, so a live run is
never taken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from bot.agent import AgentSnapshot
from bot.agent.snapshot import REVIEW_STAGE
from bot.agent.stored_snapshot import stored_step
from bot.agent.tool_runner import OUTCOME_UNKNOWN, ToolRunner
from bot.engine.dangling import close_dangling
from bot.engine.decisions import step_decisions
from bot.engine.inbox import Inbox
from bot.engine.leases import Leases
from bot.engine.ledger import StorageExecutionLedger, ledger_key
from bot.engine.model import WORKING_RUN_STATUSES, ThreadRef
from bot.engine.outbox import Deliveries, thread_of
from bot.engine.resuming import Resuming
from bot.engine.review import WITHHELD_AFTER_RESTART, needs_review, review_from_record
from bot.engine.running import Runner
from bot.engine.threads import channel_of, thread_of_run
from bot.engine.work import Work
from bot.hitl.apply import AppliedStep, apply_decisions, bind_decisions, dangling_tool_calls
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hooks import apply_reviews
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.metrics import Observer
from bot.tools import Tool
from storage.errors import FencedOut
from storage.protocols import ApprovalRecord, LedgerEntry, RunRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

NOT_RUN_AFTER_CRASH = "not run: the bot stopped before running this call"
MAX_RECOVERIES = 3
"""A run taken over this many times (it keeps killing its process) is closed and the person told."""
HISTORY_LOOKBACK = 200
"""How many recent messages recovery reads to find a run's last step (a step is far shorter)."""


@dataclass
class RecoveryReport:
    """What recovery found and did for one run, for the notice and the audit log."""

    ran: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    def notice(self, continuing: bool) -> str:
        """The sentence the thread gets."""
        text = "I was restarted while working on this"
        text += ", so I picked it up where I stopped." if continuing else "."
        if self.ran:
            text += f" {_names(self.ran)} had been approved and had not started: it ran now, once."
        if self.unknown:
            text += (
                f" The outcome of {_names(self.unknown)} is unknown: it was running when I stopped and was not re-run."
            )
        return text


class Recovery:
    """Takes over and repairs the runs, steps, messages and notices that a stopped process left behind."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        *,
        work: Work,
        leases: Leases,
        inbox: Inbox,
        runner: Runner,
        resuming: Resuming,
        deliveries: Deliveries,
        observer: Observer,
        clock: Callable[[], datetime],
        default_ttl: int,
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.work = work
        self.leases = leases
        self.inbox = inbox
        self.runner = runner
        self.resuming = resuming
        self.deliveries = deliveries
        self.observer = observer
        self.clock = clock
        self.default_ttl = default_ttl
        self._took_back_own = False

    async def recover(self) -> None:
        """Take over runs whose owner stopped, resume decided steps, start orphaned messages, post owed messages."""
        if self.work.stopping:
            return
        if not self._took_back_own:
            await self.take_back_own()
        await self.take_back_stranded()
        now = self.clock()
        for run in await self.storage.leases.expired(now=now):
            claimed = await self.storage.leases.claim_expired(
                run.run_id, self.leases.owner, self.leases.lease_until(), now=now
            )
            if claimed is not None:
                self.observer.lease_takeover()
                self.work.spawn(self._recover_run(claimed), name=f"recover-{run.run_id}")
        for run in await self.storage.leases.decided_paused():
            self.work.spawn(self.resuming.resume(run.run_id), name=f"resume-{run.run_id}")
        for item in await self.storage.inbox.orphaned():
            thread = thread_of(item.address)
            self.work.spawn(self.inbox.drain(thread), name=f"drain-{thread.key}")
        await self.deliveries.deliver_due()

    async def take_back_own(self) -> None:
        """Once, at start: take back at once the runs this instance id held when its previous life died.

        They would otherwise wait out their lease (and this process's first heartbeat would even renew it).
        Nothing of this process works on a run before its first recovery, so every run still owned under its
        id is a dead life's; each is claimed with the usual fencing bump and recovered as any takeover is.
        """
        self._took_back_own = True
        for run in await self.storage.leases.claim_own(self.leases.owner, self.leases.lease_until()):
            logger.info("taking back a run this instance held before it restarted", extra={"run_id": run.run_id})
            self.observer.lease_takeover()
            self.work.spawn(self._recover_run(run), name=f"recover-{run.run_id}")

    async def take_back_stranded(self) -> None:
        """Take over, as any expired lease is, the runs of this process whose step could not be written at all.

        Such a run is still owned here under a lease the heartbeat renews; its work has ended. Claiming it as
        expired (``now`` past any lease this process gave it) bumps its fencing generation, so a late write of the
        ended work is refused, and recovery continues it from what was last written. A claim the database cannot
        take yet raises: the run stays stranded, for the next sweep.
        """
        for run_id in sorted(self.runner.stranded):
            self.runner.stranded.discard(run_id)  # before the await: a recovery woken meanwhile claims it not twice
            try:
                claimed = await self.storage.leases.claim_expired(
                    run_id, self.leases.owner, self.leases.lease_until(), now=self.leases.lease_until()
                )
            except Exception:
                self.runner.stranded.add(run_id)
                raise
            if claimed is not None:  # None: it ended or moved meanwhile (a decision, a takeover); nothing to do
                logger.info("recovering a run whose step could not be written", extra={"run_id": run_id})
                self.observer.lease_takeover()
                self.work.spawn(self._recover_run(claimed), name=f"recover-{run_id}")

    async def _recover_run(self, run: RunRecord) -> None:
        thread = thread_of_run(run)
        async with (
            self.work.thread_lock(thread.key),
            self.work.admission.admitted(run.run_id),
            self.leases.holding(run) as fence,
        ):
            try:
                if fence is not None:
                    await self._continue(run, thread)
            except FencedOut:  # taken over again while recovering it: the new owner continues
                self.leases.dropped(run.run_id)
            except Exception as exc:  # whatever went wrong, the run must not stay owned and running forever
                logger.exception("could not recover a run", extra={"run_id": run.run_id})
                await self.runner.fail_run(run.run_id, thread, exc)
        await self.inbox.drain(thread)

    async def _continue(self, run: RunRecord, thread: ThreadRef) -> None:
        """Repair the run's history from the ledger and the recorded decisions, then finish or continue it."""
        # Approvals of a pause that never completed (the process died while pausing) can never be decided.
        await self.storage.approvals.close_pending_for_run(run.run_id, "cancelled", "the bot restarted")
        report = RecoveryReport()
        if run.recoveries > MAX_RECOVERIES:
            await self._close_dangling(run, thread, report)
            await self._give_up(run, thread, report)
            return
        if run.step >= 1 and run.has_snapshot:
            await self._finish_decided_step(run, thread, report)
        await self._close_dangling(run, thread, report)
        await self.storage.audit.append(
            "countersign",
            "recovered",
            run.run_id,
            {"unknown_outcome": sorted(report.unknown), "ran": sorted(report.ran), "owner": self.leases.owner},
            now=self.clock(),
        )
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        last = history[-1] if history else None
        notice_key = f"recovered:{run.run_id}:{run.recoveries}"
        if last is None:
            await self._give_up(run, thread, report)
            return
        if last.role == ChatRole.ASSISTANT and not last.tool_calls and last.text:
            # The answer was computed before the process died: it is owed, not recomputed.
            await self.deliveries.say(thread, report.notice(continuing=False), notice_key)
            await self.runner.finish_run(run.run_id, thread, {"last_message": last, "exit_reason": "text"})
            return
        await self.storage.runs.transition(run.run_id, "resuming", "running", fence=self.leases.fence(run.run_id))
        await self.deliveries.say(thread, report.notice(continuing=True), notice_key)
        await self.runner.run_agent(run.run_id, thread, run.requester, self.runner.from_history(run.run_id, thread))

    # --- the step that was decided when the process stopped --------------------------------------------

    async def _finish_decided_step(self, run: RunRecord, thread: ThreadRef, report: RecoveryReport) -> None:
        """Write the resumed step as the agent would have, and run its approved calls that never started."""
        snapshot = stored_step(await self.storage.runs.snapshot(run.run_id))  # the step alone: no history read
        records: list[ApprovalRecord] = await self.storage.approvals.for_run(run.run_id, step=run.step)
        if snapshot.stage == REVIEW_STAGE:
            await self._release_reviewed(run, thread, snapshot, records)
            return
        step = snapshot.step_message
        # Each call still to run is checked against its policy now, as any resume does: a deny set since stops it.
        # One that started already (the ledger has it) is not about to run: its outcome is what the ledger says.
        started = [
            i
            for i, c in enumerate(step.tool_calls)
            if await self._entry(run.run_id, c.id or f"{step.id}:{i}") is not None
        ]
        decisions = await step_decisions(
            self.storage,
            step.tool_calls,
            snapshot.decisions,
            records,
            run_id=run.run_id,
            tools=self.tools,
            context=channel_of(run),
            default_ttl=self.default_ttl,
            now=self.clock(),
            started=started,
        )
        if self.resuming.prechecks is not None:  # issue 30: never run without a matching preview, after a crash too
            decisions = await self.resuming.prechecks.recovered(run.run_id, snapshot, records, decisions, started)
        applied = apply_decisions(step, decisions, self.tools)
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        written = {m.id for m in history} | {m.meta.get("split_from") for m in history}
        if step.id not in written and not await self._any_started(run.run_id, applied.to_execute):
            # The resume died before writing the step, so nothing of it has run. (A step older than the
            # window read here that ran a call has ledger entries, so it is not written a second time.)
            await self._write(run, thread, applied.messages)
            history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        open_ids = {c.id for c in dangling_tool_calls(history) if c.id is not None}
        results = await self._settle_calls(run, snapshot, applied, decisions, open_ids, report)
        order = {c.id: i for i, c in enumerate(step.tool_calls)}
        results.sort(key=lambda m: order.get(_origin(m).id, 0))
        if results:
            await self._write(run, thread, results)

    async def _settle_calls(
        self,
        run: RunRecord,
        snapshot: AgentSnapshot,
        applied: AppliedStep,
        decisions: list[ToolExecutionDecision],
        open_ids: set[str],
        report: RecoveryReport,
    ) -> list[ChatMessage]:
        """The results of the step's calls still open: the ledger's outcome, "unknown", or the call run now."""
        step = snapshot.step_message
        positions = {id(c): i for i, c in enumerate(step.tool_calls)}
        calls: list[ToolCall] = []
        keys: list[str] = []
        results: list[ChatMessage] = []
        for call in applied.to_execute:
            if call.id not in open_ids:
                continue  # its result is in the history already
            original = next((c for c in step.tool_calls if c.id == call.id), call)
            call_key = call.id or f"{step.id}:{positions.get(id(original), 0)}"
            entry = await self._entry(run.run_id, call_key)
            if entry is None:
                calls.append(call)
                keys.append(call_key)
                report.ran.append(call.tool_name)
            else:
                results.append(await self._known_result(call, entry, report))
        # A call that does not run now (a deny set since it was approved), left without a result by a resume that
        # wrote the step as it was to run then, and never started: the model is told why (not "the bot stopped").
        refused = bind_decisions(step.tool_calls, decisions)
        for call in applied.rejected:
            if call.id in open_ids and call.id is not None and await self._entry(run.run_id, call.id) is None:
                feedback = refused[positions[id(call)]].feedback or NOT_RUN_AFTER_CRASH
                results.append(ChatMessage.from_tool(feedback, origin=call, error=True))
        if calls:
            ledger = StorageExecutionLedger(self.storage, self.leases.fence)
            if self.resuming.prechecks is not None:  # the approved previews of the calls that passed their re-check
                ledger.approved_previews = self.resuming.prechecks.ledger.approved_previews
            runner = ToolRunner(self.tools, ledger=ledger)
            results += await runner.run(calls, run_id=run.run_id, call_keys=keys, state=dict(snapshot.state))
        return results

    async def _known_result(self, call: ToolCall, entry: LedgerEntry, report: RecoveryReport) -> ChatMessage:
        """The result of a call the ledger knows: "outcome unknown" if it was running, else what it recorded."""
        if entry.status == "executing":
            await self.storage.ledger.mark_unknown(entry.tool_call_id, OUTCOME_UNKNOWN)
            report.unknown.append(call.tool_name)
            return ChatMessage.from_tool(OUTCOME_UNKNOWN, origin=call, error=True)
        if _marked_unknown(entry):  # by an earlier recoverer that was stopped before it told the thread
            report.unknown.append(call.tool_name)
        return ChatMessage.from_tool(entry.result or "", origin=call, error=entry.status != "done")

    async def _release_reviewed(
        self, run: RunRecord, thread: ThreadRef, snapshot: AgentSnapshot, records: list[ApprovalRecord]
    ) -> None:
        """A step held for review whose resume died: give the model what the reviews decided (its tools ran)."""
        released = apply_reviews(
            snapshot.held_results, snapshot.pending_tool_calls, [review_from_record(r) for r in records]
        )
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        open_ids = {c.id for c in dangling_tool_calls(history)}
        missing = [m for m in released if m.tool_call_result is not None and m.tool_call_result.origin.id in open_ids]
        if missing:
            await self._write(run, thread, missing)

    async def _any_started(self, run_id: str, calls: Iterable[ToolCall]) -> bool:
        for call in calls:
            if call.id is not None and await self._entry(run_id, call.id) is not None:
                return True
        return False

    async def _entry(self, run_id: str, call_key: str) -> LedgerEntry | None:
        return await self.storage.ledger.get(ledger_key(run_id, call_key))

    async def _write(self, run: RunRecord, thread: ThreadRef, messages: list[ChatMessage]) -> None:
        await self.storage.messages.write_messages(thread.key, messages, fence=self.leases.fence(run.run_id))

    # --- calls left without a result ------------------------------------------------------------------

    async def _close_dangling(self, run: RunRecord, thread: ThreadRef, report: RecoveryReport) -> None:
        """Give every call left without a result the result the ledger knows (or "not run")."""

        async def settle(message: ChatMessage) -> ChatMessage:
            await self._settle_closing(run, message, report)
            return message

        await close_dangling(
            self.storage,
            thread.key,
            NOT_RUN_AFTER_CRASH,
            lookback=HISTORY_LOOKBACK,
            fence=self.leases.fence(run.run_id),
            settle=settle,
        )

    async def _settle_closing(self, run: RunRecord, message: ChatMessage, report: RecoveryReport) -> None:
        """Turn a "not run" closing result into what the ledger knows of its call."""
        result = message.tool_call_result
        assert result is not None
        origin = result.origin
        if origin.id is None:
            return
        entry = await self._entry(run.run_id, origin.id)
        if entry is None:
            return
        if entry.status == "executing":
            await self.storage.ledger.mark_unknown(entry.tool_call_id, OUTCOME_UNKNOWN)
            result.result = OUTCOME_UNKNOWN
            report.unknown.append(origin.tool_name)
        elif entry.result is not None and await self._under_review(run, origin):
            # It ran, but the bot stopped before a person reviewed it: never released without a decision.
            result.result = WITHHELD_AFTER_RESTART
        elif entry.result is not None:
            # It finished before the crash: telling the model "not run" would invite running it again.
            result.result = entry.result
            result.error = entry.status != "done"
            if _marked_unknown(entry):  # by an earlier recoverer that was stopped before it told the thread
                report.unknown.append(origin.tool_name)

    async def _under_review(self, run: RunRecord, call: ToolCall) -> bool:
        return await needs_review(
            self.storage, self.tools, call.tool_name, channel_of(run), self.default_ttl, arguments=call.arguments
        )

    async def _give_up(self, run: RunRecord, thread: ThreadRef, report: RecoveryReport) -> None:
        if not await self.storage.runs.transition(
            run.run_id, WORKING_RUN_STATUSES, "failed", fence=self.leases.fence(run.run_id), error="bot restarted"
        ):
            self.leases.dropped(run.run_id)
            return
        self.observer.run_ended("failed")
        text = report.notice(continuing=False) + " I could not continue it, so I stopped; please ask again."
        await self.deliveries.say(thread, text, f"gave-up:{run.run_id}")


def _origin(message: ChatMessage) -> ToolCall:
    result = message.tool_call_result
    assert result is not None
    return result.origin


def _marked_unknown(entry: LedgerEntry) -> bool:
    """Whether a ledger entry is an "outcome unknown" a recovery recorded (its call's result is still unwritten)."""
    return bool(entry.status == "failed" and entry.result == OUTCOME_UNKNOWN)


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(set(names)))
