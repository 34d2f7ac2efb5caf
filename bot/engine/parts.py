"""The composition root of the engine: every part, built bottom-up from the parts below it.

As Starlette builds its middleware stack, each part is constructed from the parts already built, and none
holds the :class:`~bot.engine.engine.Engine` (or anything above it). The order of construction here is the
order of the layers that ``lint-imports`` holds (pyproject.toml, "engine parts are layered").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from bot.agent import Agent
from bot.config import Config
from bot.engine.access import AccessControl
from bot.engine.admin_commands import AdminCommands
from bot.engine.ahead import ReadsAhead
from bot.engine.approving import Approving
from bot.engine.breakglass import BreakGlass
from bot.engine.cards import Cards
from bot.engine.confirmation import PolicyConfirmationStrategy
from bot.engine.deciding import Deciding
from bot.engine.expiry import Expiry
from bot.engine.gate import Gate
from bot.engine.history import StepHistory
from bot.engine.inbox import Inbox
from bot.engine.instrumentation import ObservedChatGenerator
from bot.engine.intake import Intake
from bot.engine.leases import Leases
from bot.engine.ledger import StorageExecutionLedger
from bot.engine.lifecycle import RunLifecycle
from bot.engine.listening import Listening
from bot.engine.memory import MEMORY_SCOPE, REMEMBER, RememberConfirmation, remember_tool
from bot.engine.notices import ApproverNotices
from bot.engine.outbox import Deliveries
from bot.engine.pausing import Pausing
from bot.engine.previewing import Prechecks
from bot.engine.provenance import ProvenanceHook
from bot.engine.questions import Questions
from bot.engine.recovery import Recovery
from bot.engine.rejudging import Rejudging
from bot.engine.resuming import Resuming
from bot.engine.retention import Retention
from bot.engine.review import PolicyReviewHook
from bot.engine.roles import Roles
from bot.engine.running import Runner
from bot.engine.stops import Stops
from bot.engine.streaming import LiveAnswer, StopFromChat
from bot.engine.superseding import Superseding
from bot.engine.surface import Surface
from bot.engine.views import Views
from bot.engine.waiting import WaitingSeen
from bot.engine.work import Work
from bot.hitl.blocking import ConfirmationStrategy
from bot.mcp.tools import MCPTool
from bot.metrics import Observer
from bot.tools import Tool

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores


class Parts:
    """The engine's parts for one configuration, one storage and one set of tools."""

    def __init__(
        self,
        *,
        config: Config,
        storage: AsyncStores,
        generator: Any,
        tools: Sequence[Tool],
        clock: Callable[[], datetime],
        observer: Observer,
    ) -> None:
        self.config = config
        self.storage = storage
        self.clock = clock
        # The built-in remember tool, unless the deployment brings its own tool of that name.
        if all(t.name != REMEMBER for t in tools):
            tools = [*tools, remember_tool(storage, clock)]
        self.tools = {t.name: t for t in tools}
        self.observer = observer
        self.surfaces: dict[str, Surface] = {}
        ttl = config.default_ttl_seconds
        # --- the parts, bottom-up: each is built only from parts built on the lines before it ----------
        self.work = Work(config.active_runs_limit)
        self.leases = Leases(storage, owner=config.instance_id, clock=clock, lease_seconds=config.lease_seconds)
        waiting = WaitingSeen()
        self.history = StepHistory(storage)
        """The agent's chat store: a run's history writes join its step's next batch (:mod:`bot.engine.history`)."""
        self.ledger = StorageExecutionLedger(storage, self.leases.fence, observer=self.observer, history=self.history)
        """The tool-execution ledger of the agent's runs (it also notes stop requests read with each outcome)."""
        live: dict[str, LiveAnswer] = {}
        self.agent = self._agent(generator, list(tools), live)
        self.roles = Roles(storage, config.admins, self.surfaces)
        self.questions = Questions(storage, self.roles, live, clock, ttl_seconds=ttl, admission=self.work.admission)
        """A running tool's questions to its run's requester (MCP elicitation), asked in the thread."""
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
            preview_seconds=config.preview_timeout_seconds,
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
            prechecks=Prechecks(storage, self.tools, self.ledger, clock=clock, seconds=config.preview_timeout_seconds),
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
        self.breakglass = BreakGlass(
            storage,
            access=self.access,
            notices=self.notices,
            surfaces=self.surfaces,
            deliveries=deliveries,
            clock=clock,
            limit=config.breakglass_limit,
            channel=config.breakglass_channel,
            rerender=self.cards.update_rendering,
            work=self.work,
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
            glass=self.breakglass,
        )
        self.admin_commands.breakglass = self.breakglass
        self.admin_commands.rejudging = Rejudging(
            storage,
            self.tools,
            roles=self.roles,
            views=self.views,
            deciding=self.deciding,
            deliveries=deliveries,
            clock=clock,
            default_ttl=ttl,
        )
        self.breakglass.decider = self.deciding.decide
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
            retention=Retention(storage, config, clock, say=deliveries.say),
            offers=self.breakglass.sweep,
            clock=clock,
            heartbeat_seconds=config.heartbeat_seconds,
            sweep_interval_seconds=config.sweep_interval_seconds,
        )

    def replace_mcp_tools(self, tools: Sequence[Tool]) -> None:
        """Offer ``tools`` as the MCP servers' tools from now on, in place of those offered so far.

        Every part holds the one mapping :attr:`tools`, so it is updated in place; the agent offers the new set from
        its next run (a paused run resumes with the tools it paused with, by name).
        """
        kept = [t for t in self.tools.values() if not isinstance(t, MCPTool)]
        self.agent.replace_tools([*kept, *tools])
        self.tools.clear()
        self.tools.update({t.name: t for t in self.agent.tools})

    def _agent(self, generator: Any, tools: list[Tool], live: dict[str, LiveAnswer]) -> Agent:
        """The agent every run invokes: the model observed, the per-channel policies asked, the ledger kept."""
        config, storage = self.config, self.storage
        policy = PolicyConfirmationStrategy(storage, self.tools, config.default_ttl_seconds)
        if isinstance(generator, ObservedChatGenerator):  # a generator taken from another engine
            generator = generator.inner
        self.generator = ObservedChatGenerator(generator, self.observer)
        # Bound to this engine's storage, these two are never serialised (the engine's agent is never saved):
        # they have no to_dict/from_dict, which is all they lack of the protocol.
        strategies: dict[str | tuple[str, ...], ConfirmationStrategy] = {
            "*": cast(ConfirmationStrategy, policy),
            REMEMBER: cast(ConfirmationStrategy, RememberConfirmation(policy)),
        }
        return Agent(
            self.generator,
            tools=tools,
            system_prompt=config.system_prompt,
            max_agent_steps=config.max_agent_steps,
            confirmation_strategies=strategies,
            tool_invoker_kwargs={"ledger": self.ledger},
            chat_message_store=self.history,
            memory_store=self.history.memories,
            state_schema={MEMORY_SCOPE: {"type": dict}},
            # Review after acting is the after_tool half of the same per-channel policy.
            hooks={
                "before_tool": [ProvenanceHook(self.tools)],  # issue 31: tainted arguments, before the policy
                "after_tool": [
                    PolicyReviewHook(storage, self.tools, config.default_ttl_seconds, self.ledger),
                    StopFromChat(live),
                ],
            },
        )
