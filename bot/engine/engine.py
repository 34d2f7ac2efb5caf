"""The chat-ops engine: chat messages become agent runs, clicks become decisions that resume them.

Everything that must survive a restart is written to storage before anyone is told anything. Every
state change that could race (approval decided, run resumed, tool executed) is a compare-and-set in
storage, so double clicks, concurrent approvers, retries, replicas and restarts change nothing twice.

:class:`Engine` is a façade over parts with one job each, built bottom-up in :meth:`Engine.__init__` (as
Starlette builds its middleware stack): each part is built from the parts below it and none holds the
Engine. See docs/architecture.md for the picture.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from bot import failpoints
from bot.agent import Agent
from bot.config import Config
from bot.engine.access import AccessControl
from bot.engine.admin_commands import AdminCommands
from bot.engine.ahead import ReadsAhead
from bot.engine.approving import Approving
from bot.engine.cards import Cards
from bot.engine.confirmation import PolicyConfirmationStrategy
from bot.engine.deciding import Deciding
from bot.engine.expiry import Expiry
from bot.engine.gate import Gate
from bot.engine.history import StepHistory
from bot.engine.inbox import Inbox, Received
from bot.engine.instrumentation import ObservedChatGenerator
from bot.engine.intake import Intake
from bot.engine.leases import Leases
from bot.engine.ledger import StorageExecutionLedger
from bot.engine.lifecycle import RunLifecycle
from bot.engine.listening import Listening
from bot.engine.memory import MEMORY_SCOPE, REMEMBER, RememberConfirmation, remember_tool
from bot.engine.model import AdminRequest, ApprovalView, DecisionRequest, DecisionResult, Inbound, ThreadRef
from bot.engine.notices import ApproverNotices
from bot.engine.outbox import Deliveries
from bot.engine.pausing import Pausing
from bot.engine.recovery import Recovery
from bot.engine.resuming import ClaimedStep, Resuming
from bot.engine.retention import Retention
from bot.engine.review import PolicyReviewHook
from bot.engine.roles import Roles
from bot.engine.running import Invoke, Runner
from bot.engine.sentences import NOTHING_TO_STOP, STOPPED_NOTICE, STOPPING, SUPERSEDED_RESULT
from bot.engine.stops import Stops
from bot.engine.streaming import LiveAnswer, StopFromChat
from bot.engine.superseding import Superseding
from bot.engine.surface import Surface
from bot.engine.views import Views
from bot.engine.waiting import WaitingSeen
from bot.engine.work import Work
from bot.metrics import Observer, PrometheusObserver
from bot.tools import Tool
from storage import open_async_storage
from storage.protocols import ApprovalStep

__all__ = [
    "NOTHING_TO_STOP",
    "STOPPED_NOTICE",
    "STOPPING",
    "SUPERSEDED_RESULT",
    "ClaimedStep",
    "Engine",
    "Invoke",
    "utcnow",
]


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
        self.clock = clock = clock or utcnow
        # The built-in remember tool, unless the deployment brings its own tool of that name.
        if all(t.name != REMEMBER for t in tools):
            tools = [*tools, remember_tool(storage, clock)]
        self.tools = {t.name: t for t in tools}
        # Each engine counts into a registry of its own (served by GET /metrics), never the global one.
        self.observer: Observer = observer if observer is not None else PrometheusObserver()
        self.surfaces: dict[str, Surface] = {}
        ttl = config.default_ttl_seconds
        # --- the parts, bottom-up: each is built from the ones above it in this list -----------------
        self.work = Work()
        self.leases = Leases(storage, owner=config.instance_id, clock=clock, lease_seconds=config.lease_seconds)
        waiting = WaitingSeen()
        self.history = StepHistory(storage)
        """The agent's chat store: a run's history writes join its step's next batch (:mod:`bot.engine.history`)."""
        self.ledger = StorageExecutionLedger(storage, self.leases.fence, observer=self.observer, history=self.history)
        """The tool-execution ledger of the agent's runs (it also notes stop requests read with each outcome)."""
        live: dict[str, LiveAnswer] = {}
        self.agent = self._agent(generator, list(tools), live)
        self.roles = Roles(storage, config.admins, self.surfaces)
        self.listening = Listening(storage, config.reply_mode, self.roles)
        self.access = AccessControl(storage, self.roles)
        self.admin_commands = AdminCommands(storage, self.tools, self.roles, clock, default_ttl=ttl)
        self.gate = Gate(storage, self.roles, clock)
        self.views = Views(storage, self.tools, self.roles, self.gate, config.admins, clock)
        self.notices = ApproverNotices(
            storage, self.roles, self.surfaces, self.views, clock, remind_at=config.remind_at
        )
        self.cards = Cards(storage, self.surfaces, self.views, self.notices, clock)
        deliveries = Deliveries(
            storage,
            self.surfaces,
            owner=config.instance_id,
            clock=clock,
            claim_seconds=config.lease_seconds,
            show_card=self.cards.show_owed_card,
        )
        ahead = ReadsAhead(self.tools, history_last_k=config.history_last_k)
        pausing = Pausing(
            storage,
            self.tools,
            self.surfaces,
            leases=self.leases,
            waiting=waiting,
            history=self.history,
            deliveries=deliveries,
            cards=self.cards,
            clock=clock,
            default_ttl=ttl,
        )
        self.stops = Stops(storage, self.roles, self.ledger, live, clock)
        self.runner = Runner(
            storage,
            self.agent,
            self.surfaces,
            leases=self.leases,
            waiting=waiting,
            history=self.history,
            ledger=self.ledger,
            deliveries=deliveries,
            pausing=pausing,
            stops=self.stops,
            ahead=ahead,
            observer=self.observer,
            clock=clock,
            history_last_k=config.history_last_k,
            stream_update_seconds=config.stream_update_seconds,
            memory_notes=config.memory_notes,
        )
        superseding = Superseding(storage, self.cards, self.observer, clock)
        inbox = Inbox(
            storage,
            self.surfaces,
            work=self.work,
            leases=self.leases,
            waiting=waiting,
            ahead=ahead,
            history=self.history,
            listening=self.listening,
            superseding=superseding,
            runner=self.runner,
            clock=clock,
        )
        self.resuming = Resuming(
            storage,
            self.tools,
            work=self.work,
            leases=self.leases,
            inbox=inbox,
            runner=self.runner,
            clock=clock,
            default_ttl=ttl,
        )
        recovery = Recovery(
            storage,
            self.tools,
            work=self.work,
            leases=self.leases,
            inbox=inbox,
            runner=self.runner,
            resuming=self.resuming,
            deliveries=deliveries,
            observer=self.observer,
            clock=clock,
            default_ttl=ttl,
        )
        self.deciding = Deciding(
            storage,
            self.tools,
            gate=self.gate,
            views=self.views,
            cards=self.cards,
            resuming=self.resuming,
            leases=self.leases,
            work=self.work,
            observer=self.observer,
            clock=clock,
        )
        self.approving = Approving(
            storage, gate=self.gate, roles=self.roles, views=self.views, deciding=self.deciding, clock=clock
        )
        self.expiry = Expiry(
            storage,
            views=self.views,
            deciding=self.deciding,
            deliveries=deliveries,
            observer=self.observer,
            clock=clock,
        )
        self.intake = Intake(
            storage,
            self.surfaces,
            listening=self.listening,
            access=self.access,
            inbox=inbox,
            work=self.work,
            clock=clock,
        )
        self.lifecycle = RunLifecycle(
            storage,
            work=self.work,
            leases=self.leases,
            inbox=inbox,
            recovery=recovery,
            expiry=self.expiry,
            notices=self.notices,
            deliveries=deliveries,
            retention=Retention(storage, config, clock),
            clock=clock,
            heartbeat_seconds=config.heartbeat_seconds,
            sweep_interval_seconds=config.sweep_interval_seconds,
        )
        self._started = False
        self._stopped = False

    def _agent(self, generator: Any, tools: list[Tool], live: dict[str, LiveAnswer]) -> Agent:
        """The agent every run invokes: the model observed, the per-channel policies asked, the ledger kept."""
        config, storage = self.config, self.storage
        policy = PolicyConfirmationStrategy(storage, self.tools, config.default_ttl_seconds)
        if isinstance(generator, ObservedChatGenerator):  # a generator taken from another engine
            generator = generator.inner
        self.generator = ObservedChatGenerator(generator, self.observer)
        return Agent(
            self.generator,
            tools=tools,
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
                    StopFromChat(live),
                ]
            },
        )

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
        await self.generator.warm_up()
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
        await self.work.wait_idle()

    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        """Background work in flight (resumes, recoveries, inbox drains)."""
        return self.work.tasks

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
        """Store a person's message durably (once per platform event); ``None`` for a redelivery or a message
        the bot does not act on. Adapters await this before acknowledging the event, then :meth:`process` it."""
        return await self.intake.receive(inbound)

    async def process(self, received: Received) -> None:
        """Process a received message's thread; returns when its run has finished or paused, or it waits."""
        await self.lifecycle.process(received)

    async def is_admin(self, actor: str, platform: str) -> bool:
        """Whether ``actor`` is an admin on ``platform``: in ``COUNTERSIGN_ADMINS``, or in a group listed there."""
        return await self.roles.is_admin(actor, platform)

    async def request_stop(self, thread: ThreadRef, actor: str) -> str:
        """Stop the run this process works on in ``thread`` after its current step (the console's Ctrl-C)."""
        return await self.stops.request_stop(thread, actor)

    async def stop_run(self, run_id: str, actor: str) -> str:
        """Stop a run after its current step, in whichever process runs it (requester or admin only)."""
        return await self.stops.stop_run(run_id, actor)

    # --- approvals ----------------------------------------------------------------------------------

    async def get_approval(self, approval_id: str) -> ApprovalView:
        """The approval as adapters render it; :class:`ApprovalNotFound` for an unknown id."""
        return await self.views.get_approval(approval_id)

    async def step_approvals(self, approval_id: str) -> list[ApprovalView]:
        """Every approval of the paused step that ``approval_id`` belongs to."""
        return await self.views.step_approvals(approval_id)

    async def note_shown(self, place: str, approval_ids: Sequence[str]) -> None:
        """Record that these approvals are shown in ``place``, so clicks from there may decide them."""
        await self.views.note_shown(place, approval_ids)

    async def pending_for(self, platform: str, actor: str, place: str | None = None) -> list[ApprovalView]:
        """Pending approvals on ``platform`` that ``actor`` may decide now (``place``: where they are listed)."""
        return await self.views.pending_for(platform, actor, place)

    async def personal_step(self, approval_id: str, actor: str, place: str | None) -> tuple[list[ApprovalView], bool]:
        """The step of ``approval_id`` as ``actor`` alone sees it, and whether they may decide any of it there."""
        return await self.views.personal_step(approval_id, actor, place)

    async def check_can_decide(self, approval_id: str, actor: str, place: str | None = None) -> ApprovalView:
        """Raise what :meth:`decide` would raise for this actor, clicking in ``place``, now (before opening a form)."""
        return await self.deciding.check_can_decide(approval_id, actor, place)

    async def decide(self, request: DecisionRequest, *, render_later: bool = False) -> DecisionResult:
        """Record one decision (exactly one wins), update the rendering, resume when the step is decided."""
        return await self.deciding.decide(request, render_later=render_later)

    async def approve_all(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve every pending call of the step that ``actor`` may decide; refusals are reported, not raised."""
        return await self.approving.approve_all(approval_id, actor, actor_name, place)

    async def approve_and_always_allow(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve one call and write a ``never`` rule for its tool in its channel (admins who may decide it)."""
        return await self.approving.approve_and_always_allow(approval_id, actor, actor_name, place)

    async def resume(
        self, run_id: str, paused: ApprovalStep | None = None, *, claimed: ClaimedStep | None = None
    ) -> None:
        """Resume a paused run whose step is fully decided; a no-op for anyone who loses the claim."""
        await self.resuming.resume(run_id, paused, claimed=claimed)

    async def sweep_expired(self, batch: int = 500) -> int:
        """Expire every due approval (never approve), update renderings, resume fully decided runs; how many."""
        return await self.expiry.sweep_expired(batch)

    async def remind_due(self) -> int:
        """Remind, once, the approvers who have not answered approvals past ``COUNTERSIGN_REMIND_AT``."""
        return await self.notices.remind_due()

    async def recover(self) -> None:
        """Recover runs whose owner stopped, resume decided steps, start waiting messages, post owed ones."""
        await self.lifecycle.recover()

    # --- admin and small services for adapters ---------------------------------------------------------

    async def admin(self, request: AdminRequest) -> str:
        """Run one admin command; always answers with plain text (errors and usage included)."""
        return await self.admin_commands.run(request)

    async def policy_table(self, platform: str, workspace: str) -> list[dict[str, Any]]:
        """Stored rules that apply in this workspace: global, workspace and its channels."""
        return await self.admin_commands.policy_table(platform, workspace)

    async def first_time(self, key: str) -> bool:
        """Durable dedupe of an adapter-level event key."""
        return await self.storage.events.first_time(key)

    async def save_conversation(self, key: str, reference: dict[str, Any]) -> None:
        """Store a platform conversation reference (e.g. for Teams proactive messages)."""
        await self.storage.conversations.save(key, reference)

    async def load_conversation(self, key: str) -> dict[str, Any] | None:
        """A stored conversation reference, or ``None``."""
        return await self.storage.conversations.load(key)
