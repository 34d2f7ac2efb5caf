"""A chat generator that replays prepared replies: for tests and demos that must not call a model."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from bot.llm.base import LLMError, LocalChatGenerator, finalize_local_reply, tool_names
from bot.messages import ChatMessage
from bot.tools import Tool, Toolset

ScriptedReply = ChatMessage | Callable[[list[ChatMessage]], ChatMessage | str] | BaseException
"""A prepared reply, a callable ``messages -> ChatMessage | str`` that makes one, or an exception to raise."""


class ScriptedChatGenerator(LocalChatGenerator):
    """Replays ``replies`` in order, one per call, and records every call in :attr:`calls`.

    >>> gen = ScriptedChatGenerator([
    ...     ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "a.txt"})]),
    ...     lambda messages: ChatMessage.from_assistant(f"Done: {messages[-1].tool_call_result.result}"),
    ... ])
    >>> gen.run([ChatMessage.from_user("delete a.txt")])["replies"][0].tool_call.tool_name
    'delete_file'
    >>> gen.calls[0]["tools"]
    []

    A callable gets copies of the messages: it may reassign their fields or change their ``meta`` and
    tool-call lists without touching the run's transcript; the nested tool calls, arguments and results
    are shared with the run and must be treated as read-only (as the messages in :attr:`calls`).

    Each reply comes back as a fresh copy with a new ``meta["id"]``, ids for tool calls that have
    none, and ``finish_reason`` / ``usage`` (zeros) unless set. An exception in ``replies`` is
    raised by the call that reaches it (to script failures). Running out raises :class:`LLMError`.
    """

    def __init__(self, replies: Sequence[ScriptedReply]) -> None:
        self.replies: list[ScriptedReply] = list(replies)
        self.calls: list[dict[str, Any]] = []
        self._position = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        """How many replies are left."""
        return len(self.replies) - self._position

    def _reply(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None,
        generation_kwargs: dict[str, Any] | None,
    ) -> ChatMessage:
        # Shallow copies with their own meta dict and tool-call list: a round trip through to_dict for
        # every message of a long history on each call cost ~1.5 ms per cycle in bench/agent_overhead.py.
        copies = [_light_copy(m) for m in messages]
        with self._lock:
            self.calls.append(
                {
                    "messages": copies,
                    "tools": tool_names(tools),
                    "generation_kwargs": dict(generation_kwargs or {}),
                }
            )
            if self._position >= len(self.replies):
                raise LLMError("ScriptedChatGenerator has no more replies")
            scripted = self.replies[self._position]
            self._position += 1
        if isinstance(scripted, BaseException):
            raise scripted
        if isinstance(scripted, ChatMessage):
            reply = scripted
        else:
            # The callable gets its own list of light copies (see _light_copy), not deep copies.
            reply = scripted(list(copies))
            if isinstance(reply, str):
                reply = ChatMessage.from_assistant(reply)
        if not isinstance(reply, ChatMessage):
            raise TypeError(f"A scripted reply must be a ChatMessage, got {type(reply).__name__}.")
        return finalize_local_reply(reply, model="scripted")

    def to_dict(self) -> dict[str, Any]:
        """Serialise the replies; callables and exceptions cannot be serialised and raise ``TypeError``."""
        if not all(isinstance(r, ChatMessage) for r in self.replies):
            raise TypeError(
                "ScriptedChatGenerator.to_dict() can only serialise ChatMessage replies, not callables or exceptions."
            )
        return {
            "type": "bot.llm.ScriptedChatGenerator",
            "init_parameters": {"replies": [r.to_dict() for r in self.replies]},  # type: ignore[union-attr]
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptedChatGenerator:
        """Inverse of :meth:`to_dict` (starts again from the first reply)."""
        return cls([ChatMessage.from_dict(r) for r in data["init_parameters"]["replies"]])


def _light_copy(message: ChatMessage) -> ChatMessage:
    """A copy of ``message`` with its own ``meta`` dict and tool-call list (nested objects are shared)."""
    # Built by hand: copy.copy's protocol costs twice these attribute stores (long histories).
    clone = object.__new__(ChatMessage)
    clone.role = message.role
    clone.text = message.text
    clone.tool_calls = message.tool_calls.copy()
    clone.tool_call_result = message.tool_call_result
    clone.meta = message.meta.copy()
    return clone
