"""Test data for the agent tests: module-level tools, a recording tool box, a store and a ledger.

The store and the ledger are small in-memory implementations of the protocols the agent talks to
(``write_messages``/``retrieve_messages`` and ``ExecutionLedger``); they are test data, not mocks of
our own code. The module-level tools exist so that ``Agent.to_dict``/``from_dict`` can import them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.agent import LedgerClaim
from bot.hitl.blocking import BlockingConfirmationStrategy
from bot.hitl.dataclasses import ConfirmationUIResult, ToolExecutionDecision
from bot.hitl.policies import AlwaysAskPolicy
from bot.hitl.ui import ConfirmationUI
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.tools import Tool, tool

# --- module-level tools (importable by path) -----------------------------------------------------


@tool
def lookup_weather(city: str) -> str:
    """Tell the weather in a city.

    :param city: The city name.
    """
    return f"sunny in {city}"


@tool
def delete_file(path: str) -> str:
    """Delete a file in the sandbox.

    :param path: The file to delete.
    """
    return f"deleted {path}"


@tool
def submit_answer(answer: str) -> str:
    """Hand in the final answer and end the run.

    :param answer: The answer.
    """
    return answer


# --- a tool box that records every execution -------------------------------------------------------


@dataclass
class ToolBox:
    """Builds real tools (``@tool``) whose executions are recorded in :attr:`executed`, thread-safely."""

    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, name: str, arguments: dict[str, Any]) -> None:
        """Note one execution."""
        with self._lock:
            self.executed.append((name, dict(arguments)))

    def names(self) -> list[str]:
        """The names of the executed tools, in execution order."""
        return [name for name, _ in self.executed]

    def make(self, name: str, result: Callable[..., Any] | None = None) -> Tool:
        """A tool ``name(target: str, count: int = 1)`` returning ``result(**args)`` or a summary."""

        def function(target: str, count: int = 1) -> Any:
            """Act on a target.

            :param target: What to act on.
            :param count: How many times.
            """
            self.record(name, {"target": target, "count": count})
            if result is not None:
                return result(target=target, count=count)
            return f"{name} done on {target} x{count}"

        return tool(function, name=name, description=f"The {name} tool.")

    def failing(self, name: str, message: str = "disk on fire") -> Tool:
        """A tool ``name(target: str)`` that raises ``RuntimeError(message)``."""

        def function(target: str) -> str:
            """Fail.

            :param target: What to act on.
            """
            self.record(name, {"target": target})
            raise RuntimeError(message)

        return tool(function, name=name, description=f"The failing {name} tool.")


# --- messages ---------------------------------------------------------------------------------------


def call(tool_name: str, call_id: str | None, **arguments: Any) -> ToolCall:
    """A tool call as an LLM would request it."""
    return ToolCall(tool_name=tool_name, arguments=arguments, id=call_id)


def asks(*calls: ToolCall, text: str | None = None, **meta: Any) -> ChatMessage:
    """An assistant reply requesting ``calls``."""
    return ChatMessage.from_assistant(text=text, tool_calls=list(calls), meta=meta or None)


def says(text: str | None, **meta: Any) -> ChatMessage:
    """An assistant text reply (``meta`` e.g. ``finish_reason``, ``usage``)."""
    return ChatMessage.from_assistant(text=text, meta=meta or None)


def approve(c: ToolCall, **final: Any) -> ToolExecutionDecision:
    """Approve ``c``; with ``final`` params, approve an edit."""
    return ToolExecutionDecision(
        tool_name=c.tool_name, execute=True, tool_call_id=c.id, final_tool_params=final or None
    )


def reject(c: ToolCall, feedback: str | None = None) -> ToolExecutionDecision:
    """Reject ``c``."""
    return ToolExecutionDecision(tool_name=c.tool_name, execute=False, tool_call_id=c.id, feedback=feedback)


def dangling_free(messages: Sequence[ChatMessage]) -> bool:
    """Whether every assistant tool call in ``messages`` has a tool result after it (ids only)."""
    open_ids: list[str | None] = []
    for m in messages:
        if m.role == ChatRole.ASSISTANT:
            open_ids.extend(c.id for c in m.tool_calls)
        elif m.role == ChatRole.TOOL and m.tool_call_result is not None:
            origin_id = m.tool_call_result.origin.id
            if origin_id in open_ids:
                open_ids.remove(origin_id)
    return not open_ids


# --- a chat message store ----------------------------------------------------------------------------


class InMemoryChatMessageStore:
    """``write_messages`` / ``retrieve_messages`` over a dict; idempotent by message id; records batches."""

    def __init__(self) -> None:
        self.histories: dict[str, list[ChatMessage]] = {}
        self.batches: list[list[str]] = []
        self._lock = threading.Lock()

    def write_messages(self, chat_history_id: str, messages: Sequence[ChatMessage]) -> int:
        """Append the messages not stored yet; return how many were new."""
        with self._lock:
            history = self.histories.setdefault(chat_history_id, [])
            known = {m.id for m in history}
            new = [ChatMessage.from_dict(m.to_dict()) for m in messages if m.id not in known]
            history.extend(new)
            self.batches.append([m.id for m in messages])
            return len(new)

    def retrieve_messages(self, chat_history_id: str, last_k: int | None = None) -> list[ChatMessage]:
        """The stored messages, oldest first (the last ``last_k`` when given)."""
        with self._lock:
            history = self.histories.get(chat_history_id, [])
            window = history[-last_k:] if last_k else history
            return [ChatMessage.from_dict(m.to_dict()) for m in window]


# --- an execution ledger -----------------------------------------------------------------------------


class InMemoryLedger:
    """An ``ExecutionLedger``: grants the first claim of a call key, refuses any later one.

    ``events`` lists ``("begin", key)`` / ``("finish", key, ok, result)`` in order; ``prior`` pre-loads
    outcomes (``None`` = left ``executing`` by a crash).
    """

    def __init__(self, prior: dict[str, tuple[bool, str] | None] | None = None) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.outcomes: dict[str, tuple[bool, str] | None] = dict(prior or {})

    async def begin(self, run_id: str, call_key: str, call: ToolCall) -> LedgerClaim:
        """Claim ``call_key`` unless it was claimed before."""
        self.events.append(("begin", call_key))
        if call_key in self.outcomes:
            outcome = self.outcomes[call_key]
            if outcome is None:
                return LedgerClaim(granted=False)
            ok, result = outcome
            return LedgerClaim(granted=False, prior_result=result, prior_error=not ok)
        self.outcomes[call_key] = None
        return LedgerClaim(granted=True)

    async def finish(self, run_id: str, call_key: str, ok: bool, result: str) -> None:
        """Record the outcome."""
        self.events.append(("finish", call_key, ok, result))
        self.outcomes[call_key] = (ok, result)


# --- a confirmation UI that answers from a script ---------------------------------------------------


class ScriptedUI(ConfirmationUI):
    """A ``ConfirmationUI`` that returns prepared answers in order and records what it was shown."""

    def __init__(self, answers: Sequence[Any] = ()) -> None:
        self.answers = list(answers)
        self.shown: list[tuple[str, dict[str, Any]]] = []

    def get_user_confirmation(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any]
    ) -> ConfirmationUIResult:
        """Return the next prepared answer."""
        self.shown.append((tool_name, dict(tool_params)))
        return self.answers.pop(0)


def blocking(*answers: Any) -> BlockingConfirmationStrategy:
    """A blocking strategy that always asks and gets ``answers`` from a :class:`ScriptedUI`."""
    return BlockingConfirmationStrategy(AlwaysAskPolicy(), ScriptedUI(answers))
