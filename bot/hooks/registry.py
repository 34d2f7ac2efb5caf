"""The hooks of one agent: validated at build time, run at their points, serialised as importable callables."""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bot.aio import is_coroutine_function
from bot.hitl.serialization import callable_path, component_from_dict, component_to_dict, import_path
from bot.hooks.confirmation import ConfirmationHook, StrategyMap
from bot.hooks.events import (
    AFTER_LLM,
    AFTER_TOOL,
    BEFORE_LLM,
    BEFORE_TOOL,
    HOOK_POINTS,
    ON_FINISH,
    HookError,
    HookEvent,
    stop_reason,
)
from bot.messages import ChatMessage, ToolCall
from bot.tools import Tool

Hook = Callable[[HookEvent], Any]
"""A hook: a plain function or a coroutine function taking the :class:`HookEvent` of its point."""
HookMap = Mapping[str, Sequence[Hook]]


class AgentHooks:
    """The hooks of an agent by point, with its one :class:`ConfirmationHook` (the last at ``before_tool``).

    Raises ``ValueError`` for an unknown point, a ``ConfirmationHook`` anywhere but ``before_tool``, or
    two ways of confirming (a ``ConfirmationHook`` and ``confirmation_strategies``, or two hooks).
    """

    def __init__(self, hooks: HookMap | None, confirmation_strategies: StrategyMap | None = None) -> None:
        self.by_point: dict[str, list[Hook]] = {}
        self.confirmation: ConfirmationHook | None = None
        self.confirmation_registered = False
        """Whether the ConfirmationHook was registered in ``hooks`` (not built from the shorthand)."""
        for point, entries in (hooks or {}).items():
            if point not in HOOK_POINTS:
                raise ValueError(f"Unknown hook point {point!r}; the points are {list(HOOK_POINTS)}.")
            if callable(entries) or isinstance(entries, str | bytes):
                raise TypeError(f"hooks[{point!r}] must be a list of hooks.")
            for hook in entries:
                if isinstance(hook, ConfirmationHook):
                    self._set_confirmation(point, hook)
                    continue
                if not callable(hook):
                    raise TypeError(f"A hook at {point!r} must be callable, not {type(hook).__name__}.")
                self.by_point.setdefault(point, []).append(hook)
        if confirmation_strategies:
            if self.confirmation is not None:
                raise ValueError("Pass confirmation_strategies or a ConfirmationHook, not both.")
            self.confirmation = ConfirmationHook(confirmation_strategies)

    def _set_confirmation(self, point: str, hook: ConfirmationHook) -> None:
        if point != BEFORE_TOOL:
            raise ValueError(f"ConfirmationHook can only be registered at '{BEFORE_TOOL}', not at '{point}'.")
        if self.confirmation is not None:
            raise ValueError("Only one ConfirmationHook can be registered.")
        self.confirmation = hook
        self.confirmation_registered = True

    def as_mapping(self) -> dict[str, list[Hook]]:
        """Every point's hooks in the order they run (the ConfirmationHook last at ``before_tool``)."""
        mapping = {point: list(hooks) for point, hooks in self.by_point.items()}
        if self.confirmation is not None:
            mapping.setdefault(BEFORE_TOOL, []).append(self.confirmation)
        return mapping

    async def fire(self, point: str, event: HookEvent) -> None:
        """Run the user hooks of ``point`` in list order (sync ones in a worker thread)."""
        for hook in self.by_point.get(point, ()):
            if _is_async(hook):
                await hook(event)
                continue
            outcome = await asyncio.to_thread(hook, event)
            if inspect.isawaitable(outcome):
                await outcome

    # --- the points -----------------------------------------------------------------------------------

    async def before_llm(self, run_id: str, state: dict[str, Any], history: list[ChatMessage]) -> str | None:
        """Let hooks change ``history`` (what the model sees) in place; the stop reason, if one stopped."""
        if BEFORE_LLM in self.by_point:
            await self.fire(BEFORE_LLM, HookEvent(BEFORE_LLM, run_id=run_id, state=state, messages=history))
        return stop_reason(state)

    async def after_llm(
        self, run_id: str, state: dict[str, Any], messages: Sequence[ChatMessage], reply: ChatMessage
    ) -> str | None:
        """Show hooks a copy of the reply (they cannot change it); the stop reason, if one stopped."""
        if AFTER_LLM in self.by_point:
            event = HookEvent(
                AFTER_LLM, run_id=run_id, state=state, messages=tuple(messages), reply=copy.deepcopy(reply)
            )
            await self.fire(AFTER_LLM, event)
        return stop_reason(state)

    async def before_tool(
        self,
        run_id: str,
        state: dict[str, Any],
        messages: Sequence[ChatMessage],
        call: ToolCall,
        tool: Tool | None,
        context: dict[str, Any] | None,
    ) -> HookEvent:
        """Run the user hooks for one call; they may change ``call.arguments`` and nothing else of it."""
        view = ToolCall(tool_name=call.tool_name, arguments=call.arguments, id=call.id)
        event = HookEvent(
            BEFORE_TOOL,
            run_id=run_id,
            state=state,
            messages=tuple(messages),
            tool_call=view,
            tool=tool,
            confirmation_strategy_context=context,
        )
        await self.fire(BEFORE_TOOL, event)
        if view.tool_name != call.tool_name or view.id != call.id:
            raise HookError(f"A before_tool hook may change only the arguments of call {call.id!r}, not its tool or id")
        if view.arguments is not call.arguments:
            if not isinstance(view.arguments, dict):
                raise HookError("A before_tool hook replaced the arguments with something that is not a dict.")
            call.arguments = view.arguments
        return event

    async def after_tool(
        self,
        run_id: str,
        state: dict[str, Any],
        messages: Sequence[ChatMessage],
        results: list[ChatMessage],
        context: dict[str, Any] | None,
    ) -> tuple[list[ChatMessage], list[ToolCall]]:
        """Fire once per result: the results as hooks left them, and the calls whose results await review."""
        reviewed: list[ToolCall] = []
        if AFTER_TOOL not in self.by_point:
            return results, reviewed
        final: list[ChatMessage] = []
        for message in results:
            outcome = message.tool_call_result
            assert outcome is not None
            origin = outcome.origin
            event = HookEvent(
                AFTER_TOOL,
                run_id=run_id,
                state=state,
                messages=tuple(messages),
                tool_call=ToolCall(tool_name=origin.tool_name, arguments=dict(origin.arguments), id=origin.id),
                result=outcome.result,
                error=outcome.error,
                confirmation_strategy_context=context,
            )
            await self.fire(AFTER_TOOL, event)
            if event.result != outcome.result:
                message = ChatMessage.from_tool(event.result or "", origin=origin, error=outcome.error)
            final.append(message)
            if event.review_reason is not None:
                reviewed.append(origin)
        return final, reviewed

    async def on_finish(
        self, run_id: str, state: dict[str, Any], messages: Sequence[ChatMessage], exit_reason: str
    ) -> str:
        """Run the ``on_finish`` hooks; a stop there replaces the ``exit_reason``."""
        stop_reason(state)  # a stop already spent must not rename the end
        if ON_FINISH not in self.by_point:
            return exit_reason
        last = messages[-1] if messages else None
        event = HookEvent(
            ON_FINISH,
            run_id=run_id,
            state=state,
            messages=tuple(messages),
            reply=copy.deepcopy(last) if last is not None else None,
            exit_reason=exit_reason,
        )
        await self.fire(ON_FINISH, event)
        return stop_reason(state) or exit_reason

    # --- serialisation --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, list[Any]]:
        """Each point's hooks: an importable function as its dotted path, an object in the component shape.

        The ConfirmationHook built from ``confirmation_strategies`` is left to that parameter.
        """
        data: dict[str, list[Any]] = {}
        for point, hooks in self.by_point.items():
            data[point] = [_hook_to_data(h) for h in hooks]
        if self.confirmation is not None and self.confirmation_registered:
            data.setdefault(BEFORE_TOOL, []).append(component_to_dict(self.confirmation))
        return data


def hooks_from_dict(data: Mapping[str, Sequence[Any]] | None) -> dict[str, list[Hook]]:
    """Inverse of :meth:`AgentHooks.to_dict`: import each hook again."""
    return {point: [_hook_from_data(entry) for entry in entries] for point, entries in (data or {}).items()}


def _hook_to_data(hook: Hook) -> Any:
    if inspect.isfunction(hook) or inspect.ismethod(hook) or inspect.isbuiltin(hook):
        return callable_path(hook)
    if callable(getattr(hook, "to_dict", None)):
        return component_to_dict(hook)
    raise ValueError(f"Hook {hook!r} cannot be serialised: use an importable function or an object with to_dict().")


def _hook_from_data(entry: Any) -> Hook:
    if isinstance(entry, str):
        hook = import_path(entry)
        if not callable(hook):
            raise TypeError(f"{entry!r} is not callable.")
        return hook
    return component_from_dict(entry)


def _is_async(hook: Hook) -> bool:
    # An object whose __call__ is a coroutine function is async too.
    return is_coroutine_function(hook) or is_coroutine_function(type(hook).__call__)
