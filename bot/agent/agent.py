"""The agent loop: LLM → tool calls → decisions → tools → LLM …, with breakpoints for human approval.

Semantics follow Haystack's ``Agent`` with its known bugs fixed: a paused step carries *all* its
pending calls, decisions bind to one call each, the transcript never keeps a dangling tool call, and a
strategy that fails rejects instead of executing.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot import failpoints
from bot.agent.snapshot import (
    CHAT_GENERATOR_STAGE,
    DECIDE_STAGE,
    REVIEW_STAGE,
    TOOL_INVOKER_STAGE,
    AgentSnapshot,
    SnapshotError,
)
from bot.agent.tool_runner import DEFAULT_MAX_CONCURRENT_TOOLS, ExecutionLedger, ToolRunner
from bot.aio import call_store as _call_store
from bot.aio import run_sync
from bot.hitl.apply import apply_decisions, close_dangling_tool_calls
from bot.hitl.blocking import ConfirmationStrategy
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.serialization import component_from_dict, component_to_dict
from bot.hitl.strategy_map import strategies_from_dict, strategies_to_dict, validate_strategy_keys
from bot.hooks.breakpoints import (
    CHAT_GENERATOR,
    TOOL_INVOKER,
    AgentBreakpoint,
    Breakpoint,
    BreakpointException,
    as_breakpoint,
)
from bot.hooks.events import STOP_RUN_KEY, stop_reason
from bot.hooks.registry import AgentHooks, HookMap, hooks_from_dict
from bot.hooks.review import ToolResultReview, apply_reviews
from bot.llm.base import RUNNING_TOOLS, StreamingChunk, emit_chunk
from bot.memory.context import with_memories
from bot.messages import ChatMessage, ChatRole, new_id
from bot.redaction import scrub
from bot.tools import InvalidToolArguments, Tool, Toolset, flatten_tools, tools_fingerprint

logger = logging.getLogger(__name__)

RESERVED_STATE_KEYS = frozenset({"step_count", "token_usage", "tool_call_counts", "exit_reason"})
TRUNCATED_CALL_RESULT = "Not run: the model's reply was cut off (finish_reason={reason}); the call may be incomplete."
MISSING_RESULT = "No result was recorded for this tool call."
EMPTY_EXIT_REASON = "empty"
"""The ``exit_reason`` of a run whose model gave an empty reply (no text, no tool calls) twice in a row."""
MAX_EMPTY_RETRIES = 1
NO_INPUT_EXIT_REASON = "no_input"
"""The ``exit_reason`` of a run given no messages at all (no input, prompt or history): the model is not called."""
MAX_STEPS_WARNING = "Agent reached maximum agent steps of %s, stopping."
NO_TOOLS_WARNING = (
    "No tools provided to the Agent. The Agent will behave like a ChatGenerator and only return text "
    "responses. To enable tool usage, pass tools directly to the Agent, not to the chat_generator."
)
ONLY_SYSTEM_WARNING = "All messages provided to the Agent component are system messages. This is not recommended."
STOPPED_RESULT = "Not run: the run was stopped ({reason})."
"""The result of a call that a stop kept from running (a hook's ``stop()`` or the ``stop_run`` state key)."""
INVALID_ARGUMENTS_RESULT = "{error}. Nothing was run: call the tool again with corrected arguments."
_TYPE_NAMES: dict[str, type] = {t.__name__: t for t in (list, dict, str, int, float, bool)}
_UNSAFE_FILE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass
class _RunContext:
    run_id: str
    messages: list[ChatMessage]
    state: dict[str, Any]
    history_id: str | None
    store: Any
    step_count: int = 0
    fence: Any = None
    """``chat_message_store_kwargs["fence"]``: passed to every history write of the run (see storage's RunFence)."""
    token_usage: dict[str, int] = field(default_factory=dict)
    tool_call_counts: dict[str, int] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    """The tools of this run by name: the agent's, or those given to ``run(tools=...)``."""
    streaming_callback: Callable[..., Any] | None = None
    """This run's callback (``run(streaming_callback=...)``); the agent's own when ``None``."""
    visits: dict[str, int] = field(default_factory=dict)
    """Visits of ``chat_generator`` and ``tool_invoker`` over the whole run (breakpoints count them)."""
    break_point: Breakpoint | None = None
    resumed_at: tuple[str, int] | None = None
    """The breakpoint visit this run resumed from: it does not stop there again."""


class Agent:
    """An LLM agent that calls tools, with per-tool confirmation strategies.

    >>> agent = Agent(OpenAIChatGenerator(), tools=[delete_file],
    ...               confirmation_strategies={"delete_file": BreakpointConfirmationStrategy()})
    >>> try:
    ...     agent.run([ChatMessage.from_user("delete old.log")])
    ... except HITLBreakpointException as pause:
    ...     result = agent.run([], snapshot=pause.snapshot, tool_execution_decisions=[
    ...         ToolExecutionDecision("delete_file", execute=True, tool_call_id=pause.tool_call_id)])
    """

    def __init__(
        self,
        chat_generator: Any,
        tools: Sequence[Tool | Toolset] | Toolset | None = None,
        system_prompt: str | None = None,
        exit_conditions: list[str] | None = None,
        state_schema: dict[str, dict[str, Any]] | None = None,
        max_agent_steps: int = 100,
        streaming_callback: Callable[..., Any] | None = None,
        raise_on_tool_invocation_failure: bool = False,
        confirmation_strategies: dict[str | tuple[str, ...], ConfirmationStrategy] | None = None,
        tool_invoker_kwargs: dict[str, Any] | None = None,
        chat_message_store: Any = None,
        hooks: HookMap | None = None,
        enable_pending_tool_recovery: bool = True,
        memory_store: Any = None,
    ) -> None:
        self.chat_generator = chat_generator
        self.tools: list[Tool] = flatten_tools([tools] if isinstance(tools, Toolset) else tools)
        self._tools_by_name = {t.name: t for t in self.tools}
        self.system_prompt = system_prompt
        self.exit_conditions = list(exit_conditions or ["text"])
        valid_exits = ["text", *self._tools_by_name]
        if any(c not in valid_exits for c in self.exit_conditions):
            raise ValueError(  # Haystack's text: its users' tests match on it
                f"Invalid exit conditions provided: {self.exit_conditions}. "
                f"Valid exit conditions must be a subset of {valid_exits}. "
                "Ensure that each exit condition corresponds to either 'text' or a valid tool name."
            )
        self.state_schema = dict(state_schema or {})
        clash = RESERVED_STATE_KEYS & set(self.state_schema)
        if clash:
            raise ValueError(f"State keys {sorted(clash)} are reserved by the agent and cannot be redefined.")
        if max_agent_steps < 0:
            raise ValueError("max_agent_steps must be at least 0")
        self.max_agent_steps = max_agent_steps
        self.streaming_callback = streaming_callback
        self.raise_on_tool_invocation_failure = raise_on_tool_invocation_failure
        self.confirmation_strategies = dict(confirmation_strategies or {})
        validate_strategy_keys(self.confirmation_strategies, list(self._tools_by_name))
        # Human-in-the-loop is one hook: confirmation_strategies is the shorthand for a ConfirmationHook.
        self._hooks = AgentHooks(hooks, self.confirmation_strategies)
        if self._hooks.confirmation is not None and self._hooks.confirmation_registered:
            validate_strategy_keys(self._hooks.confirmation.confirmation_strategies, list(self._tools_by_name))
        self.hooks = self._hooks.as_mapping()
        self.enable_pending_tool_recovery = enable_pending_tool_recovery
        self.tool_invoker_kwargs = dict(tool_invoker_kwargs or {})
        self.chat_message_store = chat_message_store
        self.memory_store = memory_store
        """A :class:`bot.memory.MemoryStore`: matching memories reach the model with each new run."""
        self.tools_fingerprint = tools_fingerprint(self.tools)
        # Inspected once: which keywords the generator takes (a Haystack-style ``run(messages)`` has none).
        generator_run = getattr(chat_generator, "run", None) or chat_generator.run_async
        self._generator_takes_tools = _accepts(generator_run, "tools")
        self._check_generator_takes(self.tools)
        if not self.tools:
            logger.warning(NO_TOOLS_WARNING)

    # --- public API ------------------------------------------------------------------------------

    def replace_tools(self, tools: Sequence[Tool | Toolset]) -> None:
        """Offer ``tools`` from the next run on (tools from MCP servers that connect or change while running).

        A snapshot resumes with the tools it was paused with, found by name: one whose tool is gone or whose
        schema changed is refused, as across a restart.
        """
        flat = flatten_tools(tools)
        self._check_generator_takes(flat)
        self.tools = flat
        self._tools_by_name = {t.name: t for t in flat}
        self.tools_fingerprint = tools_fingerprint(flat)

    def run(self, messages: list[ChatMessage], **kwargs: Any) -> dict[str, Any]:
        """Sync twin of :meth:`run_async`; works whether or not an event loop is running.

        Takes the keywords of :meth:`run_async`; streaming callbacks (the agent's and the run's) must be plain
        functions.
        """
        _check_callback_kinds(self.streaming_callback, kwargs.get("streaming_callback"), requires_async=False)
        return run_sync(self._run(messages, **kwargs))

    async def run_async(self, messages: list[ChatMessage], **kwargs: Any) -> dict[str, Any]:
        """Run the agent; see :meth:`_run` for the keywords. Streaming callbacks (the agent's, the run's) are async."""
        _check_callback_kinds(self.streaming_callback, kwargs.get("streaming_callback"), requires_async=True)
        return await self._run(messages, **kwargs)

    async def _run(
        self,
        messages: list[ChatMessage],
        *,
        snapshot: AgentSnapshot | None = None,
        tool_execution_decisions: list[ToolExecutionDecision] | None = None,
        system_prompt: str | None = None,
        tools: Sequence[Tool | str] | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
        chat_message_store_kwargs: dict[str, Any] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        run_id: str | None = None,
        streaming_callback: Callable[..., Any] | None = None,
        break_point: Breakpoint | AgentBreakpoint | None = None,
        tool_result_reviews: list[ToolResultReview] | None = None,
        memory_store_kwargs: dict[str, Any] | None = None,
        **state: Any,
    ) -> dict[str, Any]:
        """Run the agent until an exit condition, or raise :class:`HITLBreakpointException` to pause.

        ``exit_reason`` says why the run ended: ``"text"`` (a reply without tool calls, whatever
        ``exit_conditions`` holds), the name of an exit-condition tool that succeeded, ``"length"`` /
        ``"content_filter"`` (the reply was cut off), ``"empty"`` (two empty replies in a row) or
        ``"max_agent_steps"``.

        Resume a paused run with ``run_async([], snapshot=..., tool_execution_decisions=[...])``: the
        LLM is skipped, the decisions are applied, the approved calls run, and the loop continues.
        A step whose results were held for review (``after_tool``) resumes with ``tool_result_reviews``.

        ``break_point`` stops the run before a component's visit with :class:`BreakpointException`;
        ``run_async([], snapshot=exc.snapshot)`` continues from there. Hooks (``hooks=`` of the agent) run
        at their points; a stop (``event.stop(reason)`` or the ``stop_run`` state key) ends the run with
        ``exit_reason == reason``. ``on_finish`` hooks run at every end, not at a pause.

        ``tools`` replaces the agent's tools for this run: ``Tool`` objects (new ones too) or names of
        the agent's own tools. A snapshot resumes with the tools it was paused with (pass the new ones
        again). With no messages at all (no input, prompt or history) the model is not called and
        ``exit_reason`` is ``"no_input"``.

        With a ``memory_store``, a new run first searches it (``memory_store_kwargs``: ``user_id``, ``run_id``,
        ``agent_id``, ``search_criteria``; see :mod:`bot.memory.context`) and the matches go to the model as
        one system message after the system prompt, never written to the thread's history.
        ``streaming_callback`` (else the one given to the agent) gets every chunk the model streams, one
        chunk naming the tools a step runs (``meta["running_tools"]``) and one chunk with
        ``tool_call_result`` per tool call that ran, once its result is stored.
        """
        store_kwargs = dict(chat_message_store_kwargs or {})
        offered = self._select_tools(tools)
        if snapshot is not None:
            if messages:
                raise ValueError("Pass no new messages when resuming from a snapshot.")
            if state:
                # The snapshot carries the run's state; silently dropping new values would surprise.
                raise ValueError(f"State {sorted(state)} cannot be passed when resuming; the snapshot holds it.")
            offered = self._snapshot_tools(snapshot, tools, offered)
            ctx = self._context_from_snapshot(snapshot, store_kwargs, offered)
            ctx.tools, ctx.streaming_callback = {t.name: t for t in offered}, streaming_callback
            ctx.break_point = as_breakpoint(break_point)
            exit_reason = await self._resume(
                ctx, snapshot, tool_execution_decisions, tool_result_reviews, confirmation_strategy_context
            )
        else:
            if tool_execution_decisions or tool_result_reviews:
                raise ValueError("tool_execution_decisions and tool_result_reviews need a snapshot.")
            ctx = await self._new_context(messages, system_prompt, store_kwargs, run_id, state)
            ctx.tools, ctx.streaming_callback = {t.name: t for t in offered}, streaming_callback
            ctx.break_point = as_breakpoint(break_point)
            exit_reason = None
            if not ctx.messages:
                exit_reason = NO_INPUT_EXIT_REASON  # as in Haystack: nothing to answer, the model is not called
            elif all(m.role == ChatRole.SYSTEM for m in ctx.messages):
                logger.warning(ONLY_SYSTEM_WARNING)
            if exit_reason is None:
                ctx.messages = await with_memories(self.memory_store, ctx.messages, memory_store_kwargs)
        if exit_reason is None:
            exit_reason = await self._loop(ctx, offered, generation_kwargs, confirmation_strategy_context)
        exit_reason = await self._hooks.on_finish(ctx.run_id, ctx.state, ctx.messages, exit_reason)
        return self._result(ctx, exit_reason)

    async def _resume(
        self,
        ctx: _RunContext,
        snapshot: AgentSnapshot,
        decisions: list[ToolExecutionDecision] | None,
        reviews: list[ToolResultReview] | None,
        strategy_context: dict[str, Any] | None,
    ) -> str | None:
        """Continue a snapshot's step from where it stopped; the ``exit_reason`` if that ends the run."""
        if reviews and snapshot.stage != REVIEW_STAGE:
            raise ValueError("tool_result_reviews apply only to a step paused for review.")
        if decisions and snapshot.stage not in (DECIDE_STAGE,):
            raise ValueError(f"tool_execution_decisions do not apply to a snapshot taken at {snapshot.stage}.")
        if snapshot.stage == CHAT_GENERATOR_STAGE:
            ctx.resumed_at = (CHAT_GENERATOR, ctx.visits.get(CHAT_GENERATOR, 0))
            return None
        if snapshot.stage == TOOL_INVOKER_STAGE:
            ctx.visits[TOOL_INVOKER] = ctx.visits.get(TOOL_INVOKER, 0) + 1
            return await self._act(ctx, snapshot.step_message, strategy_context)
        if snapshot.stage == REVIEW_STAGE:
            released = apply_reviews(snapshot.held_results, snapshot.pending_tool_calls, reviews or [])
            await self._append(ctx, released)
            exit_tool = self._exit_tool(snapshot.step_message.tool_calls, dict(enumerate(released)))
            return stop_reason(ctx.state) or exit_tool
        decided = [*snapshot.decisions, *(decisions or [])]
        return await self._finish_step(ctx, snapshot.step_message, decided, strategy_context)

    # --- the loop ----------------------------------------------------------------------------------

    async def _loop(
        self,
        ctx: _RunContext,
        offered: list[Tool],
        generation_kwargs: dict[str, Any] | None,
        strategy_context: dict[str, Any] | None,
    ) -> str:
        empty_replies = 0
        while ctx.step_count < self.max_agent_steps:
            stopped = stop_reason(ctx.state)
            if stopped:
                return stopped
            await self._check_break(ctx, CHAT_GENERATOR, list(ctx.messages), [])
            history = self._history(ctx)
            stopped = await self._hooks.before_llm(ctx.run_id, ctx.state, history)
            if stopped:
                return stopped
            ctx.visits[CHAT_GENERATOR] = ctx.visits.get(CHAT_GENERATOR, 0) + 1
            reply = await self._generate(ctx, history, offered, generation_kwargs)
            ctx.step_count += 1
            _add_usage(ctx.token_usage, reply.meta.get("usage"))
            stopped = await self._hooks.after_llm(ctx.run_id, ctx.state, ctx.messages, reply)
            if stopped:
                await self._stop_after_llm(ctx, reply, stopped)
                return stopped
            finish_reason = reply.meta.get("finish_reason")
            cut_off = finish_reason in ("length", "content_filter")
            if not reply.tool_calls:
                if reply.text and reply.text.strip():
                    # As in Haystack: a reply without tool calls always ends the run; exit_conditions
                    # only add tools whose success ends it too.
                    await self._append(ctx, [reply])
                    return finish_reason if cut_off else "text"
                if cut_off:
                    return finish_reason
                empty_replies += 1
                if empty_replies > MAX_EMPTY_RETRIES:
                    logger.warning("the model returned empty replies; stopping", extra={"run_id": ctx.run_id})
                    return EMPTY_EXIT_REASON
                continue  # one empty reply is retried: it is often a transient glitch of the server
            empty_replies = 0
            if cut_off:
                note = TRUNCATED_CALL_RESULT.format(reason=finish_reason)
                await self._append(ctx, close_dangling_tool_calls([reply], note))
                return finish_reason
            await self._check_break(ctx, TOOL_INVOKER, [*ctx.messages, reply], list(reply.tool_calls))
            ctx.visits[TOOL_INVOKER] = ctx.visits.get(TOOL_INVOKER, 0) + 1
            exit_reason = await self._act(ctx, reply, strategy_context)
            if exit_reason is not None:
                return exit_reason
        logger.warning(MAX_STEPS_WARNING, self.max_agent_steps, extra={"run_id": ctx.run_id})
        return "max_agent_steps"

    async def _act(self, ctx: _RunContext, reply: ChatMessage, strategy_context: dict[str, Any] | None) -> str | None:
        """One step's tool calls: decide them (pausing for humans), run them, and say whether the run ends."""
        decisions, pending, first_pause = await self._decide(ctx, reply, strategy_context)
        if pending:
            await self._pause(ctx, reply, decisions, pending, first_pause)
        return await self._finish_step(ctx, reply, decisions, strategy_context)

    def _history(self, ctx: _RunContext) -> list[ChatMessage]:
        """The transcript the model is sent: dangling calls closed, unless the application handles them."""
        if not self.enable_pending_tool_recovery:
            return list(ctx.messages)  # a dangling call reaches the model as it is (and is never run)
        history = close_dangling_tool_calls(ctx.messages, MISSING_RESULT)
        if len(history) != len(ctx.messages):
            logger.warning("closed dangling tool calls before calling the LLM", extra={"run_id": ctx.run_id})
        return history

    async def _stop_after_llm(self, ctx: _RunContext, reply: ChatMessage, reason: str) -> None:
        """Keep the reply of a run stopped at ``after_llm``; its calls never run (and get a result when recovering)."""
        if reply.tool_calls and self.enable_pending_tool_recovery:
            await self._append(ctx, close_dangling_tool_calls([reply], STOPPED_RESULT.format(reason=reason)))
        elif reply.tool_calls or (reply.text and reply.text.strip()):
            await self._append(ctx, [reply])

    async def _check_break(
        self, ctx: _RunContext, component: str, messages: list[ChatMessage], pending: list[Any]
    ) -> None:
        """Raise :class:`BreakpointException` when the run's breakpoint is this component's next visit."""
        point = ctx.break_point
        if point is None or point.component_name != component:
            return
        visit = ctx.visits.get(component, 0)
        if visit != point.visit_count or ctx.resumed_at == (component, visit):
            return
        snapshot = self._snapshot(ctx, messages, pending, stage=component, break_point=point.to_dict())
        folder = point.snapshot_file_path
        file_path = await asyncio.to_thread(_write_snapshot_file, snapshot, folder) if folder else None
        saved = f"; snapshot saved to {file_path}" if file_path else ""
        raise BreakpointException(
            f"Breakpoint before {component} visit {visit} of run {ctx.run_id}{saved}",
            component=component,
            snapshot=snapshot,
            break_point=point,
            snapshot_file_path=file_path,
        )

    def _snapshot(
        self,
        ctx: _RunContext,
        messages: list[ChatMessage],
        pending: list[Any],
        *,
        stage: str,
        decisions: list[ToolExecutionDecision] | None = None,
        held: list[ChatMessage] | None = None,
        break_point: dict[str, Any] | None = None,
    ) -> AgentSnapshot:
        return AgentSnapshot(
            run_id=ctx.run_id,
            messages=messages,
            pending_tool_calls=pending,
            decisions=list(decisions or []),
            state=dict(ctx.state),
            step_count=ctx.step_count,
            token_usage=dict(ctx.token_usage),
            tool_call_counts=dict(ctx.tool_call_counts),
            tools_fingerprint=self._fingerprint(list(ctx.tools.values())),
            tool_descriptions={t.name: t.description for t in ctx.tools.values()},
            tool_bindings={t.name: t.binding for t in ctx.tools.values() if t.binding is not None},
            history_id=ctx.history_id,
            tool_names=list(ctx.tools),
            stage=stage,
            held_results=list(held or []),
            component_visits=dict(ctx.visits),
            break_point=break_point,
        )

    async def _generate(
        self,
        ctx: _RunContext,
        history: list[ChatMessage],
        offered: list[Tool],
        generation_kwargs: dict[str, Any] | None,
    ) -> ChatMessage:
        # As Haystack does: only what is set, and tools (``[]`` when none) only to a generator that takes them.
        kwargs: dict[str, Any] = {"messages": history}
        if self._generator_takes_tools:
            kwargs["tools"] = offered
        if generation_kwargs is not None:
            kwargs["generation_kwargs"] = generation_kwargs
        callback = ctx.streaming_callback or self.streaming_callback
        if callback is not None:
            kwargs["streaming_callback"] = callback
        failpoints.failpoint("before_llm")
        run_async = getattr(self.chat_generator, "run_async", None)
        if run_async is not None:
            output = await run_async(**kwargs)
        else:
            output = await asyncio.to_thread(self.chat_generator.run, **kwargs)
        replies = output.get("replies") or []
        if not replies:
            return ChatMessage.from_assistant(text=None, meta={"finish_reason": "empty"})
        return replies[0]

    async def _decide(
        self, ctx: _RunContext, reply: ChatMessage, strategy_context: dict[str, Any] | None
    ) -> tuple[list[ToolExecutionDecision], list[Any], HITLBreakpointException | None]:
        """Each call through ``before_tool``: user hooks (which may edit arguments), then the ConfirmationHook."""
        decisions: list[ToolExecutionDecision] = []
        pending = []
        first_pause: HITLBreakpointException | None = None
        for call in reply.tool_calls:
            if ctx.state.get(STOP_RUN_KEY):  # stopped: this call and the rest of the step do not run
                decisions.append(_stopped(call, ctx.state[STOP_RUN_KEY]))
                continue
            tool = ctx.tools.get(call.tool_name)
            event = await self._hooks.before_tool(ctx.run_id, ctx.state, ctx.messages, call, tool, strategy_context)
            if event.stopped:
                decisions.append(_stopped(call, ctx.state[STOP_RUN_KEY]))
                continue
            if tool is None:  # an unknown tool cannot run anyway; it gets "not found" without asking anybody
                decisions.append(_approve_unchanged(call))
                continue
            invalid = _invalid_arguments(tool, call)
            if invalid is not None:
                # A call that cannot run is never put to a human: the model learns what to fix.
                decisions.append(invalid)
                continue
            confirmation = self._hooks.confirmation
            outcome = await confirmation.decide(event) if confirmation is not None else None
            runs = outcome is None or (isinstance(outcome, ToolExecutionDecision) and outcome.execute)
            if runs and event.approval_reason is not None:  # a user hook asked a human, and no policy refused
                outcome = HITLBreakpointException(event.approval_reason, tool_name=call.tool_name, tool_call_id=call.id)
            if isinstance(outcome, HITLBreakpointException):
                pending.append(call)
                first_pause = first_pause or outcome
                continue
            decisions.append(outcome or _approve_unchanged(call))
        return decisions, pending, first_pause

    async def _pause(
        self,
        ctx: _RunContext,
        reply: ChatMessage,
        decisions: list[ToolExecutionDecision],
        pending: list[Any],
        first_pause: HITLBreakpointException | None,
    ) -> None:
        snapshot = self._snapshot(ctx, [*ctx.messages, reply], pending, stage=DECIDE_STAGE, decisions=decisions)
        folder = first_pause.snapshot_file_path if first_pause else None
        file_path = await asyncio.to_thread(_write_snapshot_file, snapshot, folder) if folder else None
        names = ", ".join(c.tool_name for c in pending)
        saved = f"; snapshot saved to {file_path}" if file_path else ""
        raise _pause_exception(
            f"{len(pending)} tool call(s) need a human decision: {names}{saved}",
            snapshot,
            pending,
            snapshot_file_path=file_path,
        )

    async def _finish_step(
        self,
        ctx: _RunContext,
        reply: ChatMessage,
        decisions: list[ToolExecutionDecision],
        strategy_context: dict[str, Any] | None = None,
    ) -> str | None:
        """Apply the step's decisions, run the surviving calls, and say whether the run ends (stop or exit tool)."""
        applied = apply_decisions(reply, decisions, ctx.tools)
        await self._append(ctx, applied.messages)
        rejected = {id(c) for c in applied.rejected}
        positions = [i for i, c in enumerate(reply.tool_calls) if id(c) not in rejected]
        keys = [call.id or f"{reply.id}:{pos}" for call, pos in zip(applied.to_execute, positions, strict=True)]
        runner = self._runner(ctx.tools)
        callback = ctx.streaming_callback or self.streaming_callback
        if applied.to_execute:  # tell a streaming callback which tools run now (a status line)
            names = [call.tool_name for call in applied.to_execute]
            await emit_chunk(callback, StreamingChunk(content="", meta={RUNNING_TOOLS: names}))
        results = await runner.run(applied.to_execute, run_id=ctx.run_id, call_keys=keys, state=ctx.state)
        for call in applied.to_execute:
            ctx.tool_call_counts[call.tool_name] = ctx.tool_call_counts.get(call.tool_name, 0) + 1
        results, reviewed = await self._hooks.after_tool(ctx.run_id, ctx.state, ctx.messages, results, strategy_context)
        if reviewed:
            await self._pause_for_review(ctx, results, reviewed)
        await self._append(ctx, results)
        for message in results:  # after the results are stored: a callback that stops the run loses none
            chunk = StreamingChunk(content="", tool_call_result=message.tool_call_result)
            await emit_chunk(callback, chunk)
        stopped = stop_reason(ctx.state)
        if stopped:
            return stopped
        return self._exit_tool(reply.tool_calls, dict(zip(positions, results, strict=True)))

    def _exit_tool(self, calls: list[Any], outcome_by_position: dict[int, ChatMessage]) -> str | None:
        """The exit-condition tool whose call (the step's first such call) succeeded, else ``None``."""
        for position, call in enumerate(calls):
            if call.tool_name in self.exit_conditions:
                result = outcome_by_position.get(position)
                tool_result = result.tool_call_result if result is not None else None
                succeeded = tool_result is not None and not tool_result.error
                return call.tool_name if succeeded else None
        return None

    async def _pause_for_review(self, ctx: _RunContext, results: list[ChatMessage], reviewed: list[Any]) -> None:
        """Hold the step's results (the tools have run) until people review ``reviewed``; raise the pause."""
        snapshot = self._snapshot(ctx, list(ctx.messages), reviewed, stage=REVIEW_STAGE, held=results)
        names = ", ".join(c.tool_name for c in reviewed)
        raise _pause_exception(f"{len(reviewed)} tool result(s) need review: {names}", snapshot, reviewed)

    # --- helpers -----------------------------------------------------------------------------------

    def _runner(self, tools: dict[str, Tool]) -> ToolRunner:
        kwargs = self.tool_invoker_kwargs
        ledger: ExecutionLedger | None = kwargs.get("ledger")
        return ToolRunner(
            tools,
            max_workers=kwargs.get("max_workers", DEFAULT_MAX_CONCURRENT_TOOLS),
            raise_on_failure=self.raise_on_tool_invocation_failure,
            ledger=ledger,
        )

    def _select_tools(self, tools: Sequence[Tool | Toolset | str] | Toolset | None) -> list[Tool]:
        """The run's tools: the agent's, or ``tools`` (``Tool`` objects, toolsets, names of the agent's tools)."""
        if tools is None:
            return self.tools
        items = [tools] if isinstance(tools, Toolset) else list(tools)
        if not self.tools and any(isinstance(i, str) for i in items):
            raise ValueError("No tools were configured for the Agent at initialization.")  # Haystack's text
        unknown = {i for i in items if isinstance(i, str) and i not in self._tools_by_name}
        if unknown:
            raise ValueError(  # Haystack's text
                f"The following tool names are not valid: {unknown}. Valid tool names are: {set(self._tools_by_name)}."
            )
        selected = flatten_tools(self._tools_by_name[i] if isinstance(i, str) else i for i in items)
        self._check_generator_takes(selected)
        return selected

    def _check_generator_takes(self, tools: list[Tool]) -> None:
        if tools and not self._generator_takes_tools:
            raise TypeError(  # Haystack's text
                f"{type(self.chat_generator).__name__} does not accept tools parameter in its run method. "
                "The Agent component requires a chat generator that supports tools."
            )

    def _fingerprint(self, tools: list[Tool]) -> str:
        """The tools' fingerprint; the agent's own tool set reuses the one computed when it was built."""
        own = len(tools) == len(self.tools) and all(self._tools_by_name.get(t.name) is t for t in tools)
        return self.tools_fingerprint if own else tools_fingerprint(tools)

    def _snapshot_tools(
        self, snapshot: AgentSnapshot, tools: Sequence[Tool | Toolset | str] | Toolset | None, selected: list[Tool]
    ) -> list[Tool]:
        """The tools to resume ``snapshot`` with: those given, else the ones it was paused with."""
        if tools is not None:
            return selected
        if snapshot.tool_names is None:  # older snapshots: the agent's tools, or those it had at the pause
            return self._tools_at_legacy_pause(snapshot, selected)
        if snapshot.tool_names == list(self._tools_by_name):
            return self.tools
        missing = [n for n in snapshot.tool_names if n not in self._tools_by_name]
        if missing:
            raise SnapshotError(
                f"Snapshot of run {snapshot.run_id} was paused with tools this agent does not have "
                f"({', '.join(missing)}); pass them again with run(tools=[...])."
            )
        return [self._tools_by_name[n] for n in snapshot.tool_names]

    def _tools_at_legacy_pause(self, snapshot: AgentSnapshot, tools: list[Tool]) -> list[Tool]:
        """The agent's tools, less up to two added since ``snapshot`` (which names none) was paused.

        A snapshot from before ``tool_names`` was recorded carries only the fingerprint of the tools it
        was paused with. Adding a tool to the deployment must not strand every run paused before the
        upgrade: when some subset of today's tools has that exact fingerprint, each of the paused tools is
        still here with the same schema, which is all the fingerprint check protects.
        """
        if snapshot.tools_fingerprint in ("", self._fingerprint(tools)):
            return tools
        for dropped in (1, 2):
            for left_out in itertools.combinations(range(len(tools)), dropped):
                kept = [t for i, t in enumerate(tools) if i not in left_out]
                if tools_fingerprint(kept) == snapshot.tools_fingerprint:
                    return kept
        return tools  # the check that follows refuses it, naming both fingerprints

    async def _new_context(
        self,
        messages: list[ChatMessage],
        system_prompt: str | None,
        store_kwargs: dict[str, Any],
        run_id: str | None,
        state: dict[str, Any],
    ) -> _RunContext:
        initial_state = {k: ([] if spec.get("type") is list else None) for k, spec in self.state_schema.items()}
        unknown = set(state) - set(self.state_schema)
        if unknown:
            raise ValueError(f"Unknown state keys {sorted(unknown)}; declare them in state_schema.")
        initial_state.update(state)
        ctx = _RunContext(
            run_id=run_id or new_id(),
            messages=[],
            state=initial_state,
            history_id=store_kwargs.get("chat_history_id"),
            store=self.chat_message_store,
            fence=store_kwargs.get("fence"),
        )
        prompt = system_prompt or self.system_prompt
        if prompt and not (messages and messages[0].role == ChatRole.SYSTEM):
            ctx.messages.append(ChatMessage.from_system(prompt))
        if ctx.store is not None and ctx.history_id:
            history = await _call_store(ctx.store.retrieve_messages, ctx.history_id, last_k=store_kwargs.get("last_k"))
            ctx.messages.extend(history)
        await self._append(ctx, list(messages))
        return ctx

    def _context_from_snapshot(
        self, snapshot: AgentSnapshot, store_kwargs: dict[str, Any], tools: list[Tool]
    ) -> _RunContext:
        fingerprint = self._fingerprint(tools)
        if snapshot.tools_fingerprint != fingerprint:
            raise SnapshotError(
                f"Snapshot of run {snapshot.run_id} was taken with a different tool set "
                f"(fingerprint {snapshot.tools_fingerprint}, now {fingerprint}); it cannot be resumed."
            )
        # A step that stopped before its reply was handled resumes from the reply (the last message).
        keeps_reply = snapshot.stage in (DECIDE_STAGE, TOOL_INVOKER_STAGE)
        return _RunContext(
            run_id=snapshot.run_id,
            messages=list(snapshot.messages[:-1] if keeps_reply else snapshot.messages),
            state=dict(snapshot.state),
            history_id=store_kwargs.get("chat_history_id", snapshot.history_id),
            store=self.chat_message_store,
            fence=store_kwargs.get("fence"),
            step_count=snapshot.step_count,
            token_usage=dict(snapshot.token_usage),
            tool_call_counts=dict(snapshot.tool_call_counts),
            visits=dict(snapshot.component_visits),
        )

    async def _append(self, ctx: _RunContext, messages: list[ChatMessage]) -> None:
        """Add messages to the transcript and, when a store is configured, persist them first."""
        if not messages:
            return
        if ctx.store is not None and ctx.history_id:
            # A fenced write raises (and writes nothing) once the run is no longer this owner's.
            fenced = {} if ctx.fence is None else {"fence": ctx.fence}
            await _call_store(ctx.store.write_messages, ctx.history_id, messages, **fenced)
        ctx.messages.extend(messages)

    def _result(self, ctx: _RunContext, exit_reason: str) -> dict[str, Any]:
        return {
            **ctx.state,
            "messages": ctx.messages,
            "last_message": ctx.messages[-1] if ctx.messages else None,
            "step_count": ctx.step_count,
            "token_usage": ctx.token_usage,
            "tool_call_counts": ctx.tool_call_counts,
            "exit_reason": exit_reason,
            "run_id": ctx.run_id,
        }

    # --- serialisation -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Serialise in the ``{"type", "init_parameters"}`` shape (tools by import path)."""
        return {
            "type": "bot.agent.Agent",
            "init_parameters": {
                "chat_generator": component_to_dict(self.chat_generator),
                "tools": [t.to_dict() for t in self.tools],
                "system_prompt": self.system_prompt,
                "exit_conditions": self.exit_conditions,
                "state_schema": {
                    k: {**v, "type": v["type"].__name__} if isinstance(v.get("type"), type) else dict(v)
                    for k, v in self.state_schema.items()
                },
                "max_agent_steps": self.max_agent_steps,
                "raise_on_tool_invocation_failure": self.raise_on_tool_invocation_failure,
                "confirmation_strategies": strategies_to_dict(self.confirmation_strategies),
                "tool_invoker_kwargs": {k: v for k, v in self.tool_invoker_kwargs.items() if k != "ledger"},
                "memory_store": None if self.memory_store is None else component_to_dict(self.memory_store),
                "hooks": self._hooks.to_dict(),
                "enable_pending_tool_recovery": self.enable_pending_tool_recovery,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Agent:
        """Inverse of :meth:`to_dict`."""
        params = dict(data["init_parameters"])
        params["chat_generator"] = component_from_dict(params["chat_generator"])
        params["tools"] = [Tool.from_dict(t) for t in params.get("tools") or []]
        params["state_schema"] = {
            k: {**v, "type": _TYPE_NAMES.get(v.get("type"), v.get("type"))}
            for k, v in (params.get("state_schema") or {}).items()
        }
        params["confirmation_strategies"] = strategies_from_dict(params.get("confirmation_strategies") or [])
        if params.get("memory_store") is not None:
            params["memory_store"] = component_from_dict(params["memory_store"])
        params["hooks"] = hooks_from_dict(params.get("hooks"))
        return cls(**params)


def _approve_unchanged(call: Any) -> ToolExecutionDecision:
    return ToolExecutionDecision(
        tool_name=call.tool_name, execute=True, tool_call_id=call.id, final_tool_params=dict(call.arguments)
    )


def _stopped(call: Any, reason: Any) -> ToolExecutionDecision:
    text = STOPPED_RESULT.format(reason=reason if isinstance(reason, str) else "stop_run")
    return ToolExecutionDecision(tool_name=call.tool_name, execute=False, tool_call_id=call.id, feedback=text)


def _invalid_arguments(tool: Tool, call: Any) -> ToolExecutionDecision | None:
    """A rejection naming the wrong fields when ``call``'s arguments do not fit ``tool``, else ``None``."""
    try:
        tool.validate(call.arguments)
    except InvalidToolArguments as exc:
        logger.info(
            "tool call with invalid arguments; not asking anybody",
            extra={"tool": call.tool_name, "fields": sorted(exc.errors)},
        )
        # Validation messages quote the offending values: a secret must not be echoed back.
        feedback = scrub(INVALID_ARGUMENTS_RESULT.format(error=exc), call.arguments)
        return ToolExecutionDecision(tool_name=call.tool_name, execute=False, tool_call_id=call.id, feedback=feedback)
    return None


def _accepts(method: Callable[..., Any], name: str) -> bool:
    """Whether ``method`` takes the keyword ``name`` (or any keyword)."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): assume the full protocol
        return True
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _pause_exception(
    message: str, snapshot: AgentSnapshot, pending: Sequence[Any], *, snapshot_file_path: str | None = None
) -> HITLBreakpointException:
    """The pause to raise, carrying ``snapshot`` and the ``pending`` calls (the first names the pause).

    Built here, not in a local of the frame that raises it: that frame would reach the exception, whose
    traceback reaches the frame, a reference cycle holding the run's frames and history until the next
    full garbage collection (with a thousand runs paused at once, that collection costs more than the runs).
    """
    exc = HITLBreakpointException(
        message, tool_name=pending[0].tool_name, snapshot_file_path=snapshot_file_path, tool_call_id=pending[0].id
    )
    exc.snapshot = snapshot
    exc.pending_tool_calls = list(pending)
    return exc


def _check_callback_kinds(
    init_callback: Callable[..., Any] | None, runtime_callback: Callable[..., Any] | None, *, requires_async: bool
) -> None:
    """Haystack's rule: ``run_async`` takes async streaming callbacks, ``run`` plain ones.

    The agent's own (init) callback is checked first, then the run's, each named in its error as in
    Haystack's ``select_streaming_callback``, whose texts its users' tests match on.
    """
    for which, callback in (("init", init_callback), ("runtime", runtime_callback)):
        if callback is None:
            continue
        is_async = inspect.iscoroutinefunction(callback)
        if requires_async and not is_async:
            raise ValueError(f"The {which} callback must be async compatible.")
        if not requires_async and is_async:
            raise ValueError(f"The {which} callback cannot be a coroutine.")


def _add_usage(total: dict[str, int], usage: dict[str, Any] | None) -> None:
    for key, value in (usage or {}).items():
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _write_snapshot_file(snapshot: AgentSnapshot, folder: str) -> str:
    directory = Path(folder)
    directory.mkdir(parents=True, exist_ok=True)
    # The run id may come from outside (an engine, a chat platform): never let it name another folder.
    run_part = _UNSAFE_FILE_NAME_CHARS.sub("_", snapshot.run_id).lstrip(".") or "run"
    path = directory / f"{run_part}-step{snapshot.step_count:03d}-{snapshot.snapshot_id[:8]}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(snapshot.to_json(), encoding="utf-8")
    tmp.replace(path)
    return str(path)
