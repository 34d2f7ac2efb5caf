"""The chat-ops engine: chat messages become agent runs, clicks become decisions that resume them.

Everything that must survive a restart is written to storage before anyone is told anything. Every
state change that could race (approval decided, run resumed, tool executed) is a compare-and-set in
storage, so double clicks, concurrent approvers, retries, replicas and restarts change nothing twice.

:class:`Engine` is the façade that adapters, the CLI and tests call. Its work is done by parts with one
job each, built bottom-up by :class:`~bot.engine.parts.Parts` (as Starlette builds its middleware stack):
each part is built from the parts below it, and none holds the Engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot import failpoints
from bot.config import Config
from bot.engine.errors import ToolsNotConfigured
from bot.engine.inbox import Received
from bot.engine.model import (
    AdminRequest,
    AnswerRequest,
    ApprovalView,
    DecisionRequest,
    DecisionResult,
    Inbound,
    QuestionView,
    ThreadRef,
)
from bot.engine.params import field_error
from bot.engine.parts import Parts
from bot.engine.resuming import ClaimedStep
from bot.engine.running import Invoke
from bot.engine.sentences import NOTHING_TO_STOP, STOPPED_NOTICE, STOPPING, SUPERSEDED_RESULT
from bot.engine.surface import Surface
from bot.metrics import Observer, PrometheusObserver
from bot.startup_errors import open_configured_storage
from bot.tools import Tool
from storage.priority import urgent
from storage.protocols import ApprovalRecord, ApprovalStep

if TYPE_CHECKING:
    from bot.mcp import MCPManager
    from storage.async_protocols import AsyncStores

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
        storage: AsyncStores,
        generator: Any,
        tools: Sequence[Tool],
        clock: Callable[[], datetime] | None = None,
        observer: Observer | None = None,
    ) -> None:
        # Each engine counts into a registry of its own (served by GET /metrics), never the global one.
        observer = observer if observer is not None else PrometheusObserver()
        self.mcp: MCPManager | None = None
        """The MCP servers' connections (``COUNTERSIGN_MCP_CONFIG``), closed by :meth:`stop`."""
        self.parts = parts = Parts(
            config=config, storage=storage, generator=generator, tools=tools, clock=clock or utcnow, observer=observer
        )
        self.config, self.storage, self.clock, self.observer = config, storage, parts.clock, parts.observer
        self.tools, self.surfaces, self.agent, self.generator = (
            parts.tools,
            parts.surfaces,
            parts.agent,
            parts.generator,
        )
        self.history, self.ledger = parts.history, parts.ledger
        """The agent's chat store (:mod:`bot.engine.history`) and the tool-execution ledger of its runs."""
        self.roles, self.listening, self.access = parts.roles, parts.listening, parts.access
        self.admin_commands, self.notices, self.lifecycle = parts.admin_commands, parts.notices, parts.lifecycle
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
        from bot.mcp import MCPManager

        # Started once per process (none configured: `mcp reload` may start some); a server that fails is
        # reported (degraded), never fatal.
        mcp = MCPManager(config.mcp_servers)
        await mcp.start()
        chosen_tools = [*chosen_tools, *mcp.tools()]
        chosen_generator = generator if generator is not None else config.build_generator()
        # One line naming the setting (exit 2) when the database cannot be opened: see bot.startup_errors.
        storage = await open_configured_storage(
            config, last_k=config.history_last_k, pool_size=config.db_pool_size, pool_timeout=config.db_pool_timeout
        )
        # `policy set deploy__* always`: each server's tools are the group `<server>__*`
        for group, names in mcp.server_groups().items():
            if names:
                await storage.policies.define_group(group, names)
        engine = cls(
            config=config,
            storage=storage,
            generator=chosen_generator,
            tools=chosen_tools,
            clock=clock,
            observer=observer,
        )
        engine.mcp = mcp
        engine.parts.deciding.mcp = engine.admin_commands.mcp.manager = mcp
        mcp.on_tools_changed = engine.mcp_tools_changed
        # Servers' questions go to the run's requester; a stop cancels the run's calls.
        mcp.elicitation.asker = engine.parts.questions.ask
        engine.parts.stops.cancel_calls = mcp.cancel_run
        return engine

    async def mcp_tools_changed(self) -> None:
        """Offer the MCP servers' tools as they are now (a server connected after start-up, ``mcp reload``).

        A paused run resumes with the tools it paused with, found by name; their groups ``<server>__*`` follow.
        """
        if self.mcp is None:
            return
        tools = self.mcp.tools()
        self.parts.replace_mcp_tools(tools)
        for group, names in self.mcp.server_groups().items():
            if names:  # as at start-up: a server without tools now keeps its group for when they are back
                await self.storage.policies.define_group(group, names)

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
        await self.parts.views.respondable.load()  # issue 30: cards show an admin's Respond setting without a read
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
        if self.mcp is not None:
            await self.mcp.aclose()
        try:
            # The model client's HTTP session, closed on its loop: left to the collector, aiohttp logs it unclosed.
            await self.generator.aclose()
        finally:
            await self.storage.aclose()

    async def wait_idle(self) -> None:
        """Wait until every background resume has finished (tasks may start further tasks)."""
        await self.parts.work.wait_idle()

    @property
    def tasks(self) -> set[asyncio.Task[Any]]:
        """Background work in flight (resumes, recoveries, inbox drains)."""
        return self.parts.work.tasks

    # --- messages -----------------------------------------------------------------------------------

    async def handle_message(self, inbound: Inbound) -> None:
        """Queue a person's message in its thread's inbox (once per platform event) and process the thread.

        Returns when the message's run has finished or paused, or at once when it waits behind the
        thread's active run (in this or another process), which processes it as soon as it ends or pauses.
        """
        received = await self.receive(inbound)
        if received is not None:
            await self.process(received)

    async def receive(
        self, inbound: Inbound, *, conversation: tuple[str, dict[str, Any]] | None = None
    ) -> Received | None:
        """Store a person's message durably (once per platform event); ``None`` for a redelivery or a message
        the bot does not act on. Adapters await this before acknowledging the event, then :meth:`process` it.

        ``conversation``: a reference to keep as :meth:`save_conversation` does (key, data), saved in the
        message's own write: the acknowledgement waits for one transaction, not two.
        """
        with urgent():  # stored ahead of the runs queued for a connection: the event is acknowledged in time
            return await self.parts.intake.receive(inbound, conversation)

    async def process(self, received: Received) -> None:
        """Process a received message's thread; returns when its run has finished or paused, or it waits."""
        await self.lifecycle.process(received)

    async def is_admin(self, actor: str, platform: str) -> bool:
        """Whether ``actor`` is an admin on ``platform``: in ``COUNTERSIGN_ADMINS``, or in a group listed there."""
        return await self.roles.is_admin(actor, platform)

    async def request_stop(self, thread: ThreadRef, actor: str) -> str:
        """Stop the run this process works on in ``thread`` after its current step (the console's Ctrl-C)."""
        return await self.parts.stops.request_stop(thread, actor)

    async def stop_run(self, run_id: str, actor: str) -> str:
        """Stop a run after its current step, in whichever process runs it (requester or admin only)."""
        return await self.parts.stops.stop_run(run_id, actor)

    # --- questions from running tools (MCP elicitation) ---------------------------------------------

    def get_question(self, question_id: str) -> QuestionView:
        """An open question as adapters render it; :class:`QuestionNotOpen` if it is not open in this process."""
        return self.parts.questions.get(question_id)

    async def check_can_answer(self, question_id: str, actor: str) -> QuestionView:
        """The open question if ``actor`` may answer it (requester or admin), else a refusal (audited)."""
        return await self.parts.questions.check_can_answer(question_id, actor)

    async def answer_question(self, request: AnswerRequest) -> str:
        """Pass an answer on to the waiting tool (requester or admin only; values checked); the sentence for them."""
        return await self.parts.questions.answer(request)

    async def expire_questions(self) -> int:
        """Decline the open questions past the approval TTL by the engine's clock; how many."""
        return await self.parts.questions.expire_due()

    # --- approvals ----------------------------------------------------------------------------------

    async def get_approval(self, approval_id: str) -> ApprovalView:
        """The approval as adapters render it; :class:`ApprovalNotFound` for an unknown id."""
        return await self.parts.views.get_approval(approval_id)

    async def step_approvals(self, approval_id: str) -> list[ApprovalView]:
        """Every approval of the paused step that ``approval_id`` belongs to."""
        return await self.parts.views.step_approvals(approval_id)

    async def note_shown(self, place: str, approval_ids: Sequence[str]) -> None:
        """Record that these approvals are shown in ``place``, so clicks from there may decide them."""
        await self.parts.views.note_shown(place, approval_ids)

    async def pending_for(self, platform: str, actor: str, place: str | None = None) -> list[ApprovalView]:
        """Pending approvals on ``platform`` that ``actor`` may decide now (``place``: where they are listed)."""
        return await self.parts.views.pending_for(platform, actor, place)

    async def personal_step(self, approval_id: str, actor: str, place: str | None) -> tuple[list[ApprovalView], bool]:
        """The step of ``approval_id`` as ``actor`` alone sees it, and whether they may decide any of it there."""
        return await self.parts.views.personal_step(approval_id, actor, place)

    async def breakglass_at(self, approval_id: str) -> datetime | None:
        """When the requester may break glass on this pending call (issue 31); ``None``: never (off, deny, tainted).
        The decision itself checks everything again (who, the reason, the delay, the rate limit)."""
        record = await self.parts.views.record(approval_id)
        return await self.parts.breakglass.available_at(record) if record.is_pending else None

    async def check_can_break_glass(self, approval_id: str, actor: str, place: str | None = None) -> ApprovalView:
        """Raise what breaking glass on this call would raise for ``actor`` in ``place`` now, whatever the reason
        (issue 31: before a surface asks for the reason); the decision checks everything again."""
        return await self.parts.deciding.check_can_break_glass(approval_id, actor, place)

    async def check_can_review_breakglass(self, approval_id: str, actor: str) -> None:
        """Raise why ``actor`` may not review this break-glass now (issue 31: before a surface asks for a note)."""
        await self.parts.breakglass.check_review(approval_id, actor)

    async def review_breakglass(
        self, approval_id: str, actor: str, outcome: str, note: str | None = None, *, render_later: bool = False
    ) -> str:
        """Record the review (``ok`` / ``not-ok``, a note required for ``not-ok``) of one break-glass decision, by
        someone other than its requester allowed to decide the call; audited and shown on its card. The sentence
        to show the reviewer; an :class:`~bot.engine.errors.EngineError` says why not."""
        return await self.parts.breakglass.review(approval_id, actor, outcome, note, render_later=render_later)

    async def check_can_decide(self, approval_id: str, actor: str, place: str | None = None) -> ApprovalView:
        """Raise what :meth:`decide` would raise for this actor, clicking in ``place``, now (before opening a form)."""
        return await self.parts.deciding.check_can_decide(approval_id, actor, place)

    def not_configured(self, view: ApprovalView) -> ToolsNotConfigured | None:
        """Why ``view``'s call can't be approved or edited here (its tool is not configured now), else ``None``.

        :meth:`decide` refuses an approval or edit of it with that error; a rejection is still taken.
        """
        return self.parts.deciding.not_configured(view.tool_name)

    def edit_value_error(self, view: ApprovalView, name: str, raw: str) -> str | None:
        """What is wrong with ``raw`` typed for parameter ``name`` of ``view``'s call, checked alone, else ``None``.

        For forms that check each value as it is typed; :meth:`decide` checks the whole edit again.
        """
        tool = self.parts.tools.get(view.tool_name)
        return None if tool is None else field_error(tool, name, raw)

    async def decide(self, request: DecisionRequest, *, render_later: bool = False) -> DecisionResult:
        """Record one decision (exactly one wins), update the rendering, resume when the step is decided."""
        return await self.parts.deciding.decide(request, render_later=render_later)

    async def approve_all(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve every pending call of the step that ``actor`` may decide; refusals are reported, not raised."""
        return await self.parts.approving.approve_all(approval_id, actor, actor_name, place)

    async def approve_and_always_allow(
        self, approval_id: str, actor: str, actor_name: str | None = None, place: str | None = None
    ) -> DecisionResult:
        """Approve one call and write a ``never`` rule for its tool in its channel (admins who may decide it)."""
        return await self.parts.approving.approve_and_always_allow(approval_id, actor, actor_name, place)

    async def resume(
        self, run_id: str, paused: ApprovalStep | None = None, *, claimed: ClaimedStep | None = None
    ) -> None:
        """Resume a paused run whose step is fully decided; a no-op for anyone who loses the claim."""
        await self.parts.resuming.resume(run_id, paused, claimed=claimed)

    async def sweep_expired(self, batch: int = 500) -> int:
        """Expire every due approval (never approve), update renderings, resume fully decided runs; how many."""
        return await self.parts.expiry.sweep_expired(batch)

    async def expire_due(self, batch: int = 500) -> list[ApprovalRecord]:
        """Claim and audit every due approval, a batch per statement; the approvals this process expired."""
        return await self.parts.expiry.expire_due(batch)

    async def after_expiry(self, records: list[ApprovalRecord], concurrency: int = 64) -> None:
        """Re-render each expired approval's step and resume the steps now fully decided (once per step)."""
        await self.parts.expiry.after_expiry(records, concurrency)

    async def offer_breakglass_due(self) -> int:
        """Tell requesters whose calls waited past their tool's break-glass delay that they may break glass, and
        remind overdue break-glass reviews, once each (the sweep does it too); how many messages went out now."""
        return await self.parts.breakglass.sweep()

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
        """Store a platform conversation reference (e.g. for Teams proactive messages).

        Adapters store it as they receive a message, before the event is acknowledged: urgent, as the message.
        """
        with urgent():
            await self.storage.conversations.save(key, reference)

    async def load_conversation(self, key: str) -> dict[str, Any] | None:
        """A stored conversation reference, or ``None``."""
        return await self.storage.conversations.load(key)
