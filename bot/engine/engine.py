"""The chat-ops engine: chat messages become agent runs, clicks become decisions that resume them.

Everything that must survive a restart is written to storage before anyone is told anything. Every
state change that could race (approval decided, run resumed, tool executed) is a compare-and-set in
storage, so double clicks, concurrent approvers, retries, replicas and restarts change nothing twice.
Owners, leases, the thread inbox, recovery and shutdown live in :mod:`bot.engine.lifecycle`; messages
owed to threads go through :mod:`bot.engine.outbox`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bot import failpoints
from bot.agent import Agent, SnapshotError
from bot.agent.snapshot import REVIEW_STAGE, TOOL_INVOKER_STAGE
from bot.agent.stored_snapshot import (
    HistoryUnavailable,
    history_to_read,
    parse_stored,
    stored_snapshot_data,
    stored_step,
    with_history,
)
from bot.canonical import args_digest
from bot.config import Config
from bot.engine.access import AccessControl
from bot.engine.admin_commands import AdminCommands
from bot.engine.confirmation import (
    NEVER,
    ONCE,
    POLICIES_READ,
    PoliciesRead,
    PolicyConfirmationStrategy,
    channel_scope,
    effective_policy,
    matching_condition,
)
from bot.engine.decisions import (
    STATUS_OF_ACTION,
    approval_call_key,
    authorize_now,
    check_open,
    step_decisions,
)
from bot.engine.errors import (
    AlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    DecidedButUnfinished,
    EngineError,
    InvalidEdit,
    NotAllowedToStop,
    NotAnAdmin,
    NotAnApprover,
    NotShownHere,
    PolicyKeptChanging,
    UnknownAction,
    refused_while_storage_fails,
)
from bot.engine.history import StepHistory
from bot.engine.instrumentation import ObservedChatGenerator
from bot.engine.ledger import StorageExecutionLedger
from bot.engine.lifecycle import LeaseLost, Received, RunLifecycle, user_message
from bot.engine.listening import Listening, pending_note
from bot.engine.memory import (
    MEMORY_SCOPE,
    REMEMBER,
    RememberConfirmation,
    memory_note,
    remember_tool,
    run_memory_kwargs,
    run_memory_scope,
)
from bot.engine.model import (
    ACTIONS,
    CONFIRM,
    MODIFY,
    PENDING,
    UNREAD,
    AdminRequest,
    ApprovalView,
    DecisionRequest,
    DecisionResult,
    Inbound,
    ThreadRef,
)
from bot.engine.notices import ApproverNotices, offered
from bot.engine.outbox import owed_card
from bot.engine.params import merge_edit
from bot.engine.review import REVIEW, PolicyReviewHook, edited_result, held_result, review_from_record
from bot.engine.roles import Roles
from bot.engine.streaming import STOPPED_FROM_CHAT, THINKING, WAITING_FOR_APPROVAL, LiveAnswer, StopFromChat
from bot.engine.surface import Surface
from bot.hitl.apply import closing_results
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hooks.breakpoints import TOOL_INVOKER
from bot.ids import new_approval_id
from bot.llm import LLMError
from bot.logs import log_context
from bot.memory.context import DEFAULT_TOP_K
from bot.messages import ChatMessage
from bot.metrics import Observer, PrometheusObserver
from bot.tools import Tool
from storage import (
    ApprovalStep,
    BatchOutcome,
    ClickedApproval,
    FencedOut,
    NewApproval,
    NotFound,
    PolicyView,
    Read,
    StorageError,
    TokenUsage,
    Write,
    open_async_storage,
)

logger = logging.getLogger(__name__)

SUPERSEDED_RESULT = "superseded by a newer message"
STOPPED_NOTICE = "(Stopped.)"
NOTHING_TO_STOP = "There is nothing to stop: this run is not working right now."
STOPPING = "Stopping after the current step."
MAX_STEP_REDECISIONS = 2
"""How often a run decides a step again after its pause was refused because a policy read ahead had changed (the
second decision reads every policy afresh, so one is all it takes; past this the run fails closed)."""


@dataclass(frozen=True)
class ClaimedStep:
    """What the decision that completed a step read in its own transaction, whose claim started the run.

    The step (its run as claimed, its approvals and its snapshot), the history the snapshot refers to, and the policy
    views of the step's tools (``None``: not read there; the resume reads it). The resume reads none of it again.
    """

    step: ApprovalStep
    history: list[ChatMessage] | None = None
    policies: Mapping[str, PolicyView] | None = None


Invoke = Callable[[dict[str, Any], Any], Any]
"""How a run invokes the agent: ``invoke(confirmation_context, streaming_callback)`` → an awaitable result."""


def utcnow() -> datetime:
    """The current time, timezone-aware."""
    return datetime.now(UTC)


class Engine:
    """The platform-free workflow between adapters, the agent and storage (see DESIGN.md's flow)."""

    def __init__(
        self,
        *,
        config: Config,
        storage: Any,
        generator: Any,
        tools: Sequence[Tool],
        clock: Callable[[], datetime] | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.config = config
        self.storage = storage
        self.clock = clock or utcnow
        # The built-in remember tool, unless the deployment brings its own tool of that name.
        if all(t.name != REMEMBER for t in tools):
            tools = [*tools, remember_tool(storage, self.clock)]
        self.tools = {t.name: t for t in tools}
        policy = PolicyConfirmationStrategy(storage, self.tools, config.default_ttl_seconds)
        self._live: dict[str, LiveAnswer] = {}
        """The live answer of every run this process works on now (streaming, and the Stop control)."""
        # Each engine counts into a registry of its own (served by GET /metrics), never the global one.
        self.observer: Observer = observer if observer is not None else PrometheusObserver()
        if isinstance(generator, ObservedChatGenerator):  # a generator taken from another engine
            generator = generator.inner
        self.history = StepHistory(storage)
        """The agent's chat store: a run's history writes join its step's next batch (:mod:`bot.engine.history`)."""
        self.ledger = StorageExecutionLedger(
            storage, lambda run: self.lifecycle.fence(run), observer=self.observer, history=self.history
        )
        """The tool-execution ledger of the agent's runs (it also notes stop requests read with each outcome)."""
        self.agent = Agent(
            ObservedChatGenerator(generator, self.observer),
            tools=list(tools),
            system_prompt=config.system_prompt,
            max_agent_steps=config.max_agent_steps,
            confirmation_strategies={"*": policy, REMEMBER: RememberConfirmation(policy)},
            tool_invoker_kwargs={"ledger": self.ledger},
            chat_message_store=self.history,
            memory_store=self.history.memories,
            state_schema={MEMORY_SCOPE: {"type": dict}},
            # Review after acting is the after_tool half of the same per-channel policy.
            hooks={
                "after_tool": [
                    PolicyReviewHook(storage, self.tools, config.default_ttl_seconds, self.ledger),
                    StopFromChat(self._live),
                ]
            },
        )
        self.surfaces: dict[str, Surface] = {}
        self.roles = Roles(storage, config.admins, self.surfaces)
        self.admin_commands = AdminCommands(
            storage, self.tools, self.roles, self.clock, default_ttl=config.default_ttl_seconds
        )
        self.listening = Listening(storage, config.reply_mode, self.roles)
        self.access = AccessControl(storage, self.roles)
        self.notices = ApproverNotices(self)
        # Weak: a thread's lock lives only while someone holds or awaits it, so idle threads cost nothing.
        self._thread_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.lifecycle = RunLifecycle(self)
        self.lifecycle.deliveries.show_card = self._show_owed_card
        self._started = False
        self._stopped = False

    @classmethod
    async def create(
        cls,
        config: Config,
        *,
        generator: Any = None,
        tools: Sequence[Tool] | None = None,
        clock: Callable[[], datetime] | None = None,
        observer: Observer | None = None,
    ) -> Engine:
        """Open storage (PostgreSQL at ``config.database_url``, else SQLite at ``config.db_path``), build the engine.

        >>> engine = await Engine.create(Config.from_env())
        """
        chosen_tools = list(tools) if tools is not None else config.load_tools()
        chosen_generator = generator if generator is not None else config.build_generator()
        storage = await open_async_storage(
            config.db_path,
            database_url=config.database_url,
            last_k=config.history_last_k,
            pool_size=config.db_pool_size,
        )
        return cls(
            config=config,
            storage=storage,
            generator=chosen_generator,
            tools=chosen_tools,
            clock=clock,
            observer=observer,
        )

    # --- lifecycle ---------------------------------------------------------------------------------

    def register_surface(self, platform: str, surface: Surface) -> None:
        """Route output for ``platform`` through ``surface``."""
        self.surfaces[platform] = surface

    async def start(self, *, sweep: bool = True) -> None:
        """Start the heartbeat and (if ``sweep``) the periodic sweep, after recovering what is due now.

        Call it after registering the surfaces: recovery posts notices through them.
        """
        if self._started:
            return
        self._started = True
        # A model client loads lazily; loaded now, the first run does not stall this process's heartbeat.
        warm_up = getattr(self.agent.chat_generator, "warm_up", None)
        if warm_up is not None:
            await warm_up()
        # Crash tests start processes ahead and park them here: nothing below has acted on any run yet.
        failpoints.failpoint("before_start")
        await self.lifecycle.listen()
        await self.recover()
        self.lifecycle.start(sweep=sweep)

    async def stop_taking_work(self, grace: float) -> None:
        """Graceful shutdown's first half: no new work, in-flight work finishes (``grace`` s), leases released."""
        await self.lifecycle.shutdown(grace)

    async def stop(self, grace: float | None = None) -> None:
        """Shut down gracefully (see :meth:`RunLifecycle.shutdown`), then close storage."""
        if self._stopped:
            return
        self._stopped = True
        await self.lifecycle.shutdown(self.config.shutdown_grace_seconds if grace is None else grace)
        await self.storage.aclose()

    async def wait_idle(self) -> None:
        """Wait until every background resume has finished (tasks may start further tasks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        """Background work in flight (resumes, recoveries, inbox drains)."""
        return self._tasks

    def spawn(self, coro: Any, name: str) -> None:
        """Run ``coro`` in the background; :meth:`wait_idle` and shutdown wait for it."""
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def thread_lock(self, thread_key: str) -> asyncio.Lock:
        """This process's lock of a thread: spares a storage round trip when it already works on the thread.

        Only an optimisation: the database enforces one active run per thread across processes.
        """
        lock = self._thread_locks.get(thread_key)
        if lock is None:
            lock = asyncio.Lock()
            self._thread_locks[thread_key] = lock
        return lock

    def _surface(self, platform: str) -> Surface | None:
        surface = self.surfaces.get(platform)
        if surface is None:
            logger.error("no surface registered for platform", extra={"platform": platform})
        return surface

    # --- messages -----------------------------------------------------------------------------------

    async def handle_message(self, inbound: Inbound) -> None:
        """Queue a person's message in its thread's inbox (once per platform event) and process the thread.

        Returns when the message's run has finished or paused, or at once when it waits behind the
        thread's active run (in this or another process), which processes it as soon as it ends or pauses.
        """
        received = await self.receive(inbound)
        if received is not None:
            await self.process(received)

    async def receive(self, inbound: Inbound) -> Received | None:
        """Store a person's message durably (once per platform event); ``None`` for a redelivery.

        Adapters await this before acknowledging the platform's event, then :meth:`process` it after.
        A message the bot does not act on (:mod:`bot.engine.listening`) is not stored (``None``); its
        author may get a private note about an approval waiting in the thread.
        """
        listening = self.listening.read(inbound)
        if listening is None:
            hearing = await self.listening.hear(inbound)
            rules: Any = UNREAD
        else:  # the thread's latest run and the access rules: one round trip
            latest, rules = await self.storage.batches.read([listening, self.access.read(inbound)])
            hearing = await self.listening.hear(inbound, latest)
        if hearing.waiting is not None:
            self.spawn(self._note_pending(inbound, hearing.waiting), name=f"note-{inbound.event_id}")
        if not hearing.act:
            return None
        refusal = await self.access.refusal(inbound, rules)
        if refusal is not None:
            await self.storage.audit.append(
                inbound.user, "ask refused", inbound.thread_ref.key, {"direct": inbound.is_direct}, now=self.clock()
            )
            surface = self._surface(inbound.platform)
            if surface is not None:
                self.spawn(
                    _quietly(surface.tell_user(inbound.thread_ref, inbound.user, refusal)),
                    name=f"refuse-{inbound.event_id}",
                )
            return None
        return await self.lifecycle.receive(inbound)

    def reads_ahead(self, inbound: Inbound, message: ChatMessage | None = None) -> list[Read]:
        """What a run started for ``inbound`` (``message``: as stored) reads first (its history, then its memories),
        exactly as the agent will ask: read in the write that starts the run, handed to it (StepHistory.prefetched)."""
        thread = inbound.thread_ref
        reads = [
            Read("messages", "retrieve_messages", (thread.key,), {"last_k": self.config.history_last_k}),
            self._policies_ahead(thread),
        ]
        query = (message or user_message(inbound)).text
        if query:
            context = {
                "platform": thread.platform,
                "workspace": thread.workspace,
                "channel": thread.channel,
                "requester": inbound.user,
            }
            criteria = run_memory_kwargs(context)["search_criteria"]
            reads.append(
                Read(
                    "memories",
                    "search_memories",
                    (query,),
                    {
                        "filters": criteria.get("filters"),
                        "top_k": criteria.get("top_k", DEFAULT_TOP_K),
                        "user_id": None,
                        "run_id": None,
                        "agent_id": None,
                    },
                )
            )
        return reads

    def _policies_ahead(self, thread: ThreadRef) -> Read:
        """The policy views of the agent's tools in the thread's channel, read ahead with the write that starts a run:
        a call they say to ask about pauses without a read of its own, checked by its pause (:class:`PoliciesRead`)."""
        return Read(
            "policies",
            "views",
            (tuple(self.tools),),
            {"platform": thread.platform, "workspace": thread.workspace, "channel": thread.channel},
        )

    async def _note_pending(self, inbound: Inbound, record: Any) -> None:
        """Tell someone privately, once per approval, that it waits and who can decide it."""
        if not await self.storage.events.first_time(f"pending-note:{record.approval_id}:{inbound.user}"):
            return
        surface = self._surface(inbound.platform)
        if surface is not None:
            await _quietly(surface.tell_user(inbound.thread_ref, inbound.user, pending_note(record)))

    async def process(self, received: Received) -> None:
        """Process a received message's thread; returns when its run has finished or paused, or it waits."""
        await self.lifecycle.process(received)

    def from_history(self, run_id: str, thread: ThreadRef) -> Invoke:
        """How a run continues from the thread's stored history (its newest message is already there)."""
        return lambda ctx, streaming_callback: self.agent.run_async(
            [],
            run_id=run_id,
            chat_message_store_kwargs=self._store_kwargs(run_id, thread),
            confirmation_strategy_context=ctx,
            # The requester's memories and the channel's shared ones; remember saves for the requester.
            memory_store_kwargs=run_memory_kwargs(ctx),
            **{MEMORY_SCOPE: run_memory_scope(ctx)},
            streaming_callback=streaming_callback,
        )

    def _store_kwargs(self, run_id: str, thread: ThreadRef) -> dict[str, Any]:
        """Where the agent keeps the run's history, and the fence every write of it is made under."""
        return {
            "chat_history_id": thread.key,
            "last_k": self.config.history_last_k,
            "fence": self.lifecycle.fence(run_id),
        }

    async def run_agent(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        invoke: Invoke,
        message_id: str | None = None,
        *,
        decided_calls: frozenset[str] = frozenset(),
    ) -> None:
        """Run (or resume) the agent, streaming its answer, and turn its outcome into storage updates and messages.

        ``decided_calls``: the calls people decided on (a resume), shown by their approval, not as tool steps.
        """
        with log_context(run_id=run_id, thread_key=thread.key, surface=thread.platform):
            await self._run_agent(run_id, thread, requester, invoke, message_id, decided_calls)

    async def _run_agent(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        invoke: Invoke,
        message_id: str | None,
        decided_calls: frozenset[str],
    ) -> None:
        surface = self._surface(thread.platform)
        self.lifecycle.forget_waiting(thread)
        self.history.open(run_id, thread.key)
        self.ledger.channels[run_id] = {
            "platform": thread.platform,
            "workspace": thread.workspace,
            "channel": thread.channel,
        }
        # A run started on a message's arrival read its tools' policies ahead (reads_ahead); a resume did not.
        ahead = self.history.take_read(run_id, self._policies_ahead(thread))
        policies_read = PoliciesRead(None if ahead is UNREAD else ahead)
        context = {
            "platform": thread.platform,
            "workspace": thread.workspace,
            "channel": thread.channel,
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
                interval=self.config.stream_update_seconds,
                message_id=message_id,
                decided_calls=decided_calls,
                stop_check=lambda: self._stop_requested(run_id),
            )
            self._live[run_id] = live
            await live.status(THINKING)
        paused = False
        work = invoke(context, live.on_chunk if live else None)
        try:
            for attempt in range(MAX_STEP_REDECISIONS + 1):
                try:
                    result = await self.lifecycle.guarded(run_id, work)
                except LeaseLost:  # another process continues the run: record and say nothing here
                    return
                except FencedOut:  # a write found the run taken over: nothing was written, nothing is said
                    self.lifecycle.dropped(run_id)
                    return
                except HITLBreakpointException as pause:
                    paused = True
                    if live:
                        await live.end_segment()  # the text before the paused calls stays; the approval follows it
                        await live.status(WAITING_FOR_APPROVAL)
                    if not await self._on_pause(run_id, thread, requester, pause, policies_read):
                        return
                    # Refused: a policy read ahead changed since the run started. Nothing of the pause was stored;
                    # the step is decided again on fresh reads (the model is not asked again).
                    paused = False
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
        except FencedOut:
            self.lifecycle.dropped(run_id)
        except Exception as exc:  # e.g. storage failing while recording the outcome: never leave a run "running"
            logger.exception("could not record the outcome of a run", extra={"run_id": run_id})
            await self._write_history(run_id)
            fence = self.lifecycle.fence(run_id)
            await _quietly(
                self.storage.runs.transition(
                    run_id, ("running", "resuming"), "failed", fence=fence, error=type(exc).__name__
                )
            )
            sentence = _failure_sentence(exc)
            await _quietly(
                self.lifecycle.deliveries.say(
                    thread,
                    live.with_streamed(sentence) if live else sentence,
                    f"failed:{run_id}",
                    via=live.deliver if live else None,
                )
            )
        finally:
            self.ledger.forget(run_id)  # a step with no stop or review check leaves nothing for a later run
            self.history.close(run_id)  # written with the run's last batch, or not at all (taken over)
            if live:
                self._live.pop(run_id, None)
                await _quietly(live.close(keep_status=paused))

    def _decide_again(
        self,
        run_id: str,
        thread: ThreadRef,
        pause: HITLBreakpointException,
        context: dict[str, Any],
        live: LiveAnswer | None,
    ) -> Any:
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
            chat_message_store_kwargs=self._store_kwargs(run_id, thread),
            confirmation_strategy_context=context,
            streaming_callback=live.on_chunk if live else None,
        )

    async def finish_run(
        self, run_id: str, thread: ThreadRef, result: dict[str, Any], live: LiveAnswer | None = None
    ) -> None:
        """Owe the answer to the thread and mark the run finished (one write), then post the answer.

        With ``live``, the answer is shown by finishing its stream (else it is posted).
        """
        text = _answer_text(result)
        note = memory_note(result, text) if text and self.config.memory_notes else ""
        text = f"{text}\n{note}" if note else text
        last = result.get("last_message")
        key = f"answer:{run_id}:{last.id if last is not None else ''}"
        fence = self.lifecycle.fence(run_id)
        if not text:
            finished = Write(
                "runs", "transition", (run_id, ("running", "resuming"), "finished"), {"fence": fence}, required=True
            )
            if (await self._end(run_id, thread, [finished, *self._end_writes(run_id, "finished", result)])).applied:
                self.observer.run_ended("finished")
            return
        # The answer owed, the run finished (the outbox's add does both), its usage and audit entry: one write.
        owed = self.lifecycle.deliveries.owing(thread, text, key, finishes_run=run_id, fence=fence)
        if (await self._end(run_id, thread, [owed, *self._end_writes(run_id, "finished", result)])).applied:
            self.observer.run_ended("finished")
            logger.info("run finished", extra={"steps": result.get("step_count")})
            failpoints.failpoint("before_reply")
            await self.lifecycle.deliveries.post(thread, text, key, via=live.deliver if live else None)

    async def _end(self, run_id: str, thread: ThreadRef, writes: list[Write]) -> BatchOutcome:
        """Apply a run's end (``writes``) with its history still to write and the read of what waits for its
        thread, in one round trip (the results are those of ``writes``)."""
        history = self.history.take(run_id)
        try:
            outcome = await self.storage.batches.apply([self.lifecycle.waiting_read(thread), *history, *writes])
        except Exception:
            self.history.give_back(run_id, history)
            raise
        if not outcome.applied:
            return outcome
        self.lifecycle.saw_waiting(thread, outcome.results[0])
        return BatchOutcome(applied=True, results=outcome.results[1 + len(history) :])

    async def _write_history(self, run_id: str) -> None:
        """Write what waits of the run's history now (a run failing): best effort, the failure is told anyway."""
        waiting = self.history.take(run_id)
        if waiting:
            await _quietly(self.storage.batches.apply(waiting))

    def _end_writes(self, run_id: str, status: str, result: dict[str, Any], actor: str = "countersign") -> list[Write]:
        """The run's token usage and the audit entry of its end, written with the end itself (before anyone is told)."""
        if "token_usage" not in result:  # a recovery delivering an answer computed earlier: nothing new to count
            return []
        usage = TokenUsage.of(result.get("token_usage"))
        details = {
            "exit_reason": result.get("exit_reason"),
            "steps": result.get("step_count"),
            "usage": usage.as_dict(),
        }
        return [
            Write("runs", "record_usage", (run_id, usage)),
            Write("audit", "append", (actor, status, run_id, details), {"now": self.clock()}),
        ]

    async def fail_run(self, run_id: str, thread: ThreadRef, exc: Exception, live: LiveAnswer | None = None) -> None:
        """Mark the run failed, close its dangling calls, and tell the thread (ending its stream with the notice)."""
        fence = self.lifecycle.fence(run_id)
        await self._write_history(run_id)  # what the run said and got so far stays in the thread
        if (
            not await self.storage.runs.transition(
                run_id, ("running", "resuming"), "failed", fence=fence, error=type(exc).__name__
            )
            and fence is not None
        ):
            self.lifecycle.dropped(run_id)  # taken over: the new owner tells the thread what happened
            return
        self.observer.run_ended("failed")
        logger.error("run failed", extra={"run_id": run_id, "error_type": type(exc).__name__}, exc_info=exc)
        await self._close_dangling(thread, "not run: the run failed")
        sentence = _failure_sentence(exc)
        await self.lifecycle.deliveries.say(
            thread,
            live.with_streamed(sentence) if live else sentence,
            f"failed:{run_id}",
            via=live.deliver if live else None,
        )

    async def _on_stopped(
        self, run_id: str, thread: ThreadRef, result: dict[str, Any], live: LiveAnswer | None
    ) -> None:
        """A person stopped the run: record it ``stopped`` with its usage, and say so where it streamed."""
        actor = (live.stop_requested_by if live else None) or "someone"
        fence = self.lifecycle.fence(run_id)
        stopped = Write(
            "runs",
            "transition",
            (run_id, ("running", "resuming"), "stopped"),
            {"fence": fence, "error": f"stopped by {actor}"},
            required=True,
        )
        outcome = await self._end(run_id, thread, [stopped, *self._end_writes(run_id, "stopped", result, actor)])
        if not outcome.applied:
            if fence is not None:
                self.lifecycle.dropped(run_id)
            return
        self.observer.run_ended("stopped")
        await self.lifecycle.deliveries.say(
            thread,
            live.with_streamed(STOPPED_NOTICE) if live else STOPPED_NOTICE,
            f"stopped:{run_id}",
            via=live.deliver if live else None,
        )

    def request_stop(self, thread: ThreadRef, actor: str) -> str:
        """Stop the run this process works on in ``thread`` after its current step (the console's Ctrl-C).

        Synchronous, so that a signal handler can call it. :class:`NotAllowedToStop` for anyone but the
        run's requester or an admin.
        """
        for live in list(self._live.values()):
            if live.thread == thread:
                if actor != live.requester and not self.is_admin(actor):
                    raise NotAllowedToStop()
                live.stop(actor)
                return STOPPING
        return NOTHING_TO_STOP

    async def stop_run(self, run_id: str, actor: str) -> str:
        """Stop a run after its current step (a tool that runs is never interrupted), in whichever process runs it.

        Only the run's requester or an admin may stop it (:class:`NotAllowedToStop`). Returns the sentence
        for the person who asked.
        """
        try:
            run = await self.storage.runs.get(run_id) if isinstance(run_id, str) and len(run_id) <= 200 else None
        except NotFound:
            run = None
        if run is None:
            return NOTHING_TO_STOP
        if actor != run.requester and not self.is_admin(actor):
            await self.storage.audit.append(actor, "stop refused", run_id, {}, now=self.clock())
            raise NotAllowedToStop()
        if run.status not in ("running", "resuming"):
            return NOTHING_TO_STOP
        # Stored (with its audit entry, in one write), so the process that runs it (this one or another) stops it at
        # its next step boundary.
        stopping = await self.storage.batches.apply(
            [
                Write("runs", "request_stop", (run_id, actor), required=True),
                Write("audit", "append", (actor, "stop requested", run_id, {}), {"now": self.clock()}),
            ]
        )
        if not stopping.applied:
            return NOTHING_TO_STOP
        live = self._live.get(run_id)
        if live is not None:
            live.stop(actor)
        return STOPPING

    async def _stop_requested(self, run_id: str) -> str | None:
        """Who asked (in any process) that the run stop, or ``None``; a storage hiccup is not a stop."""
        seen, asked_by = self.ledger.stop_seen(run_id)
        if seen:  # read with the step's last tool outcome, in its transaction: no read of its own
            return asked_by
        try:
            return (await self.storage.runs.get(run_id)).stop_requested_by
        except StorageError:
            return None

    async def _close_dangling(self, thread: ThreadRef, reason: str) -> None:
        history = await self.storage.messages.retrieve_messages(thread.key, last_k=max(50, self.config.history_last_k))
        closing = closing_results(history, reason)
        if closing:
            await self.storage.messages.write_messages(thread.key, closing)

    # --- pausing ------------------------------------------------------------------------------------

    async def _on_pause(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        pause: HITLBreakpointException,
        policies_read: PoliciesRead | None = None,
    ) -> bool:
        """Store the snapshot and one approval per pending call, then render them.

        ``policies_read``: the policies this step's checks read moments ago; a pending call's approval is
        stored with the policy that paused it, and only a call no check noted reads storage again. A policy that
        came from the views read ahead at the run's start is checked in the pause's own transaction
        (``policies.unchanged``): if it changed since, nothing of the pause is stored, the run's waiting history
        writes wait again, and this returns ``True``: the caller decides the step again on fresh reads.
        """
        snapshot = pause.snapshot
        assert snapshot is not None
        fence = self.lifecycle.fence(run_id)
        # The run as this process claimed it: its step is still the run's (only this pause moves it). A run taken
        # over while the model answered is refused by the pause's one write below (its fenced transition is
        # required: nothing of the pause is stored), so no read is needed to check the fence first.
        run = self.lifecycle.held(run_id)
        if run is None:  # not worked on under a fence (no claim to go by): read it
            run = await self.storage.runs.get(run_id)
        step = run.step + 1
        if run.recoveries:  # a pause that died half-way left (cancelled) approvals under the next step number
            step = max([step, *(a.step + 1 for a in await self.storage.approvals.for_run(run_id))])
        now = self.clock()
        context = {"platform": thread.platform, "workspace": thread.workspace, "channel": thread.channel}
        new_approvals = []
        checks: dict[str, Write] = {}  # per tool: the view read ahead that its calls were asked about with
        review = snapshot.stage == REVIEW_STAGE
        for position, call in enumerate(snapshot.step_message.tool_calls):
            if not any(call is p for p in pause.pending_tool_calls):
                continue
            noted = policies_read.take_checked(call.tool_name, call.id, call.arguments) if policies_read else None
            if noted is not None:
                policy, seen = noted
                if seen is not None:
                    checks[call.tool_name] = Write(
                        "policies", "unchanged", (call.tool_name, seen), context, required=True
                    )
            else:
                policy = await effective_policy(
                    self.storage,
                    self.tools.get(call.tool_name),
                    context,
                    self.config.default_ttl_seconds,
                    arguments=call.arguments,
                )
            new_approvals.append(
                NewApproval(
                    run_id=run_id,
                    step=step,
                    tool_call_id=approval_call_key(call.id, snapshot.step_message.id, position),
                    tool_name=call.tool_name,
                    arguments=call.arguments,
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
                )
            )
        if policies_read is not None:
            policies_read.clear()  # the step ends here: nothing read for it is used again
        surface = self._surface(thread.platform)
        approval_ids = [a.approval_id for a in new_approvals]
        # One write, all or nothing: a pause that loses its compare-and-set (or its fence) stores no approval.
        history = self.history.take(run_id)
        writes: list[Write | Read] = [
            # Whether messages wait for the thread, as of this pause (read first: see RunLifecycle.waiting_read).
            self.lifecycle.waiting_read(thread),
            # The policies asked with as read ahead at the run's start: still what is stored, or nothing is written.
            *checks.values(),
            # The run's history not yet written (an earlier step's results): before the snapshot referring to it.
            *history,
            # The usage so far: a run that pauses and is never resumed (superseded, expired) still counts.
            Write("runs", "record_usage", (run_id, TokenUsage.of(snapshot.token_usage))),
            Write("approvals", "create_many", (new_approvals,)),
            Write(
                "runs",
                "transition",
                (run_id, "running", "paused"),
                {"fence": fence, "snapshot_json": stored_snapshot_data(snapshot), "step": step},
                required=True,
            ),
        ]
        card_key = None
        if surface is not None and approval_ids:
            # Recorded before the message exists: a click can land while it is being posted.
            writes.append(Write("places", "record", (approval_ids, thread.place), {"now": now}))
            # The card is owed with the pause (claimed by this process): if it dies before showing it, the sweep does.
            card_key, card = owed_card(run_id, step)
            writes.append(self.lifecycle.deliveries.owing(thread, card, card_key, required=False))
        writes.append(
            Write(
                "audit",
                "append",
                (requester, "paused", run_id, {"approvals": approval_ids, "step": step}),
                {"now": now},
            )
        )
        failpoints.failpoint("while_pausing")
        try:
            outcome = await self.storage.batches.apply(writes)
        except Exception:
            self.history.give_back(run_id, history)
            raise
        if not outcome.applied and outcome.refused is not None and 1 <= outcome.refused <= len(checks):
            self.history.give_back(run_id, history)  # the run is still ours: they go with its next batch
            logger.info(
                "policy changed since the run started; deciding the step again",
                extra={"step": step, "tools": ",".join(sorted(checks))},
            )
            return True
        if not outcome.applied and fence is not None and not fence.holds_for(await self.storage.runs.get(run_id)):
            # Taken over in the moment since the check above: closing the run's pending approvals could close
            # the new owner's, so nothing more is written here.
            self.lifecycle.dropped(run_id)
            return False
        if not outcome.applied:
            # Closed meanwhile (stopped, failed): nothing of this pause was stored; approvals an older, half-done
            # pause may have left are closed as before.
            await self.storage.approvals.close_pending_for_run(run_id, "cancelled", "the run was closed")
            return False
        self.lifecycle.saw_waiting(thread, outcome.results[0])
        records = outcome.results[2 + len(checks) + len(history)]
        logger.info(
            "run paused for approval",
            extra={"step": step, "approvals": len(records), "tools": ",".join(sorted({r.tool_name for r in records}))},
        )
        failpoints.failpoint("after_pause")
        if surface is None or card_key is None:
            return False
        try:
            await self._show_step(thread, records, card_key)
        except Exception:  # the approvals are stored: they stay decidable through `pending` and App Home
            logger.exception("could not render approvals", extra={"run_id": run_id})
            await _quietly(self.lifecycle.deliveries.retry_later(card_key))  # the sweep tries again later
            names = ", ".join(r.tool_name for r in records)
            await _quietly(
                self.lifecycle.deliveries.say(
                    thread,
                    f"I need approval to run {names}, but could not show the buttons yet. I will try again; "
                    "meanwhile, try `pending`.",
                    f"render-failed:{run_id}:{step}",
                )
            )
        return False

    async def _show_step(self, thread: ThreadRef, records: list[Any], card_key: str, *, rendered: bool = False) -> None:
        """Render a paused step's approvals in its thread, store where, and settle its owed card (``card_key``).

        ``rendered``: the caller settles the owed card itself (the outbox sweep marks it delivered).
        """
        surface = self.surfaces[thread.platform]
        views = await self._views(records, thread)  # the run's thread is known: no read of the run again
        message_ref = await surface.render_approvals(thread, views)
        # The step's statuses once the reference is stored (the same statement, no read after), and the card no
        # longer owed: one write.
        writes = [Write("approvals", "mark_rendered", ([r.approval_id for r in records], message_ref))]
        if not rendered:
            writes.append(Write("outbox", "delivered", (card_key,), {"now": self.clock()}))
        statuses = (await self.storage.batches.apply(writes)).results[0]
        await _quietly(self.notices.send_direct(thread, records))
        if any(r.approvers for r in records):  # copies went to named approvers: a click meanwhile missed them
            statuses = {
                r.approval_id: r.status
                for r in await self.storage.approvals.for_run(records[0].run_id, step=records[0].step)
            }
        # A click that landed while the message was being posted found no reference to update: catch up.
        if any(status != PENDING for status in statuses.values()):
            await self._update_rendering(records[0])

    async def _show_owed_card(self, thread: ThreadRef, run_id: str, step: int) -> None:
        """Show an approval card owed in the outbox (its process died, or the platform failed, before showing it).

        Nothing is shown when nothing of the step waits any more (decided, expired, superseded) or when it is
        shown already; the outbox sweep marks the card delivered after this returns.
        """
        try:
            paused = await self.storage.approvals.step(run_id, step)
        except NotFound:
            return
        pending = [a for a in paused.approvals if a.status == PENDING]
        if not pending or all(a.message_ref for a in pending):
            return
        logger.info("showing an owed approval card", extra={"run_id": run_id, "step": step})
        await self._show_step(thread, paused.approvals, owed_card(run_id, step)[0], rendered=True)

    # --- decisions ----------------------------------------------------------------------------------

    async def get_approval(self, approval_id: str) -> ApprovalView:
        """The approval as adapters render it; :class:`ApprovalNotFound` for an unknown id."""
        return await self._view(await self._record(approval_id))

    async def step_approvals(self, approval_id: str) -> list[ApprovalView]:
        """Every approval of the paused step that ``approval_id`` belongs to."""
        return (await self._step_views(await self._record(approval_id)))[1]

    async def _step_views(self, record: Any) -> tuple[list[Any], list[ApprovalView]]:
        """The step of ``record``: its approvals and their views (the run's thread comes in the same read)."""
        try:
            paused = await self.storage.approvals.step(record.run_id, record.step)
        except NotFound:  # the run is gone (pruned): nothing of its step to show
            return [], []
        return paused.approvals, await self._views(paused.approvals, _thread_of_run(paused.run))

    async def note_shown(self, place: str, approval_ids: Sequence[str]) -> None:
        """Record that these approvals are shown in ``place``, so clicks from there may decide them."""
        if approval_ids:
            await self.storage.places.record(list(approval_ids), place, now=self.clock())

    @refused_while_storage_fails
    async def check_can_decide(self, approval_id: str, actor: str, place: str | None = None) -> ApprovalView:
        """Raise what :meth:`decide` would raise for this actor, clicking in ``place``, now (before opening a form)."""
        clicked = await self._clicked(approval_id, place)
        record = clicked.record
        try:
            self._check_place(clicked, place)
        except NotShownHere as refusal:
            await self._audit_refusal(actor, record, "open form", refusal, place)
            raise
        await authorize_now(self.roles, record, actor)
        check_open(self.clock(), record)
        return await self._view(record)

    @staticmethod
    def _check_place(clicked: ClickedApproval, place: str | None) -> None:
        """Refuse a click from a place this approval was never shown in; no place at all is refused too."""
        if not place or not clicked.shown_here:
            raise NotShownHere(place)

    async def _audit_refusal(
        self, actor: str, record: Any, action: str, refusal: EngineError, place: str | None
    ) -> None:
        await self.storage.audit.append(
            actor,
            "decision refused",
            record.approval_id,
            {"action": action, "reason": type(refusal).__name__, "tool": record.tool_name, "place": place},
            now=self.clock(),
        )

    @refused_while_storage_fails
    async def decide(self, request: DecisionRequest, *, render_later: bool = False) -> DecisionResult:
        """Record one decision (exactly one wins), update the rendering, and resume when the step is decided.

        Checked in this order: the place of the click, who may decide, then whether the approval is still
        open, so someone who may not decide learns neither the outcome nor who decided.

        With ``render_later`` it returns once the decision and its audit entry are stored: re-rendering
        (a slow chat API) and the resume run as a tracked background task (:meth:`wait_idle` waits for it).
        Adapters that must answer within a deadline use it, e.g. a Slack modal decided before its ack.
        """
        clicked = await self._clicked(request.approval_id, request.place)  # the approval and its places: one read
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
            self._check_place(clicked, request.place)
            await authorize_now(self.roles, record, request.actor)
            check_open(self.clock(), record)
            action, final_arguments, final_result = request.action, None, None
            if action == MODIFY and record.kind == REVIEW:
                final_result = edited_result(request.edited_result)
                if final_result == record.result:
                    action, final_result = CONFIRM, None
            elif action == MODIFY:
                final_arguments = self._merged_edit(record, request.edited_params or {})
                if final_arguments == record.arguments:
                    action, final_arguments = CONFIRM, None
            if action in (CONFIRM, MODIFY) and record.quorum > 1:
                if action == MODIFY:
                    raise InvalidEdit(
                        {
                            "_": "this call needs several approvals, so it cannot be edited; reject it "
                            "with feedback instead"
                        }
                    )
                counted = await self._vote(record, request)
                if counted is not None:
                    return counted
            # The decision (exactly one wins) and its audit entry: one write, durable before anyone is told.
            decision = Write(
                "approvals",
                "decide",
                (record.approval_id,),
                {
                    "status": STATUS_OF_ACTION[action],
                    "decided_by": request.actor,
                    "feedback": request.feedback,
                    "final_arguments": final_arguments,
                    "now": self.clock(),
                    "final_result": final_result,
                },
                required=True,
            )
            writes: list[Write | Read] = [decision]
            claiming = not self.lifecycle.stopping  # when stopping, another process's sweep resumes the run
            if claiming:
                # If this decision completes the step, the run is claimed for its resume and started (paused ->
                # running, owned and leased) in the same write: the resume has no start of its own to make.
                # Pinned to this decision's step: a run paused again since is never resumed with it.
                writes.append(
                    Write(
                        "leases",
                        "claim_paused",
                        (record.run_id, self.lifecycle.owner, self.lifecycle.lease_until()),
                        {"decided": True, "step": record.step, "start": True},
                    )
                )
            # The step as of this decision (and its claim), read in the same transaction: the re-render and the
            # resume use it, with no read of their own.
            writes.append(Read("approvals", "step", (record.run_id, record.step)))
            if claiming:
                # The history the step's snapshot refers to, and the policies of the calls it is to run (a deny set
                # since stops an approved call: step_decisions), read only if the claim won (else nothing is read).
                writes.append(Read("messages", "retrieve_messages", args_from=_claimed_history))
                writes.append(Read("policies", "views", args_from=_claimed_policies))
            writes.append(self._decision_audit(record, request, action, final_arguments))
            won = await self.storage.batches.apply(writes)
            if not won.applied:
                check_open(self.clock(), await self._record(record.approval_id))
                raise AlreadyDecided("decided", None, None)
            # Only a claimed step is taken as read in the transaction: without the claim, a concurrent decision
            # of the same step (PostgreSQL) may commit after this read, and a read after the commit sees it.
            if claiming and won.results[1]:
                claimed = ClaimedStep(won.results[2], won.results[3], won.results[4])
            failpoints.failpoint("after_decide")
            if claimed is not None:
                failpoints.failpoint("after_claim")  # claimed and started: the run is running, owned by us
        except EngineError as refused:
            refusal = await self.lifecycle.explain_refusal(record, refused)
            self.observer.decision(_action_label(request.action), type(refusal).__name__)
            await self._audit_refusal(request.actor, record, request.action, refusal, request.place)
            if refusal is refused:
                raise
            raise refusal from refused
        try:
            return await self._after_won_decision(record, request, action, final_arguments, render_later, claimed)
        except StorageError as exc:  # the decision stands: never tell the person that nothing was decided
            logger.warning(
                "decision stored, follow-up failed: storage unavailable (%s)",
                exc,
                extra={"approval_id": record.approval_id},
            )
            raise DecidedButUnfinished() from exc

    async def _after_won_decision(
        self,
        record: Any,
        request: DecisionRequest,
        action: str,
        final_arguments: Any,
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
                thread = await self._thread_of(record)
                scope = channel_scope(
                    {"platform": thread.platform, "workspace": thread.workspace, "channel": thread.channel}
                )
                await self.storage.policies.remember_confirmation(
                    scope, record.tool_name, args_digest(record.arguments), request.actor, now=self.clock()
                )
            message = f"{STATUS_OF_ACTION[action].capitalize()}."
            if not render_later:
                resumes_later = True  # _after_decision starts a claimed run's resume (once), whatever happens in it
                return await self._after_decision(record, message, claimed)
            self.spawn(self._after_decision_logged(record, message, claimed), name=f"decided-{record.approval_id}")
            resumes_later = True
            views = await self.step_approvals(record.approval_id)
            clicked = next(v for v in views if v.approval_id == record.approval_id)
            return DecisionResult(approval=clicked, step=tuple(views), message=message)
        finally:
            if claimed is not None and not resumes_later:
                self._resume_claimed_run(claimed)

    def _decision_audit(self, record: Any, request: DecisionRequest, action: str, final_arguments: Any) -> Write:
        """The audit entry of a decision, written in the same batch as the decision itself."""
        details = {
            "tool": record.tool_name,
            "run_id": record.run_id,
            "kind": record.kind,
            "feedback": request.feedback,
            "changed": sorted(k for k in (final_arguments or {}) if final_arguments[k] != record.arguments.get(k)),
        }
        if record.kind == REVIEW:  # whether the model saw an edited result; the texts stay in the approval row only
            details["edited"] = action == MODIFY
        return Write(
            "audit",
            "append",
            (request.actor, STATUS_OF_ACTION[action], record.approval_id, details),
            {"now": self.clock()},
        )

    @refused_while_storage_fails
    async def approve_all(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve every pending call of the step that ``actor`` may decide; refusals are reported, not raised.

        Someone who may decide none of the step's calls, or clicks from elsewhere, is refused before
        learning whether (and by whom) the step was decided.
        """
        clicked = await self._clicked(approval_id, place)
        record = clicked.record
        step = await self.storage.approvals.for_run(record.run_id, step=record.step)
        try:
            self._check_place(clicked, place)
            await self._authorize_any(step, record, actor)
            if all(other.status != PENDING for other in step):
                check_open(self.clock(), record)
        except EngineError as refusal:
            await self._audit_refusal(actor, record, "approve all", refusal, place)
            raise
        approved, refused = 0, []
        for other in step:
            if other.status != PENDING:
                continue
            try:
                await self.decide(
                    DecisionRequest(other.approval_id, actor, CONFIRM, actor_name=actor_name, place=place)
                )
                approved += 1
            except EngineError as exc:
                refused.append(f"{other.tool_name}: {exc}")
        if approved == 0 and refused:
            raise NotAnApprover("Nothing was approved. " + " ".join(refused))
        views = await self.step_approvals(approval_id)
        clicked = next(v for v in views if v.approval_id == approval_id)
        message = f"Approved {approved} call(s)." + (f" Not approved: {'; '.join(refused)}" if refused else "")
        return DecisionResult(approval=clicked, step=tuple(views), message=message, refused=tuple(refused))

    @refused_while_storage_fails
    async def approve_and_always_allow(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve one call and write a ``never`` rule for its tool in its channel (admins who may decide it).

        The rule carries the condition of the rule that asked, when one did (``when env=prod``), so only such
        calls stop asking there. The decision and the rule change are both audited.
        """
        clicked = await self._clicked(approval_id, place)
        record = clicked.record
        try:
            self._check_place(clicked, place)
            if record.kind == REVIEW:  # a rule about asking before a call: a result under review is not one
                raise UnknownAction("approve and always allow")
            if not await self.roles.is_admin(actor, record.platform):
                raise NotAnAdmin()
        except EngineError as refusal:
            await self._audit_refusal(actor, record, "approve always", refusal, place)
            raise
        result = await self.decide(DecisionRequest(approval_id, actor, CONFIRM, actor_name=actor_name, place=place))
        thread = await self._thread_of(record)
        context = {"platform": thread.platform, "workspace": thread.workspace, "channel": thread.channel}
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

    async def _authorize_any(self, step: Sequence[Any], clicked: Any, actor: str) -> None:
        """Raise the clicked call's :class:`NotAnApprover` unless ``actor`` may decide some call of the step."""
        for other in step:
            try:
                await authorize_now(self.roles, other, actor)
                return
            except NotAnApprover:
                continue
        await authorize_now(self.roles, clicked, actor)

    async def _vote(self, record: Any, request: DecisionRequest) -> DecisionResult | None:
        """Count a confirm vote toward the quorum; ``None`` once the quorum is reached (decide then)."""
        prior = await self.storage.approvals.votes(record.approval_id)
        if any(v.voter == request.actor for v in prior):
            raise AlreadyDecided("approved", f"you (waiting for {record.quorum - len(prior)} more)", None)
        count = await self.storage.approvals.add_vote(record.approval_id, request.actor, CONFIRM, now=self.clock())
        if count is None:
            check_open(self.clock(), await self._record(record.approval_id))
            raise ApprovalExpired()
        if count >= record.quorum:
            return None
        self.observer.decision(CONFIRM, "voted")
        await self.storage.audit.append(
            request.actor,
            "voted",
            record.approval_id,
            {"tool": record.tool_name, "kind": record.kind, "votes": count},
            now=self.clock(),
        )
        views = await self._update_rendering(record)
        clicked = next(v for v in views if v.approval_id == record.approval_id)
        return DecisionResult(
            approval=clicked, step=tuple(views), message=f"Your approval was recorded ({count}/{record.quorum})."
        )

    async def _after_decision(self, record: Any, message: str, claimed: ClaimedStep | None = None) -> DecisionResult:
        """Re-render the step; resume the run when the step is decided (``claimed``: this process claimed the run
        with the decision, so it resumes it whatever the re-render does, from what the decision's transaction read;
        else the step is read here)."""
        paused: ApprovalStep | None = claimed.step if claimed is not None else None
        try:
            paused, views = await self._rerender(record, paused)
        finally:
            if claimed is not None:  # the step as read after the claim: the resume reads none of it again
                self._resume_claimed_run(claimed)
        clicked = next(v for v in views if v.approval_id == record.approval_id)
        complete = claimed is not None or all(not v.is_pending for v in views)
        # Decided but not claimed with the decision (a concurrent decision of the same step committed later):
        # whoever claims it first resumes it. When stopping, another process's sweep resumes it.
        if complete and claimed is None and not self.lifecycle.stopping:
            # The step as just read: every approval in it is decided, and decisions never change again.
            self.spawn(self.resume(record.run_id, paused), name=f"resume-{record.run_id}")
        return DecisionResult(approval=clicked, step=tuple(views), message=message, resumed=complete)

    async def _after_decision_logged(self, record: Any, message: str, claimed: ClaimedStep | None = None) -> None:
        try:
            # A claimed run's resume starts in there, always.
            await self._after_decision(record, message, claimed)
        except Exception:  # the decision is stored; recovery resumes the run if this process cannot
            logger.exception("after a decision: re-render or resume failed", extra={"approval_id": record.approval_id})

    def _resume_claimed_run(self, claimed: ClaimedStep) -> None:
        """Resume a run this process claimed (and started) with a decision (in the background, as every resume)."""
        run_id = claimed.step.run.run_id
        self.spawn(self.resume(run_id, claimed=claimed), name=f"resume-{run_id}")

    async def _update_rendering(self, record: Any) -> list[ApprovalView]:
        return (await self._rerender(record))[1]

    async def _rerender(
        self, record: Any, paused: ApprovalStep | None = None
    ) -> tuple[ApprovalStep | None, list[ApprovalView]]:
        """Re-render the step of ``record`` wherever it is shown; the step as read (``None``: its run is gone).

        ``paused``: the step as the caller just read it after its change (else it is read here).
        """
        if paused is None:
            try:
                paused = await self.storage.approvals.step(record.run_id, record.step)
            except NotFound:
                paused = None
        views = await self._views(paused.approvals, _thread_of_run(paused.run)) if paused is not None else []
        refs = [v.message_ref for v in views if v.message_ref]
        surface = self.surfaces.get(record.platform)
        if surface and refs:
            thread = views[0].thread
            await _quietly(surface.update_approvals(thread, refs[0], views))
        await _quietly(self.notices.update_copies(record, views))
        await self.notices.refresh_homes(record, views, await self._deciders(record))
        return paused, views

    def _merged_edit(self, record: Any, edited: dict[str, Any]) -> dict[str, Any]:
        tool = self.tools.get(record.tool_name)
        if tool is None:
            raise InvalidEdit({"_": f"the tool '{record.tool_name}' is no longer available"})
        return merge_edit(tool, record.arguments, edited)

    def is_admin(self, actor: str) -> bool:
        """Whether ``actor`` is listed by id in ``COUNTERSIGN_ADMINS`` (groups there: ``await roles.is_admin``)."""
        return actor in self.config.admins

    # --- resuming -----------------------------------------------------------------------------------

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
        run = paused.run if paused is not None else await self.storage.runs.get(run_id)
        thread = _thread_of_run(run)
        async with self.thread_lock(thread.key):
            records = (
                paused.approvals if paused is not None else await self.storage.approvals.for_run(run_id, step=run.step)
            )
            if claimed is not None:
                current: Any = run  # read after the claim (by the caller, or just above)
                # The claim started the run, so no start compare-and-set guards it against a second start here.
                # Each claim is handed to exactly one resume (see _after_won_decision); beyond that, a run this
                # process works on is never started again, and work on a thread is one at a time here (the thread
                # lock), so a second start of the same claim could only come after the first one's work ended:
                # the run is no longer running under the claim's fence then, and every durable write of that start
                # (the ledger's begin before any tool, the history, the answer) is refused by the fence.
                if current.status != "running" or self.lifecycle.fence(run_id) is not None:
                    return  # closed meanwhile, or worked on already
            else:
                if not records or any(r.status == PENDING for r in records):
                    return
                # Pinned to the step these decisions belong to: a run that paused again meanwhile (at a later
                # step) is never resumed with them.
                current = await self.storage.leases.claim_paused(
                    run_id, self.lifecycle.owner, self.lifecycle.lease_until(), step=records[0].step
                )
                if current is None:
                    return  # another worker, replica or a supersede got there first
                failpoints.failpoint("after_claim")
            # The fence is taken from the run as claimed (the row the claim wrote, or a read after it), with no
            # read of its own. A takeover since is refused by the fenced writes themselves (each checks owner and
            # generation in its transaction: FENCE_CONDITION), starting with resuming -> running below.
            async with self.lifecycle.holding(current) as fence:
                if fence is not None:
                    # The step's snapshot came with the step when it was read fully decided: the claim, pinned to
                    # that step, took the run still paused there, so it is the snapshot of the run we hold.
                    await self._resume_claimed(
                        run_id, thread, run.requester, records, paused.snapshot if paused is not None else None, claimed
                    )
        await self.lifecycle.drain(thread)  # messages that arrived meanwhile

    async def _resume_claimed(
        self,
        run_id: str,
        thread: ThreadRef,
        requester: str,
        records: list[Any],
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
            await self.fail_run(run_id, thread, exc)
            return
        try:
            if claimed is not None:
                # Started with its claim. Its history, when not read with it (the hint there did not parse), is read
                # here; either way with_history checks it is exactly what the run paused with.
                if ref is not None:
                    history = claimed.history
                    if history is None:
                        history = await self.storage.messages.retrieve_messages(
                            snapshot.history_id, last_k=ref.count, up_to=ref.up_to
                        )
                    snapshot = with_history(snapshot, ref, history)
            else:
                # The compare-and-set that starts the work on a claim: exactly one resume of it moves the run on (a
                # second start of the same claim, or an owner whose run was taken over, gets False and does nothing).
                # The history the snapshot refers to is read back in the same round trip, once.
                writes: list[Write | Read] = [
                    Write(
                        "runs",
                        "transition",
                        (run_id, "resuming", "running"),
                        {"fence": self.lifecycle.fence(run_id)},
                        required=True,
                    )
                ]
                if ref is not None:
                    writes.append(
                        Read(
                            "messages",
                            "retrieve_messages",
                            (snapshot.history_id,),
                            {"last_k": ref.count, "up_to": ref.up_to},
                        )
                    )
                begun = await self.storage.batches.apply(writes)
                if not begun.applied:
                    return
                if ref is not None:
                    snapshot = with_history(snapshot, ref, begun.results[1])
            # A step held for review resumes with the reviews (its tools ran); a step paused before acting, with the
            # decisions: those made at the pause and the people's, each call checked against its policy now.
            outcome: dict[str, Any]
            if snapshot.stage == REVIEW_STAGE:
                outcome = {"tool_result_reviews": [review_from_record(r) for r in records]}
            else:
                decided = await step_decisions(
                    self.storage,
                    snapshot.step_message.tool_calls,
                    snapshot.decisions,
                    records,
                    run_id=run_id,
                    tools=self.tools,
                    context=_channel_of(thread),
                    default_ttl=self.config.default_ttl_seconds,
                    now=self.clock(),
                    views=claimed.policies if claimed is not None else None,
                )
                snapshot = replace(snapshot, decisions=[])  # all of them are handed over, checked, below
                outcome = {"tool_execution_decisions": decided}
        except FencedOut:
            raise
        except (SnapshotError, StorageError) as exc:  # a lost history (or storage failing) fails this run only
            await self.fail_run(run_id, thread, exc)
            return
        await self.run_agent(
            run_id,
            thread,
            requester,
            lambda ctx, streaming_callback: self.agent.run_async(
                [],
                snapshot=snapshot,
                chat_message_store_kwargs=self._store_kwargs(run_id, thread),
                confirmation_strategy_context=ctx,
                streaming_callback=streaming_callback,
                **outcome,
            ),
            decided_calls=frozenset(r.tool_call_id for r in records),
        )

    async def supersede(self, run: Any) -> None:
        """A newer message is to run while ``run`` is paused: close its approvals and its dangling calls."""
        if not await self.storage.runs.transition(run.run_id, "paused", "finished", error=SUPERSEDED_RESULT):
            return
        self.observer.run_ended("superseded")
        closed = await self.storage.approvals.close_pending_for_run(run.run_id, "superseded", SUPERSEDED_RESULT)
        thread = ThreadRef(run.platform, run.workspace, run.channel, run.thread)
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
            paused = await self.storage.approvals.step(run.run_id, run.step)
        except NotFound:
            return
        if paused.approvals:
            await self._rerender(paused.approvals[0], paused)  # the step as just read: no second read

    # --- expiry -------------------------------------------------------------------------------------

    async def sweep_expired(self, batch: int = 500) -> int:
        """Expire every due approval (never approve), update renderings, resume fully decided runs.

        Returns how many approvals this process expired. See :meth:`expire_due` and :meth:`after_expiry`.
        """
        records = await self.expire_due(batch)
        await self.after_expiry(records)
        return len(records)

    async def expire_due(self, batch: int = 500) -> list[Any]:
        """Claim and audit every due approval, a batch per statement; the approvals this process expired.

        However many processes sweep at once, each approval is claimed by exactly one of them.
        """
        now = self.clock()
        claimed: list[Any] = []
        # Each batch of expiries and its audit entries are one write: no approval expires unaudited.
        expiring = [
            Write("approvals", "expire_due", (), {"now": now, "limit": batch}),
            Write("audit", "append_many", args_from=lambda done: _expiry_audit(done[0], now)),
        ]
        while True:
            records = (await self.storage.batches.apply(expiring)).results[0]
            for _record in records:
                self.observer.decision("expire", "expired")
            claimed += records
            if len(records) < batch:
                return claimed

    async def after_expiry(self, records: list[Any], concurrency: int = 64) -> None:
        """Re-render each expired approval's step and resume the steps now fully decided (once per step)."""
        steps = list({(r.run_id, r.step): r for r in records}.values())
        await self.notices.tell_expired(records)
        for start in range(0, len(steps), concurrency):
            chunk = steps[start : start + concurrency]
            await asyncio.gather(*(_quietly(self._after_decision(r, "Expired.")) for r in chunk))

    async def remind_due(self) -> int:
        """Remind, once, the approvers who have not answered approvals past ``COUNTERSIGN_REMIND_AT``."""
        return await self.notices.remind_due()

    # --- crash recovery -----------------------------------------------------------------------------

    async def recover(self) -> None:
        """Recover runs whose owner stopped, resume decided steps, start waiting messages, post owed ones."""
        await self.lifecycle.recover()

    # --- admin --------------------------------------------------------------------------------------

    async def admin(self, request: AdminRequest) -> str:
        """Run one admin command; always answers with plain text (errors and usage included)."""
        return await self.admin_commands.run(request)

    async def policy_table(self, platform: str, workspace: str) -> list[dict[str, Any]]:
        """Stored rules that apply in this workspace: global, workspace and its channels."""
        return await self.admin_commands.policy_table(platform, workspace)

    async def pending_for(self, platform: str, actor: str, place: str | None = None) -> list[ApprovalView]:
        """Pending approvals on ``platform`` that ``actor`` may decide now.

        Pass ``place`` when the list is shown there (an App Home tab, a console): its buttons may then
        decide them.
        """
        views = []
        always = place is not None and await self.roles.is_admin(actor, platform, fresh=False)
        for record in await self.storage.approvals.pending(platform=platform):
            try:
                check_open(self.clock(), record)
                await authorize_now(self.roles, record, actor, fresh=False)  # a listing; the click re-checks
            except EngineError:
                continue
            views.extend(offered([await self._view(record)], always))
        if place is not None:
            await self.note_shown(place, [v.approval_id for v in views])
        return views

    # --- small services for adapters ------------------------------------------------------------------

    async def first_time(self, key: str) -> bool:
        """Durable dedupe of an adapter-level event key."""
        return await self.storage.events.first_time(key)

    async def save_conversation(self, key: str, reference: dict[str, Any]) -> None:
        """Store a platform conversation reference (e.g. for Teams proactive messages)."""
        await self.storage.conversations.save(key, reference)

    async def load_conversation(self, key: str) -> dict[str, Any] | None:
        """A stored conversation reference, or ``None``."""
        return await self.storage.conversations.load(key)

    async def _record(self, approval_id: str) -> Any:
        _check_approval_id(approval_id)
        try:
            return await self.storage.approvals.get(approval_id)
        except NotFound:
            raise ApprovalNotFound(approval_id) from None

    async def _clicked(self, approval_id: str, place: str | None) -> ClickedApproval:
        """The approval a click names and whether it was shown where the click came from (one read)."""
        _check_approval_id(approval_id)
        try:  # a place that is not a place key (clicks are untrusted) was shown nothing
            return await self.storage.approvals.get_clicked(approval_id, place if isinstance(place, str) else None)
        except NotFound:
            raise ApprovalNotFound(approval_id) from None

    async def _thread_of(self, record: Any) -> ThreadRef:
        """The thread of an approval, from its run (ids like Teams channels contain ':', so never split keys)."""
        return _thread_of_run(await self.storage.runs.get(record.run_id))

    async def _views(self, records: list[Any], thread: ThreadRef | None = None) -> list[ApprovalView]:
        """Views of approvals of one step (one run, so its thread is read once, unless the caller knows it)."""
        if not records:
            return []
        thread = thread or await self._thread_of(records[0])
        return [await self._view(r, thread) for r in records]

    async def _view(self, record: Any, thread: ThreadRef | None = None) -> ApprovalView:
        tool = self.tools.get(record.tool_name)
        votes = await self.storage.approvals.votes(record.approval_id) if record.quorum > 1 else []
        return ApprovalView(
            approval_id=record.approval_id,
            run_id=record.run_id,
            thread=thread or await self._thread_of(record),
            tool_name=record.tool_name,
            tool_description=tool.description if tool else "",
            arguments=record.arguments,
            parameters_schema=tool.parameters if tool else {"type": "object", "properties": {}},
            requester=record.requester,
            policy_mode=record.mode,
            approvers=tuple(record.approvers),
            quorum=record.quorum,
            four_eyes=record.four_eyes,
            votes=tuple(v.voter for v in votes if v.vote == CONFIRM),
            created_at=record.created_at,
            expires_at=record.expires_at,
            status=record.status,
            decided_by=record.decided_by,
            decided_at=record.decided_at,
            feedback=record.feedback,
            final_arguments=record.final_arguments,
            message_ref=record.message_ref,
            kind=record.kind,
            result=record.result,
            final_result=record.final_result,
            destructive=bool(tool and tool.destructive),
            deciders=tuple(await self._deciders(record)) if record.status == PENDING else (),
        )

    async def _deciders(self, record: Any) -> list[str]:
        """The people who may decide ``record`` (the rule of :func:`authorize`, groups from the cache)."""
        entries = record.approvers or (record.requester, *sorted(self.config.admins))
        people = await self.roles.people(entries, record.platform, fresh=False)
        return [p for p in people if not (record.four_eyes and p == record.requester)]

    async def personal_step(self, approval_id: str, actor: str, place: str | None) -> tuple[list[ApprovalView], bool]:
        """The step of ``approval_id`` as ``actor`` alone sees it (a Teams user-specific view), and whether they
        may decide any of its pending calls there; admins are offered "Approve and always allow here"."""
        clicked = await self._clicked(approval_id, place)
        record = clicked.record
        step, views = await self._step_views(record)
        may = False
        if place and clicked.shown_here:
            for other in step:
                try:
                    check_open(self.clock(), other)
                    await authorize_now(self.roles, other, actor, fresh=False)
                    may = True
                except EngineError:
                    continue
        admin = may and await self.roles.is_admin(actor, record.platform, fresh=False)
        return offered(views, admin), may


def _claimed_history(done: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """A decision batch's history read (``Read.args_from``): after ``(decide, claim, step)``, the history the decided
    step's snapshot refers to, if the claim won; ``None`` (read nothing) otherwise. Runs in the decision's
    transaction, so it looks at the reference only (the resume parses and checks the whole snapshot)."""
    claim, paused = done[1], done[2]
    if not claim or paused.snapshot is None:
        return None
    target = history_to_read(paused.snapshot)
    if target is None:  # self-contained: nothing to read
        return None
    history_id, ref = target
    return (history_id,), {"last_k": ref.count, "up_to": ref.up_to}


def _claimed_policies(done: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """A decision batch's policy read (``Read.args_from``): after ``(decide, claim, step, history)``, the policy views
    in the run's channel of the tools whose calls the decided step may run (its approvals' and those the policy let
    run at the pause), if the claim won; ``None`` (read nothing) otherwise, or for a step held for review (its tools
    ran). Cheap: it looks at the stored snapshot's decisions only; the resume reads what this did not."""
    claim, paused = done[1], done[2]
    if not claim:
        return None
    data = paused.snapshot
    if isinstance(data, dict) and data.get("stage") == REVIEW_STAGE:
        return None
    names = [a.tool_name for a in paused.approvals]
    if isinstance(data, dict):
        names += [d["tool_name"] for d in data.get("decisions") or () if d.get("execute") is True]
    run = paused.run
    return (tuple(dict.fromkeys(names)),), {
        "platform": run.platform,
        "workspace": run.workspace,
        "channel": run.channel,
    }


def _channel_of(thread: ThreadRef) -> dict[str, str]:
    """A thread's channel, as policies are looked up by (a confirmation context's first three keys)."""
    return {"platform": thread.platform, "workspace": thread.workspace, "channel": thread.channel}


def _thread_of_run(run: Any) -> ThreadRef:
    """The thread a run works in."""
    return ThreadRef(run.platform, run.workspace, run.channel, run.thread)


def _expiry_audit(records: list[Any], now: datetime) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """The audit entries of the approvals a batch of ``expire_due`` claimed (as ``append_many``'s arguments), or
    ``None`` when it claimed none."""
    if not records:
        return None
    entries = [
        ("countersign", "expired", r.approval_id, {"tool": r.tool_name, "run_id": r.run_id, "kind": r.kind})
        for r in records
    ]
    return (entries,), {"now": now}


def _check_approval_id(approval_id: Any) -> None:
    """:class:`ApprovalNotFound` for what cannot be an approval id (clicks are untrusted), before any read."""
    if not isinstance(approval_id, str) or not approval_id or len(approval_id) > 200:
        raise ApprovalNotFound(str(approval_id)[:40])


def _action_label(action: Any) -> str:
    """A decision's action as a metric label: one of the known actions, else ``unknown`` (clicks are untrusted)."""
    return action if action in ACTIONS else "unknown"


def _answer_text(result: dict[str, Any]) -> str:
    last = result.get("last_message")
    text = last.text if last is not None and last.role == "assistant" and last.text else ""
    reason = result.get("exit_reason")
    if reason == "max_agent_steps":
        text = (text + "\n\n" if text else "") + "(I stopped after too many steps without finishing.)"
    elif reason == "length":
        text = (text + "\n\n" if text else "") + "(My answer was cut off: it hit the model's length limit.)"
    elif reason == "content_filter":
        text = (text + "\n\n" if text else "") + "(The model's content filter stopped this answer.)"
    elif reason == "empty":
        text = "(The model returned an empty answer twice; please try again.)"
    return text


def _failure_sentence(exc: Exception) -> str:
    if isinstance(exc, PolicyKeptChanging):
        return str(exc)
    if isinstance(exc, HistoryUnavailable):
        return (
            "Sorry, this request cannot continue: the conversation history it paused with is no longer stored. "
            "Please ask again."
        )
    if isinstance(exc, LLMError):
        return (
            "Sorry, the language model could not answer (it timed out or failed). Nothing was lost; please try again."
        )
    return "Sorry, something went wrong while working on this. Nothing was lost; please try again."


async def _quietly(awaitable: Any) -> None:
    """Cosmetic output (working indicators, re-renders) must never break a decision that already landed."""
    try:
        await awaitable
    except Exception:
        logger.warning("surface call failed", exc_info=True)
