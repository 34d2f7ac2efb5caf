"""Running the agent for a run: streaming its answer, and turning its outcome into storage updates and messages.

A run ends in one of four ways, each one write before anyone is told: finished (its answer owed in the
outbox with the run's end), paused (:mod:`bot.engine.pausing`), stopped from chat, or failed (its dangling
calls closed and the thread told). A run taken over by another process ends here without a word.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot import failpoints
from bot.agent import Agent
from bot.agent.snapshot import TOOL_INVOKER_STAGE
from bot.engine.ahead import ReadsAhead
from bot.engine.confirmation import POLICIES_READ, PoliciesRead
from bot.engine.dangling import close_dangling
from bot.engine.errors import PolicyKeptChanging, ToolsNotConfigured
from bot.engine.history import StepHistory, add_history
from bot.engine.leases import LeaseLost, Leases
from bot.engine.ledger import StorageExecutionLedger
from bot.engine.memory import MEMORY_SCOPE, memory_note, run_memory_kwargs, run_memory_scope
from bot.engine.model import UNREAD, WORKING_RUN_STATUSES, ThreadRef
from bot.engine.outbox import Deliveries
from bot.engine.pausing import Pausing
from bot.engine.provenance import run_provenance
from bot.engine.sentences import STEP_NOT_SAVED, STOPPED_NOTICE, answer_text, failure_sentence
from bot.engine.stops import Stops
from bot.engine.streaming import STOPPED_FROM_CHAT, THINKING, WAITING_FOR_APPROVAL, LiveAnswer
from bot.engine.surface import Surface
from bot.engine.threads import channel_of, quietly
from bot.engine.waiting import WaitingSeen
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hooks.breakpoints import TOOL_INVOKER
from bot.logs import log_context
from bot.metrics import Observer
from storage import FencedOut, StorageError, TokenUsage
from storage.batch import Batch, stores

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

MAX_STEP_REDECISIONS = 2
"""How often a run decides a step again after its pause was refused because a policy read ahead had changed (the
second decision reads every policy afresh, so one is all it takes; past this the run fails closed)."""

Invoke = Callable[[dict[str, Any], Any], Awaitable[dict[str, Any]]]
"""How a run invokes the agent: ``invoke(confirmation_context, streaming_callback)`` → an awaitable result."""

AgentResult = dict[str, Any]


@dataclass
class _Progress:
    """How far one invocation got: whether it paused (its status line then stays, even if storing failed)."""

    paused: bool = False


class Runner:
    """Runs the agent for this process's runs and records how each ended (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        agent: Agent,
        surfaces: Mapping[str, Surface],
        *,
        leases: Leases,
        waiting: WaitingSeen,
        history: StepHistory,
        ledger: StorageExecutionLedger,
        deliveries: Deliveries,
        pausing: Pausing,
        stops: Stops,
        ahead: ReadsAhead,
        observer: Observer,
        clock: Callable[[], datetime],
        history_last_k: int,
        stream_update_seconds: float,
        memory_notes: bool,
    ) -> None:
        self.storage = storage
        self.agent = agent
        self.surfaces = surfaces
        self.leases = leases
        self.waiting = waiting
        self.history = history
        self.ledger = ledger
        self.deliveries = deliveries
        self.pausing = pausing
        self.stops = stops
        self.ahead = ahead
        self.observer = observer
        self.clock = clock
        self.history_last_k = history_last_k
        self.stream_update_seconds = stream_update_seconds
        self.memory_notes = memory_notes
        self.stranded: set[str] = set()
        """Runs whose step could not be written at all (the database out of reach): recovery continues each from
        what was last written, as after a crash (:meth:`bot.engine.recovery.Recovery.recover` takes them back)."""

    # --- how a run invokes the agent -------------------------------------------------------------------

    def from_history(self, run_id: str, thread: ThreadRef) -> Invoke:
        """How a run continues from the thread's stored history (its newest message is already there)."""
        return lambda ctx, streaming_callback: self.agent.run_async(
            [],
            run_id=run_id,
            chat_message_store_kwargs=self.store_kwargs(run_id, thread),
            confirmation_strategy_context=ctx,
            # The requester's memories and the channel's shared ones; remember saves for the requester.
            memory_store_kwargs=run_memory_kwargs(ctx),
            **{MEMORY_SCOPE: run_memory_scope(ctx)},
            streaming_callback=streaming_callback,
        )

    def store_kwargs(self, run_id: str, thread: ThreadRef) -> dict[str, Any]:
        """Where the agent keeps the run's history, and the fence every write of it is made under."""
        return {"chat_history_id": thread.key, "last_k": self.history_last_k, "fence": self.leases.fence(run_id)}

    # --- a run --------------------------------------------------------------------------------------

    async def run_agent(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        invoke: Invoke,
        message_id: str | None = None,
        *,
        decided_calls: frozenset[str] = frozenset(),
        first_status: str = THINKING,
    ) -> None:
        """Run (or resume) the agent, streaming its answer, and turn its outcome into storage updates and messages.

        ``decided_calls``: the calls people decided on (a resume), shown by their approval, not as tool steps.
        ``first_status``: the status line as the run starts (a resume that runs approved calls names them).
        """
        with log_context(run_id=run_id, thread_key=thread.key, surface=thread.platform):
            await self._run_agent(run_id, thread, requester, invoke, message_id, decided_calls, first_status)

    async def _run_agent(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        invoke: Invoke,
        message_id: str | None,
        decided_calls: frozenset[str],
        first_status: str,
    ) -> None:
        surface = self.surfaces.get(thread.platform)
        if surface is None:
            logger.error("no surface registered for platform", extra={"platform": thread.platform})
        self.waiting.forget(thread)
        self.history.open(run_id, thread.key)
        self.ledger.channels[run_id] = channel_of(thread)
        # A run started on a message's arrival read its tools' policies ahead (ReadsAhead); a resume did not.
        ahead = self.history.take_read(run_id, self.ahead.policies(thread))
        policies_read = PoliciesRead(None if ahead is UNREAD else ahead)
        context: dict[str, Any] = {
            **channel_of(thread),
            "thread": thread.key,
            "requester": requester,
            "run_id": run_id,
            POLICIES_READ: policies_read,  # what this step's checks read, for its pause (never a later step)
        }
        live = None
        if surface:
            live = LiveAnswer(
                surface,
                thread,
                requester,
                run_id,
                interval=self.stream_update_seconds,
                message_id=message_id,
                decided_calls=decided_calls,
                stop_check=lambda: self.stops.stop_requested(run_id),
            )
            self.stops.live[run_id] = live
            await live.status(first_status)
        progress = _Progress()
        try:
            await self._attempts(run_id, thread, requester, invoke, context, policies_read, live, progress)
        except FencedOut:
            self.leases.dropped(run_id)
        except Exception as exc:  # e.g. storage failing while recording the outcome: never leave a run "running"
            logger.exception("could not record the outcome of a run", extra={"run_id": run_id})
            await self._write_history(run_id)
            fence = self.leases.fence(run_id)
            try:
                await self.storage.runs.transition(
                    run_id, WORKING_RUN_STATUSES, "failed", fence=fence, error=type(exc).__name__
                )
            except StorageError:
                # Not even the failure can be written: the run stays as its last write left it, for recovery to
                # continue once the database is back (self.stranded), and the thread hears so now, not from the
                # outbox, which is in the same database.
                self.stranded.add(run_id)
                logger.error("a run's step could not be written; it is left for recovery", extra={"run_id": run_id})
                await quietly(self._say_now(thread, STEP_NOT_SAVED, live))
            else:
                await quietly(self._tell(thread, failure_sentence(exc), f"failed:{run_id}", live))
        finally:
            self.ledger.forget(run_id)  # a step with no stop or review check leaves nothing for a later run
            self.history.close(run_id)  # written with the run's last batch, or not at all (taken over)
            if live:
                self.stops.live.pop(run_id, None)
                await quietly(live.close(keep_status=progress.paused))

    async def _attempts(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        invoke: Invoke,
        context: dict[str, Any],
        policies_read: PoliciesRead,
        live: LiveAnswer | None,
        progress: _Progress,
    ) -> None:
        """Await the agent and record how the run ended (``progress`` notes a pause)."""
        work = invoke(context, live.on_chunk if live else None)
        for attempt in range(MAX_STEP_REDECISIONS + 1):
            try:
                result = await self.leases.guarded(run_id, work)
            except LeaseLost:  # another process continues the run: record and say nothing here
                return
            except FencedOut:  # a write found the run taken over: nothing was written, nothing is said
                self.leases.dropped(run_id)
                return
            except HITLBreakpointException as pause:
                progress.paused = True
                if live:
                    await live.end_segment()  # the text before the paused calls stays; the approval follows it
                    await live.status(WAITING_FOR_APPROVAL)
                if not await self.pausing.pause(
                    run_id, thread, requester, pause, policies_read, provenance=run_provenance(context)
                ):
                    return
                # Refused: a policy read ahead changed since the run started. Nothing of the pause was stored;
                # the step is decided again on fresh reads (the model is not asked again).
                progress.paused = False
                policies_read.drop_ahead()
                if attempt == MAX_STEP_REDECISIONS:  # cannot happen with fresh reads; fail closed if it does
                    await self.fail_run(run_id, thread, PolicyKeptChanging(), live)
                    return
                if live:
                    await live.status(THINKING)
                work = self._decide_again(run_id, thread, pause, context, live)
            except Exception as exc:  # the run fails; the thread stays usable
                await self.fail_run(run_id, thread, exc, live)
                return
            else:
                if result.get("exit_reason") == STOPPED_FROM_CHAT:
                    await self._on_stopped(run_id, thread, result, live)
                else:
                    await self.finish_run(run_id, thread, result, live)
                return

    def _decide_again(
        self,
        run_id: str,
        thread: ThreadRef,
        pause: HITLBreakpointException,
        context: dict[str, Any],
        live: LiveAnswer | None,
    ) -> Awaitable[AgentResult]:
        """The agent deciding a paused step's calls again, from the pause's snapshot, without asking the model again.

        The snapshot is turned into one taken before the step's tool invoker (its reply, no decisions yet): every
        call goes through ``before_tool`` again (user hooks run a second time, with the arguments as they left
        them), and the confirmation strategy reads each policy afresh. Usage and counters come with the snapshot.
        """
        snapshot = pause.snapshot
        assert snapshot is not None
        visits = dict(snapshot.component_visits)
        visits[TOOL_INVOKER] = max(0, visits.get(TOOL_INVOKER, 0) - 1)  # the resume counts this visit again
        again = replace(
            snapshot,
            stage=TOOL_INVOKER_STAGE,
            decisions=[],
            component_visits=visits,
            pending_tool_calls=list(snapshot.step_message.tool_calls),
        )
        return self.agent.run_async(
            [],
            snapshot=again,
            chat_message_store_kwargs=self.store_kwargs(run_id, thread),
            confirmation_strategy_context=context,
            streaming_callback=live.on_chunk if live else None,
        )

    # --- how a run ends -----------------------------------------------------------------------------

    async def finish_run(
        self, run_id: str, thread: ThreadRef, result: AgentResult, live: LiveAnswer | None = None
    ) -> None:
        """Owe the answer to the thread and mark the run finished (one write), then post the answer.

        With ``live``, the answer is shown by finishing its stream (else it is posted).
        """
        text = answer_text(result)
        note = memory_note(result, text) if text and self.memory_notes else ""
        text = f"{text}\n{note}" if note else text
        last = result.get("last_message")
        key = f"answer:{run_id}:{last.id if last is not None else ''}"
        fence = self.leases.fence(run_id)
        if not text:

            def finished(batch: Batch) -> None:
                usage = end_usage(result)
                batch.require(
                    stores.runs.transition, run_id, WORKING_RUN_STATUSES, "finished", fence=fence, usage=usage
                )
                self._end_audit(batch, run_id, "finished", result, usage)

            if await self._end(run_id, thread, finished):
                self.observer.run_ended("finished")
            return

        def owed(batch: Batch) -> None:
            # The answer owed, the run finished with its usage (the outbox's add does both), its audit entry: one write.
            usage = end_usage(result)
            self.deliveries.owe_in(batch, thread, text, key, finishes_run=run_id, fence=fence, usage=usage)
            self._end_audit(batch, run_id, "finished", result, usage)

        if await self._end(run_id, thread, owed):
            self.observer.run_ended("finished")
            logger.info("run finished", extra={"steps": result.get("step_count")})
            failpoints.failpoint("before_reply")
            await self.deliveries.post(thread, text, key, via=live.deliver if live else None)

    async def fail_run(
        self, run_id: str, thread: ThreadRef, exc: BaseException, live: LiveAnswer | None = None
    ) -> None:
        """Mark the run failed, close its dangling calls, and tell the thread (ending its stream with the notice)."""
        fence = self.leases.fence(run_id)
        await self._write_history(run_id)  # what the run said and got so far stays in the thread
        if (
            not await self.storage.runs.transition(
                run_id, WORKING_RUN_STATUSES, "failed", fence=fence, error=type(exc).__name__
            )
            and fence is not None
        ):
            self.leases.dropped(run_id)  # taken over: the new owner tells the thread what happened
            return
        self.observer.run_ended("failed")
        if isinstance(exc, ToolsNotConfigured):  # a configuration to fix, said in the thread: no traceback
            logger.warning("run failed: %s", exc, extra={"run_id": run_id, "error_type": type(exc).__name__})
        else:
            logger.error("run failed", extra={"run_id": run_id, "error_type": type(exc).__name__}, exc_info=exc)
        await close_dangling(self.storage, thread.key, "not run: the run failed", lookback=max(50, self.history_last_k))
        await self._tell(thread, failure_sentence(exc), f"failed:{run_id}", live)

    async def _on_stopped(self, run_id: str, thread: ThreadRef, result: AgentResult, live: LiveAnswer | None) -> None:
        """A person stopped the run: record it ``stopped`` with its usage, and say so where it streamed."""
        actor = (live.stop_requested_by if live else None) or "someone"
        fence = self.leases.fence(run_id)

        def stopped(batch: Batch) -> None:
            usage = end_usage(result)
            batch.require(
                stores.runs.transition,
                run_id,
                WORKING_RUN_STATUSES,
                "stopped",
                fence=fence,
                usage=usage,
                error=f"stopped by {actor}",
            )
            self._end_audit(batch, run_id, "stopped", result, usage, actor)

        if not await self._end(run_id, thread, stopped):
            if fence is not None:
                self.leases.dropped(run_id)
            return
        self.observer.run_ended("stopped")
        await self._tell(thread, STOPPED_NOTICE, f"stopped:{run_id}", live)

    async def _tell(self, thread: ThreadRef, sentence: str, key: str, live: LiveAnswer | None) -> None:
        """Say ``sentence`` in the thread: where the run streamed, after its text, by finishing the stream."""
        await self.deliveries.say(
            thread, live.with_streamed(sentence) if live else sentence, key, via=live.deliver if live else None
        )

    async def _say_now(self, thread: ThreadRef, sentence: str, live: LiveAnswer | None) -> None:
        """Say ``sentence`` in the thread without owing it first (the outbox cannot be written): where the run
        streamed, by finishing the stream, else as a reply."""
        if live is not None and await live.deliver(live.with_streamed(sentence)):
            return
        surface = self.surfaces.get(thread.platform)
        if surface is not None:
            await surface.post_reply(thread, sentence)

    async def _end(self, run_id: str, thread: ThreadRef, end: Callable[[Batch], None]) -> bool:
        """Apply a run's end (what ``end`` adds to the batch) with its history still to write and the read of what
        waits for its thread, in one round trip; whether it applied (a ``require``-d write of ``end`` may refuse)."""
        history = self.history.take(run_id)
        batch = Batch()
        waiting = self.waiting.read(batch, thread)
        add_history(batch, history)
        end(batch)
        try:
            outcome = await self.storage.batches.apply(batch)
        except Exception:
            self.history.give_back(run_id, history)
            raise
        if outcome.applied:
            self.waiting.saw(thread, outcome[waiting])
        return outcome.applied

    async def _write_history(self, run_id: str) -> None:
        """Write what waits of the run's history now (a run failing): best effort, the failure is told anyway."""
        waiting = self.history.take(run_id)
        if waiting:
            batch = Batch()
            add_history(batch, waiting)
            await quietly(self.storage.batches.apply(batch))

    def _end_audit(
        self,
        batch: Batch,
        run_id: str,
        status: str,
        result: AgentResult,
        usage: TokenUsage | None,
        actor: str = "countersign",
    ) -> None:
        """Add the audit entry of the run's end to ``batch``, written with the end itself (before anyone is told);
        ``usage`` (:func:`end_usage`) goes with the end's own write of the run. None for a recovery's delivery."""
        if usage is None:
            return
        details = {
            "exit_reason": result.get("exit_reason"),
            "steps": result.get("step_count"),
            "usage": usage.as_dict(),
        }
        batch.write(stores.audit.append, actor, status, run_id, details, now=self.clock())


def end_usage(result: AgentResult) -> TokenUsage | None:
    """The run's token usage to record with its end; ``None`` for a recovery delivering an answer computed
    earlier (nothing new to count)."""
    if "token_usage" not in result:
        return None
    return TokenUsage.of(result.get("token_usage"))
