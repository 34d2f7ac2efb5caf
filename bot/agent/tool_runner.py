"""Running the tool calls of one step: concurrently, in call order, at most once per call."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.call_context import CallContext, calling
from bot.hitl.previews import APPROVED_PREVIEW_PARAMETER, takes_approved_preview
from bot.logs import log_context
from bot.messages import ChatMessage, ToolCall
from bot.redaction import scrub
from bot.tools import InvalidToolArguments, Tool, ToolInvocationError

logger = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENT_TOOLS = 4
OUTCOME_UNKNOWN = "outcome unknown: the bot stopped while this tool was running"


@dataclass(frozen=True)
class LedgerClaim:
    """The ledger's answer to "may this call run now?"."""

    granted: bool
    prior_result: str | None = None
    prior_error: bool = True
    approved_preview: str | None = None
    """The approved preview's text (issue 30), given to a tool that takes ``approved_preview``."""


class ExecutionLedger(Protocol):
    """Records each call as ``executing`` before its side effect, so no call ever runs twice."""

    async def begin(self, run_id: str, call_key: str, call: ToolCall) -> LedgerClaim:
        """Claim the call; a refused claim carries what is known of the earlier execution."""
        ...

    async def finish(self, run_id: str, call_key: str, ok: bool, result: str) -> None:
        """Record the outcome of a claimed call."""
        ...


def result_to_text(result: Any) -> str:
    """The text a tool result is given to the LLM as."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


class ToolRunner:
    """Invokes tool calls with a concurrency limit, keeping results in call order."""

    def __init__(
        self,
        tools: Mapping[str, Tool],
        *,
        max_workers: int = DEFAULT_MAX_CONCURRENT_TOOLS,
        raise_on_failure: bool = False,
        ledger: ExecutionLedger | None = None,
    ) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.tools = tools
        self.max_workers = max_workers
        self.raise_on_failure = raise_on_failure
        self.ledger = ledger

    async def run(
        self, calls: Sequence[ToolCall], *, run_id: str, call_keys: Sequence[str], state: dict[str, Any]
    ) -> list[ChatMessage]:
        """Run ``calls`` and return one tool message per call, in call order."""
        if len(calls) == 1 and len(call_keys) == 1:
            # The usual step asks for one tool: no semaphore, task and gather to run it beside nothing.
            return [await self._run_one(calls[0], run_id=run_id, call_key=call_keys[0], state=state)]
        semaphore = asyncio.Semaphore(self.max_workers)

        async def guarded(call: ToolCall, key: str) -> ChatMessage:
            async with semaphore:
                return await self._run_one(call, run_id=run_id, call_key=key, state=state)

        tasks = [asyncio.ensure_future(guarded(c, k)) for c, k in zip(calls, call_keys, strict=True)]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def _run_one(self, call: ToolCall, *, run_id: str, call_key: str, state: dict[str, Any]) -> ChatMessage:
        with log_context(tool=call.tool_name), calling(CallContext(run_id, call_key, call.tool_name)):
            return await self._run_one_bound(call, run_id=run_id, call_key=call_key, state=state)

    async def _run_one_bound(self, call: ToolCall, *, run_id: str, call_key: str, state: dict[str, Any]) -> ChatMessage:
        tool = self.tools.get(call.tool_name)
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            return ChatMessage.from_tool(
                f"Tool '{call.tool_name}' not found. Available tools: {available}", origin=call, error=True
            )
        approved_preview: str | None = None
        if self.ledger is not None:
            claim = await self.ledger.begin(run_id, call_key, call)
            approved_preview = claim.approved_preview
            if not claim.granted:
                logger.warning(
                    "tool call already claimed; not running it again",
                    extra={"run_id": run_id, "call_key": call_key, "tool": call.tool_name},
                )
                return ChatMessage.from_tool(
                    claim.prior_result or OUTCOME_UNKNOWN, origin=call, error=claim.prior_error
                )
        ok, text, exc = await self._invoke(tool, call, state, approved_preview)
        if self.ledger is not None:
            await self.ledger.finish(run_id, call_key, ok, text)
        if exc is not None and self.raise_on_failure:
            raise ToolInvocationError(text, tool_name=call.tool_name) from exc
        return ChatMessage.from_tool(text, origin=call, error=not ok)

    async def _invoke(
        self, tool: Tool, call: ToolCall, state: dict[str, Any], approved_preview: str | None = None
    ) -> tuple[bool, str, BaseException | None]:
        try:
            tool.validate(call.arguments)
        except InvalidToolArguments as exc:
            return False, scrub(str(exc), call.arguments), exc
        kwargs = dict(call.arguments)
        for state_key, param in (tool.inputs_from_state or {}).items():
            if state_key in state:
                kwargs[param] = state[state_key]
        if tool.preview is not None and takes_approved_preview(
            tool
        ):  # issue 30: exactly the approved preview, never the model's value
            kwargs.pop(APPROVED_PREVIEW_PARAMETER, None)
            if approved_preview is not None:
                kwargs[APPROVED_PREVIEW_PARAMETER] = approved_preview
        try:
            result = await tool.invoke_async(**kwargs)
        except Exception as exc:  # a tool's failure is data for the LLM, not a crash of the run
            logger.info("tool failed", extra={"tool": tool.name, "error_type": type(exc).__name__})
            message = f"Error invoking tool '{tool.name}': {type(exc).__name__}: {exc}"
            return False, scrub(message, call.arguments), exc
        _write_outputs_to_state(tool, result, state)
        return True, result_to_text(result), None


def _write_outputs_to_state(tool: Tool, result: Any, state: dict[str, Any]) -> None:
    for state_key, spec in (tool.outputs_to_state or {}).items():
        source = spec.get("source")
        value = result.get(source) if source and isinstance(result, dict) else result
        handler = spec.get("handler")
        if handler is not None:
            state[state_key] = handler(state.get(state_key), value)
        elif isinstance(state.get(state_key), list):
            state[state_key] = [*state[state_key], *(value if isinstance(value, list) else [value])]
        else:
            state[state_key] = value
