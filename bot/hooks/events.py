"""The event a hook receives: what applies at its point of the agent loop, and what it may change there."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.messages import ChatMessage, ToolCall
    from bot.tools import Tool

BEFORE_LLM = "before_llm"
AFTER_LLM = "after_llm"
BEFORE_TOOL = "before_tool"
AFTER_TOOL = "after_tool"
ON_FINISH = "on_finish"
HOOK_POINTS = (BEFORE_LLM, AFTER_LLM, BEFORE_TOOL, AFTER_TOOL, ON_FINISH)
"""The points of the loop where hooks run, in the order a step reaches them."""

STOP_RUN_KEY = "stop_run"
"""The state key that ends the run (as in Haystack): its value becomes the ``exit_reason``."""
DEFAULT_STOP_REASON = "stopped"
"""The ``exit_reason`` when ``stop_run`` is set to something that is not a non-empty string."""


class HookError(ValueError):
    """A hook changed something its point does not allow (the tool's name, the call id)."""


class HookEvent:
    """What a hook sees at one point, and the handles it may use there.

    - ``run_id``, ``state`` (the run's state dict: changes stay), ``point``.
    - ``messages``: at ``before_llm`` the list the model will see (change it in place); elsewhere a
      read-only tuple of the transcript.
    - ``reply`` (``after_llm``, ``on_finish``): a copy of the model's reply; changing it changes nothing.
    - ``tool_call`` (``before_tool``, ``after_tool``): its ``arguments`` dict may be changed in place at
      ``before_tool``; ``tool`` is the ``Tool`` it names (``None`` for an unknown tool).
    - ``result`` (``after_tool``): the text the model will see; assignable there (a ``str``).
    - ``exit_reason`` (``on_finish``).
    - ``stop(reason)``: end the run with ``exit_reason == reason`` (the same as setting ``state["stop_run"]``).
    - ``request_approval()`` at ``before_tool`` and ``request_review()`` at ``after_tool`` ask a human.

    Any other assignment raises ``AttributeError``.

    >>> def redact(event: HookEvent) -> None:
    ...     event.tool_call.arguments["path"] = event.tool_call.arguments["path"].strip()
    >>> agent = Agent(gen, tools=[delete_file], hooks={"before_tool": [redact]})
    """

    __slots__ = (
        "point",
        "run_id",
        "state",
        "messages",
        "reply",
        "tool_call",
        "tool",
        "result",
        "error",
        "exit_reason",
        "confirmation_strategy_context",
        "approval_reason",
        "review_reason",
        "_sealed",
    )

    def __init__(
        self,
        point: str,
        *,
        run_id: str,
        state: dict[str, Any],
        messages: list[ChatMessage] | Sequence[ChatMessage],
        reply: ChatMessage | None = None,
        tool_call: ToolCall | None = None,
        tool: Tool | None = None,
        result: str | None = None,
        error: bool = False,
        exit_reason: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> None:
        init = object.__setattr__
        init(self, "_sealed", False)
        self.point = point
        self.run_id = run_id
        self.state = state
        self.messages = messages
        self.reply = reply
        self.tool_call = tool_call
        self.tool = tool
        self.result = result
        self.error = error
        self.exit_reason = exit_reason
        self.confirmation_strategy_context = confirmation_strategy_context
        self.approval_reason: str | None = None
        """Set by :meth:`request_approval`: why a human must approve the call."""
        self.review_reason: str | None = None
        """Set by :meth:`request_review`: why a human must review the result."""
        init(self, "_sealed", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if self._sealed:
            if name != "result" or self.point != AFTER_TOOL:
                raise AttributeError(f"A hook cannot change {name!r} at {self.point}.")
            if not isinstance(value, str):
                raise TypeError(f"event.result must be a str, not {type(value).__name__}.")
        object.__setattr__(self, name, value)

    def stop(self, reason: str) -> None:
        """End the run with ``exit_reason == reason`` (see the agent for what stops at each point)."""
        if not isinstance(reason, str) or not reason:
            raise ValueError("A stop reason must be a non-empty string.")
        self.state[STOP_RUN_KEY] = reason

    @property
    def stopped(self) -> bool:
        """Whether the run has been asked to stop (by ``stop()`` or the ``stop_run`` state key)."""
        return bool(self.state.get(STOP_RUN_KEY))

    def request_approval(self, reason: str = "a hook asked for approval") -> None:
        """At ``before_tool``: pause the run until a human approves, edits or rejects this call."""
        if self.point != BEFORE_TOOL:
            raise AttributeError(f"Approval can be requested only at {BEFORE_TOOL}, not at {self.point}.")
        object.__setattr__(self, "approval_reason", reason)

    def request_review(self, reason: str = "a hook asked for review") -> None:
        """At ``after_tool``: hold this result until a human approves, edits or rejects it."""
        if self.point != AFTER_TOOL:
            raise AttributeError(f"Review can be requested only at {AFTER_TOOL}, not at {self.point}.")
        object.__setattr__(self, "review_reason", reason)

    def __repr__(self) -> str:
        return f"HookEvent(point={self.point!r}, run_id={self.run_id!r})"


def stop_reason(state: dict[str, Any]) -> str | None:
    """Take the ``stop_run`` key out of ``state``: the ``exit_reason`` it asks for, or ``None``."""
    value = state.pop(STOP_RUN_KEY, None)
    if not value:
        return None
    return value if isinstance(value, str) else DEFAULT_STOP_REASON
