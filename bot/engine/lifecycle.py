"""The run lifecycle across processes: owners and leases, the thread inbox, recovery and shutdown.

Several ``countersign serve`` processes may share one database. This module keeps their work apart
and makes sure none of it is lost:

- **Owners and leases.** A process (its ``instance_id``) owns each run it works on until a lease
  expires, and renews the leases of all its runs on a heartbeat. Only runs whose lease expired are
  recovered, each claimed with a compare-and-set, so a live run is never taken.
- **The thread inbox.** Every message is stored in its thread's inbox before anything else; a run
  starts for the oldest waiting message only when the thread has no active run (one transaction in
  storage), so messages are processed in order, one run at a time, by whichever process gets there.
  The process that ends or pauses a run drains the inbox; the sweep starts what a dead process left.
- **Recovery by what is durable.** A call whose ledger entry is ``executing`` gets "outcome unknown"
  and never runs again; a call that people approved but that has no ledger entry has not started and
  runs now, once, through the ledger's claim; a run that died between durable points is continued
  from its stored history. The thread is always told what happened.
- **Fencing.** A process holds a :class:`~storage.protocols.RunFence` (its instance id and the run's
  takeover generation) for each run it works on, and every durable write it makes for the run (its
  history, the ledger's outcome, the run's status, its answer) is conditional on that fence in the same
  transaction. An owner that stalled past its lease and wakes after a takeover has its first write
  refused: it drops the run at once, without a second result or a second answer.
- **Graceful shutdown.** A stopping process takes no new work, lets in-flight work finish within a
  grace period, then releases its leases so another process continues at once.
- **Wake-ups.** A message stored behind another process's run wakes that process (PostgreSQL ``NOTIFY``);
  a stopping process wakes the others for the messages and runs it leaves behind. Whoever is woken starts
  the thread's waiting messages at once instead of at its next sweep; the sweep stays the fallback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.agent import AgentSnapshot
from bot.agent.snapshot import REVIEW_STAGE
from bot.agent.stored_snapshot import stored_step
from bot.agent.tool_runner import OUTCOME_UNKNOWN, ToolRunner
from bot.engine.decisions import ID_LESS_PREFIX, step_decisions
from bot.engine.errors import AlreadyDecided, EngineError
from bot.engine.ledger import StorageExecutionLedger, ledger_key
from bot.engine.model import Inbound, ThreadRef
from bot.engine.outbox import Deliveries, address_of, thread_of
from bot.engine.retention import Retention
from bot.engine.review import WITHHELD_AFTER_RESTART, needs_review, review_from_record
from bot.hitl.apply import apply_decisions, bind_decisions, closing_results, dangling_tool_calls
from bot.hooks import apply_reviews
from bot.messages import ChatMessage, ChatRole, new_id
from storage.errors import FencedOut
from storage.protocols import (
    TERMINAL_RUN_STATUSES,
    InboxItem,
    Read,
    RunFence,
    RunRecord,
    ThreadAddress,
    Wakeup,
    Write,
)

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

NOT_RUN_AFTER_CRASH = "not run: the bot stopped before running this call"
MAX_RECOVERIES = 3
"""A run taken over this many times (it keeps killing its process) is closed and the person told."""
HISTORY_LOOKBACK = 200
"""How many recent messages recovery reads to find a run's last step (a step is far shorter)."""


def user_message(inbound: Inbound) -> ChatMessage:
    """The history message of a person's message."""
    return ChatMessage.from_user(inbound.text, meta={"user": inbound.user, "event_id": inbound.event_id})


class LeaseLost(Exception):
    """Another process took over the run this process was working on (its lease had expired)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} was taken over by another process")
        self.run_id = run_id


@dataclass(frozen=True)
class Received:
    """A message stored in its thread's inbox, not yet processed."""

    thread: ThreadRef
    item_id: int
    message_id: str | None
    started: tuple[RunRecord, InboxItem] | None = None
    """The run started for the thread's oldest waiting message in the same write (this process owns it)."""


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


