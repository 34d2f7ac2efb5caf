"""``ConfirmationHook``: human-in-the-loop as one hook at ``before_tool``, driven by confirmation strategies."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from bot.hitl.blocking import ConfirmationStrategy
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.serialization import class_path
from bot.hitl.strategy_map import resolve_strategy, strategies_from_dict, strategies_to_dict
from bot.hooks.events import HookEvent

logger = logging.getLogger(__name__)

StrategyMap = Mapping[str | tuple[str, ...], ConfirmationStrategy]


class ConfirmationHook:
    """Decide each tool call with its confirmation strategy (exact name > tuple > ``"*"``).

    Registered only at ``before_tool``, where it runs after every user hook, so people approve what
    will run. ``Agent(confirmation_strategies=...)`` is its shorthand.

    >>> agent = Agent(gen, tools=[delete_file], hooks={"before_tool": [
    ...     ConfirmationHook({"delete_file": BreakpointConfirmationStrategy()})]})
    """

    def __init__(self, confirmation_strategies: StrategyMap) -> None:
        self.confirmation_strategies = dict(confirmation_strategies)

    async def decide(self, event: HookEvent) -> ToolExecutionDecision | HITLBreakpointException | None:
        """The decision for ``event.tool_call``, a pause asking a human, or ``None`` (no strategy: it runs).

        A strategy that fails rejects the call: a broken confirmation never lets a call run.
        """
        call, tool = event.tool_call, event.tool
        assert call is not None
        strategy = resolve_strategy(self.confirmation_strategies, call.tool_name) if tool is not None else None
        if strategy is None:
            return None
        try:
            decision = await _run_strategy(strategy, tool, call, event.confirmation_strategy_context)
        except HITLBreakpointException as pause:
            return pause
        except Exception as exc:  # fail closed
            logger.exception("confirmation strategy failed; rejecting the call", extra={"tool": call.tool_name})
            return ToolExecutionDecision(
                tool_name=call.tool_name,
                execute=False,
                tool_call_id=call.id,
                feedback=f"Tool execution for '{call.tool_name}' was rejected: the confirmation failed "
                f"({type(exc).__name__}).",
            )
        return replace(decision, tool_name=call.tool_name, tool_call_id=call.id)

    async def __call__(self, event: HookEvent) -> None:
        """As a plain hook: ask for approval when the strategy pauses (the agent calls :meth:`decide`)."""
        outcome = await self.decide(event)
        if isinstance(outcome, HITLBreakpointException):
            event.request_approval(str(outcome))

    def to_dict(self) -> dict[str, Any]:
        """Serialise in the ``{"type", "init_parameters"}`` shape; the strategies as the Agent stores them."""
        return {
            "type": class_path(type(self)),
            "init_parameters": {"confirmation_strategies": strategies_to_dict(self.confirmation_strategies)},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationHook:
        """Inverse of :meth:`to_dict`."""
        params = data.get("init_parameters") or {}
        return cls(strategies_from_dict(params.get("confirmation_strategies") or []) or {})


async def _run_strategy(
    strategy: ConfirmationStrategy, tool: Any, call: Any, context: dict[str, Any] | None
) -> ToolExecutionDecision:
    kwargs = {
        "tool_name": call.tool_name,
        "tool_description": tool.description,
        "tool_params": dict(call.arguments),
        "tool_call_id": call.id,
        "confirmation_strategy_context": context,
    }
    run_async = getattr(strategy, "run_async", None)
    if run_async is not None:
        return await run_async(**kwargs)
    return await asyncio.to_thread(lambda: strategy.run(**kwargs))