def _marked_unknown(entry: Any) -> bool:
    """Whether a ledger entry is an "outcome unknown" a recovery recorded (its call's result is still unwritten)."""
    return bool(entry.status == "failed" and entry.result == OUTCOME_UNKNOWN)


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(set(names)))


class RunLifecycle:
    """One process's side of the lifecycle: its instance id, heartbeat, sweep, inbox drains, shutdown."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.storage = engine.storage
        self.config = engine.config
        self.owner: str = engine.config.instance_id
        self.clock: Callable[[], datetime] = engine.clock
        self.deliveries = Deliveries(
            engine.storage,
            engine.surfaces,
            owner=self.owner,
            clock=engine.clock,
            claim_seconds=engine.config.lease_seconds,
        )
        self.retention = Retention(engine.storage, engine.config, engine.clock)
        self.stopping = False
        self._background: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Task[Any]] = set()
        self._working: dict[str, asyncio.Task[Any]] = {}
        self._lost: set[str] = set()
        self._fences: dict[str, RunFence] = {}
        self._held: dict[str, RunRecord] = {}
        # Per thread: whether messages waited as of the last run's pause or end write (its drain goes by it).
        self._waiting_seen: dict[str, bool] = {}

    # --- fences -------------------------------------------------------------------------------------

    def fence(self, run_id: str) -> RunFence | None:
        """The fence this process holds on the run while it works on it, else ``None``."""
        return self._fences.get(run_id)

    def held(self, run_id: str) -> RunRecord | None:
        """The run as this process claimed it, while it works on it under :meth:`fence`, else ``None``.

        Its step and generation are still the run's: only the owner's pause moves the step (and ends the work),
        and a takeover, which moves the generation, fences out every write this process would make.
        """
        return self._held.get(run_id)

    @asynccontextmanager
    async def holding(self, run: RunRecord) -> AsyncIterator[RunFence | None]:
        """Work on a run this process just claimed, under the fence it claimed it with.

        Yields ``None`` (hold nothing, write nothing) if the run is not this process's: it was taken
        over between the claim and this read.
        """
        if run.owner != self.owner or not RunFence.of(run).holds_for(run):
            logger.warning("run taken over before work on it began; dropping it here", extra={"run_id": run.run_id})
            yield None
            return
        fence = RunFence.of(run)
        self._fences[run.run_id] = fence
        self._held[run.run_id] = run
        try:
            yield fence
        finally:
            if self._fences.get(run.run_id) == fence:
                del self._fences[run.run_id]
                del self._held[run.run_id]

    def dropped(self, run_id: str) -> None:
        """Log, once, that this process's write for a run was fenced out and its work on the run dropped."""
        logger.warning(
            "run taken over by another process; this process's work on it was dropped",
            extra={"run_id": run_id, "owner": self.owner},
        )

    # --- leases -------------------------------------------------------------------------------------

    def lease_until(self) -> datetime:
        """When a lease taken or renewed now expires."""
        return self.clock() + timedelta(seconds=self.config.lease_seconds)

    async def listen(self) -> None:
        """Start receiving wake-ups (before recovery, so none sent meanwhile is missed); never fails the start.

        If the database refuses the listening connection now, it keeps being retried in the background and
        the sweep finds waiting messages meanwhile.
        """
        try:
            await self.storage.wakeups.listen()
        except Exception:
            logger.warning("not listening for wake-ups yet; the sweep finds waiting messages meanwhile", exc_info=True)

    def start(self, *, sweep: bool) -> None:
        """Start the heartbeat, acting on wake-ups, and the sweep if asked."""
        self._background.append(asyncio.create_task(self._heartbeat(), name="countersign-heartbeat"))
        self._background.append(asyncio.create_task(self._wakeups_forever(), name="countersign-wakeups"))
        if sweep:
            self._background.append(asyncio.create_task(self._sweep_forever(), name="countersign-sweep"))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_seconds)
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception:  # a missed beat is survivable; the lease is three beats long by default
                logger.exception("could not renew leases")

    async def beat(self) -> None:
        """Renew this process's leases; stop working on any run another process has taken over meanwhile.

        A process that stalled longer than its lease (a long pause, a suspended VM) finds its run continued
        elsewhere: it drops its own work on the run without writing anything, so nothing is done twice.
        """
        renewed = set(await self.storage.leases.renew(self.owner, self.lease_until()))
        for run_id, task in list(self._working.items()):
            if run_id in renewed or task.done():
                continue
            run = await self.storage.runs.get(run_id)
            # While this process works on it, only a take-over changes the run's owner or status.
            if run.status not in ("running", "resuming") or run.owner != self.owner:
                logger.warning("another process took over a run; stopping here", extra={"run_id": run_id})
                self._lost.add(run_id)
                task.cancel()

    async def guarded(self, run_id: str, work: Awaitable[Any]) -> Any:
        """Await the agent's work on a run; :class:`LeaseLost` if the heartbeat finds the run taken over."""
        task = asyncio.ensure_future(work)
        self._working[run_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if run_id in self._lost and not (current is not None and current.cancelling()):
                raise LeaseLost(run_id) from None
            raise
        finally:
            self._working.pop(run_id, None)
            self._lost.discard(run_id)
            # The task holds the work's exception (a pause, usually), whose traceback holds this frame:
            # dropping the frame's reference leaves no cycle for the garbage collector to find.
            del task

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval_seconds)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # the sweep must outlive a transient storage error
                logger.exception("sweep failed")

    async def sweep(self) -> None:
        """One pass: expire due approvals, send due reminders, recover abandoned runs, start orphaned messages,
        deliver the outbox."""
        await self.engine.sweep_expired()
        await self.engine.remind_due()
        await self.recover()
        await self.storage.events.prune(7 * 86400)
        await self.retention.maybe_apply()

    # --- wake-ups -----------------------------------------------------------------------------------

    async def _wakeups_forever(self) -> None:
        while True:
            self.woken(await self.storage.wakeups.next())

    def woken(self, wakeup: Wakeup) -> None:
        """Act on a wake-up: start the thread's waiting messages, or look at everything (as the sweep does)."""
        if self.stopping or wakeup.owner not in (None, self.owner):
            return
        if wakeup.address is None:
            self.engine.spawn(self._recover_quietly(), name="recover-on-wakeup")
            return
        thread = thread_of(wakeup.address)
        if self.engine.thread_lock(thread.key).locked():
            return  # this process works on the thread: it drains the inbox when that work ends
        self.engine.spawn(self.drain(thread), name=f"drain-{thread.key}")

    async def _recover_quietly(self) -> None:
        try:
            await self.recover()
        except Exception:  # the sweep tries again
            logger.exception("recovery after a wake-up failed")

    async def hand_over(self, address: ThreadAddress | None, *, unless_empty: bool = False) -> None:
        """Wake the other processes for work this stopping process leaves behind (``None``: runs it released).

        ``unless_empty``: only if the thread's inbox holds a message (a stopping drain that started nothing).
        """
        try:
            if unless_empty and address is not None and not await self.storage.inbox.waiting(address.chat_history_id):
                return
            await self.storage.wakeups.wake(address)
        except Exception:  # the work is stored either way: another process's sweep finds it
            logger.warning("could not wake another process; its sweep will find the work", exc_info=True)

    # --- the inbox ----------------------------------------------------------------------------------

    def track(self, task: asyncio.Task[Any] | None) -> None:
        """Count ``task`` as in-flight work that a graceful shutdown waits for."""
        if task is not None:
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def receive(self, inbound: Inbound) -> Received | None:
        """Store a person's message in its thread's inbox, durably; ``None`` for a redelivered event.

        The platform's event id is marked seen in the same write, so a redelivery is stored once. An
        adapter awaits this before it acknowledges the event: what the platform saw acknowledged is stored.
        """
        thread = inbound.thread_ref
        now = self.clock()
        message = user_message(inbound)
        enqueue = Write(
            "inbox",
            "enqueue",
            (address_of(thread), inbound.user, message.to_dict(), inbound.message_id),
            {"now": now, "event_key": f"{inbound.platform}:event:{inbound.event_id}"},
            required=True,
        )
        started = None
        if self.stopping or self.engine.thread_lock(thread.key).locked():
            item_id = await self.storage.inbox.enqueue(*enqueue.args, **enqueue.kwargs)
        else:
            # The thread is free here: the run for its oldest waiting message starts in the same write (one round
            # trip; the database still allows one active run per thread), and :meth:`process` runs it.
            start = Write("inbox", "start_next", (thread.key, new_id(), self.owner, self.lease_until()), {"now": now})
            # What the run reads first (its history, with this message, and its memories) is read in the same write,
            # after the run and its message are stored: what the run would read itself, one round trip less each.
            ahead = self.engine.reads_ahead(inbound, message)
            outcome = await self.storage.batches.apply([enqueue, start, *ahead])
            item_id, started = outcome.results[:2] if outcome.applied else (None, None)
            if started is not None:
                self.engine.history.prefetched(started[0].run_id, list(zip(ahead, outcome.results[2:], strict=True)))
        if item_id is None:
            logger.info("duplicate event ignored", extra={"event_id": inbound.event_id})
            return None
        return Received(thread, item_id, inbound.message_id, started)

    def waiting_read(self, thread: ThreadRef) -> Read:
        """The read of the thread's waiting messages that a run's pause or end makes in its own write (first).

        The drain after the run goes by it (:meth:`saw_waiting`) instead of reading again. It is as of that
        write: a message stored after it was stored by a writer that saw the run paused or ended, and that
        writer starts it or leaves it for the run's end. On PostgreSQL the read takes the thread's inbox lock
        (as ``enqueue`` does), so an enqueue in flight commits before it or waits for the run's write.
        """
        return Read("inbox", "waiting", (thread.key,))

    def saw_waiting(self, thread: ThreadRef, items: Any) -> None:
        """Note what :meth:`waiting_read` found, for the thread's next drain."""
        self._waiting_seen[thread.key] = bool(items)

    def forget_waiting(self, thread: ThreadRef) -> None:
        """A run starts on the thread: what an earlier run's write found no longer holds."""
        self._waiting_seen.pop(thread.key, None)

    async def process(self, received: Received) -> None:
        """Process the thread of a received message (or leave the message queued behind its active run)."""
        if self.stopping:
            await self.hand_over(address_of(received.thread))  # stored: another process starts it
            return
        self.track(asyncio.current_task())
        await self.drain(received.thread, waiting=(received.item_id, received.message_id), started=received.started)

    async def drain(
        self,
        thread: ThreadRef,
        waiting: tuple[int, str | None] | None = None,
        started: tuple[RunRecord, InboxItem] | None = None,
    ) -> None:
        """Start runs for the thread's waiting messages, oldest first, while the thread is free.

        ``waiting`` names a message just stored: if it cannot start now, the person is shown that it is queued.
        ``started``: the run :meth:`receive` started already (with its inbox item); it runs first.
        """
        lock = self.engine.thread_lock(thread.key)
        shown = False
        if waiting is not None and started is None and lock.locked():
            # This process is busy with the thread: the holder starts the message.
            shown = await self._show_queued(thread, waiting)
        async with lock:
            fresh = waiting is not None  # a message was just stored: try to start at once
            while not self.stopping:
                if started is None:
                    # After a run, one read tells whether anything waits (a writer that saw the run active has
                    # committed its message before looking, so this read sees it).
                    if not fresh:
                        seen = self._waiting_seen.pop(thread.key, None)  # read by the run's pause or end write
                        if not (seen if seen is not None else await self.storage.inbox.waiting(thread.key)):
                            return
                    started = await self.storage.inbox.start_next(
                        thread.key, new_id(), self.owner, self.lease_until(), now=self.clock()
                    )
                fresh = False
                if started is None:
                    active = await self.storage.runs.active_for_thread(thread.key)
                    if active is None:
                        return
                    if active.status == "paused":
                        queued = await self.storage.inbox.waiting(thread.key)
                        # Messages queued while the run ran, none by someone who may replace it: they wait for its end.
                        if not any([await self.engine.listening.may_supersede(active, q.requester) for q in queued]):
                            return
                        await self.engine.supersede(active)
                        continue
                    if waiting is not None and not shown:  # another process runs this thread
                        shown = await self._show_queued(thread, waiting)
                    return
                (run, item), started = started, None
                async with self.holding(run) as fence:
                    if fence is not None:
                        await self.engine.run_agent(
                            run.run_id,
                            thread,
                            run.requester,
                            self.engine.from_history(run.run_id, thread),
                            message_id=item.message_ref,
                        )
            # Stopping: what still waits for the thread is another process's to start.
            await self.hand_over(address_of(thread), unless_empty=True)

    async def _show_queued(self, thread: ThreadRef, waiting: tuple[int, str | None]) -> bool:
        surface = self.engine.surfaces.get(thread.platform)
        show = getattr(surface, "show_queued", None)
        if show is not None:
            try:
                await show(thread, waiting[1])
            except Exception:  # cosmetic: the message is queued either way
                logger.warning("could not show that a message is queued", exc_info=True)
        return True

    # --- recovery -----------------------------------------------------------------------------------

    async def recover(self) -> None:
        """Take over runs whose owner stopped, resume decided steps, start orphaned messages, post owed messages."""
        if self.stopping:
            return
        now = self.clock()
        for run in await self.storage.leases.expired(now=now):
            claimed = await self.storage.leases.claim_expired(run.run_id, self.owner, self.lease_until(), now=now)
            if claimed is not None:
                self.engine.observer.lease_takeover()
                self.engine.spawn(self._recover_run(claimed), name=f"recover-{run.run_id}")
        for run in await self.storage.leases.decided_paused():
            self.engine.spawn(self.engine.resume(run.run_id), name=f"resume-{run.run_id}")
        for item in await self.storage.inbox.orphaned():
            thread = ThreadRef(item.address.platform, item.address.workspace, item.address.channel, item.address.thread)
            self.engine.spawn(self.drain(thread), name=f"drain-{thread.key}")
        await self.deliveries.deliver_due()

    async def _recover_run(self, run: Any) -> None:
        thread = ThreadRef(run.platform, run.workspace, run.channel, run.thread)
        async with self.engine.thread_lock(thread.key), self.holding(run) as fence:
            try:
                if fence is not None:
                    await self._continue(run, thread)
            except FencedOut:  # taken over again while recovering it: the new owner continues
                self.dropped(run.run_id)
            except Exception as exc:  # whatever went wrong, the run must not stay owned and running forever
                logger.exception("could not recover a run", extra={"run_id": run.run_id})
                await self.engine.fail_run(run.run_id, thread, exc)
        await self.drain(thread)

    async def _continue(self, run: Any, thread: ThreadRef) -> None:
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
            {"unknown_outcome": sorted(report.unknown), "ran": sorted(report.ran), "owner": self.owner},
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
            await self.engine.finish_run(run.run_id, thread, {"last_message": last, "exit_reason": "text"})
            return
        await self.storage.runs.transition(run.run_id, "resuming", "running", fence=self.fence(run.run_id))
        await self.deliveries.say(thread, report.notice(continuing=True), notice_key)
        await self.engine.run_agent(run.run_id, thread, run.requester, self.engine.from_history(run.run_id, thread))

    async def _finish_decided_step(self, run: Any, thread: ThreadRef, report: RecoveryReport) -> None:
        """Write the resumed step as the agent would have, and run its approved calls that never started."""
        snapshot = stored_step(await self.storage.runs.snapshot(run.run_id))  # the step alone: no history read
        records = await self.storage.approvals.for_run(run.run_id, step=run.step)
        if snapshot.stage == REVIEW_STAGE:
            await self._release_reviewed(run, thread, snapshot, records)
            return
        step = snapshot.step_message
        # Each call still to run is checked against its policy now, as any resume does: a deny set since stops it.
        # One that started already (the ledger has it) is not about to run: its outcome is what the ledger says.
        started = [
            i
            for i, c in enumerate(step.tool_calls)
            if await self.storage.ledger.get(ledger_key(run.run_id, c.id or f"{step.id}:{i}")) is not None
        ]
        decisions = await step_decisions(
            self.storage,
            step.tool_calls,
            snapshot.decisions,
            records,
            run_id=run.run_id,
            tools=self.engine.tools,
            context={"platform": run.platform, "workspace": run.workspace, "channel": run.channel},
            default_ttl=self.engine.config.default_ttl_seconds,
            now=self.clock(),
            started=started,
        )
        applied = apply_decisions(step, decisions, self.engine.tools)
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        written = {m.id for m in history} | {m.meta.get("split_from") for m in history}
        if step.id not in written and not await self._any_started(run.run_id, applied.to_execute):
            # The resume died before writing the step, so nothing of it has run. (A step older than the
            # window read here that ran a call has ledger entries, so it is not written a second time.)
            await self.storage.messages.write_messages(thread.key, applied.messages, fence=self.fence(run.run_id))
            history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        open_ids = {c.id for c in dangling_tool_calls(history) if c.id is not None}
        positions = {id(c): i for i, c in enumerate(step.tool_calls)}
        calls, keys, results = [], [], []
        for call in applied.to_execute:
            if call.id not in open_ids:
                continue  # its result is in the history already
            original = next((c for c in step.tool_calls if c.id == call.id), call)
            call_key = call.id or f"{step.id}:{positions.get(id(original), 0)}"
            entry = await self.storage.ledger.get(ledger_key(run.run_id, call_key))
            if entry is None:
                calls.append(call)
                keys.append(call_key)
                report.ran.append(call.tool_name)
            elif entry.status == "executing":
                await self.storage.ledger.mark_unknown(entry.tool_call_id, OUTCOME_UNKNOWN)
                results.append(ChatMessage.from_tool(OUTCOME_UNKNOWN, origin=call, error=True))
                report.unknown.append(call.tool_name)
            else:
                if _marked_unknown(entry):  # by an earlier recoverer that was stopped before it told the thread
                    report.unknown.append(call.tool_name)
                results.append(ChatMessage.from_tool(entry.result or "", origin=call, error=entry.status != "done"))
        # A call that does not run now (a deny set since it was approved), left without a result by a resume that
        # wrote the step as it was to run then, and never started: the model is told why (not "the bot stopped").
        refused = bind_decisions(step.tool_calls, decisions)
        for call in applied.rejected:
            if call.id in open_ids and await self.storage.ledger.get(ledger_key(run.run_id, call.id)) is None:
                feedback = refused[positions[id(call)]].feedback or NOT_RUN_AFTER_CRASH
                results.append(ChatMessage.from_tool(feedback, origin=call, error=True))
        if calls:
            runner = ToolRunner(self.engine.tools, ledger=StorageExecutionLedger(self.storage, self.fence))
            results += await runner.run(calls, run_id=run.run_id, call_keys=keys, state=dict(snapshot.state))
        order = {c.id: i for i, c in enumerate(step.tool_calls)}
        results.sort(key=lambda m: order.get(m.tool_call_result.origin.id, 0))
        if results:
            await self.storage.messages.write_messages(thread.key, results, fence=self.fence(run.run_id))

    async def _release_reviewed(self, run: Any, thread: ThreadRef, snapshot: AgentSnapshot, records: list[Any]) -> None:
        """A step held for review whose resume died: give the model what the reviews decided (its tools ran)."""
        released = apply_reviews(
            snapshot.held_results, snapshot.pending_tool_calls, [review_from_record(r) for r in records]
        )
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        open_ids = {c.id for c in dangling_tool_calls(history)}
        missing = [m for m in released if m.tool_call_result is not None and m.tool_call_result.origin.id in open_ids]
        if missing:
            await self.storage.messages.write_messages(thread.key, missing, fence=self.fence(run.run_id))

    async def _any_started(self, run_id: str, calls: list[Any]) -> bool:
        for call in calls:
            if call.id is not None and await self.storage.ledger.get(ledger_key(run_id, call.id)) is not None:
                return True
        return False

    async def _close_dangling(self, run: Any, thread: ThreadRef, report: RecoveryReport) -> None:
        """Give every call left without a result the result the ledger knows (or "not run")."""
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=HISTORY_LOOKBACK)
        closing = []
        for message in closing_results(history, NOT_RUN_AFTER_CRASH):
            origin = message.tool_call_result.origin
            if origin.id is None:
                closing.append(message)
                continue
            entry = await self.storage.ledger.get(ledger_key(run.run_id, origin.id))
            if entry is not None and entry.status == "executing":
                await self.storage.ledger.mark_unknown(entry.tool_call_id, OUTCOME_UNKNOWN)
                message.tool_call_result.result = OUTCOME_UNKNOWN
                report.unknown.append(origin.tool_name)
            elif entry is not None and entry.result is not None and await self._under_review(run, origin):
                # It ran, but the bot stopped before a person reviewed it: never released without a decision.
                message.tool_call_result.result = WITHHELD_AFTER_RESTART
            elif entry is not None and entry.result is not None:
                # It finished before the crash: telling the model "not run" would invite running it again.
                message.tool_call_result.result = entry.result
                message.tool_call_result.error = entry.status != "done"
                if _marked_unknown(entry):  # by an earlier recoverer that was stopped before it told the thread
                    report.unknown.append(origin.tool_name)
            closing.append(message)
        if closing:
            await self.storage.messages.write_messages(thread.key, closing, fence=self.fence(run.run_id))

    async def _under_review(self, run: Any, call: Any) -> bool:
        context = {"platform": run.platform, "workspace": run.workspace, "channel": run.channel}
        return await needs_review(
            self.storage,
            self.engine.tools,
            call.tool_name,
            context,
            self.engine.config.default_ttl_seconds,
            arguments=call.arguments,
        )

    async def _give_up(self, run: Any, thread: ThreadRef, report: RecoveryReport) -> None:
        if not await self.storage.runs.transition(
            run.run_id, ("running", "resuming"), "failed", fence=self.fence(run.run_id), error="bot restarted"
        ):
            self.dropped(run.run_id)
            return
        self.engine.observer.run_ended("failed")
        text = report.notice(continuing=False) + " I could not continue it, so I stopped; please ask again."
        await self.deliveries.say(thread, text, f"gave-up:{run.run_id}")

    async def explain_refusal(self, record: Any, refusal: EngineError) -> EngineError:
        """A click on an approved call that never ran, or whose outcome is unknown, is told exactly that."""
        if not isinstance(refusal, AlreadyDecided) or refusal.status not in ("approved", "modified"):
            return refusal
        if record.tool_call_id.startswith(ID_LESS_PREFIX):
            return refusal
        who = f" by {refusal.decided_by}" if refusal.decided_by else ""
        entry = await self.storage.ledger.get(ledger_key(record.run_id, record.tool_call_id))
        if entry is not None and entry.status == "failed" and entry.result == OUTCOME_UNKNOWN:
            detail = (
                f"This call was already {refusal.status}{who}, but the bot stopped while it was running: "
                "its outcome is unknown, and it was not run again."
            )
        elif entry is None and (await self.storage.runs.get(record.run_id)).status in TERMINAL_RUN_STATUSES:
            detail = (
                f"This call was already {refusal.status}{who}, but it never ran: its run stopped before it started."
            )
        else:
            return refusal
        return AlreadyDecided(refusal.status, refusal.decided_by, refusal.decided_at, detail=detail)

    # --- shutdown -----------------------------------------------------------------------------------

    async def shutdown(self, grace: float) -> None:
        """Take no new work; let in-flight work finish within ``grace`` seconds; then release this process's runs."""
        self.stopping = True
        deadline = asyncio.get_running_loop().time() + grace
        while True:
            pending = [t for t in (*self._inflight, *self.engine.tasks) if t is not asyncio.current_task()]
            if not pending:
                break
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
            await asyncio.wait(pending, timeout=remaining)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        released = await self.storage.leases.release(self.owner, now=self.clock())
        if released:
            logger.info("released runs for another process", extra={"runs": released, "owner": self.owner})
            await self.hand_over(None)
