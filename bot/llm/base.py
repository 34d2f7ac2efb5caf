"""The contract every chat generator honours: the protocol, streaming chunks and errors.

A chat generator turns a conversation (a list of :class:`~bot.messages.ChatMessage`) and the tools
on offer into replies. Every reply carries ``meta["usage"]`` and ``meta["finish_reason"]`` so the
agent can count tokens and tell why the model stopped.
"""

from __future__ import annotations

import copy
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bot.messages import ChatMessage, ToolCall, ToolCallResult, new_id
from bot.tools import Tool, Toolset, flatten_tools


class LLMError(Exception):
    """The model call failed: timeout, connection error, or an HTTP error left after the client's retries.

    The message says what happened in one sentence and never contains the API key. ``status_code``
    is the HTTP status when the server answered, else ``None``. ``reason``, when set, is a short phrase
    fit to show people in a chat ("the model server at http://127.0.0.1:1/v1 could not be reached").
    """

    def __init__(self, message: str, *, status_code: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.reason = reason


class LLMResponseError(LLMError):
    """The model answered, but malformed: e.g. tool-call arguments that are not a JSON object."""


@dataclass(frozen=True)
class StreamingChunk:
    """One piece of a streamed reply, handed to a ``streaming_callback`` as it arrives.

    ``tool_call_deltas`` holds plain dicts ``{"index", "id", "name", "arguments"}``: the name and id
    come in the first delta of a call, argument fragments in the later ones. An agent hands its callback
    one more chunk per tool call it ran, with ``tool_call_result`` set (as Haystack's ToolInvoker does),
    and before running a step's calls one chunk whose ``meta[RUNNING_TOOLS]`` names them.
    """

    content: str
    tool_call_deltas: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    tool_call_result: ToolCallResult | None = None


RUNNING_TOOLS = "running_tools"
"""``meta`` key of the chunk an agent sends right before it runs tool calls: their names, in order."""

StreamingCallback = Callable[[StreamingChunk], None] | Callable[[StreamingChunk], Awaitable[None]]
"""A sync or async callable that receives each :class:`StreamingChunk`."""


@runtime_checkable
class ChatGenerator(Protocol):
    """Anything that answers a conversation with ``{"replies": [ChatMessage]}``.

    >>> generator.run([ChatMessage.from_user("hi")])["replies"][0].text
    """

    def run(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Answer ``messages`` from sync code (works inside or outside a running event loop)."""
        ...

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Answer ``messages`` from async code."""
        ...


async def emit_chunk(callback: StreamingCallback | None, chunk: StreamingChunk) -> None:
    """Hand ``chunk`` to ``callback``, awaiting it when it is async."""
    if callback is None:
        return
    result = callback(chunk)
    if inspect.isawaitable(result):
        await result


ZERO_USAGE: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def finalize_local_reply(reply: ChatMessage, *, model: str) -> ChatMessage:
    """A fresh copy of a locally made reply with the meta every generator promises.

    The copy gets a new ``meta["id"]`` (stores dedupe by id, so replaying one object twice must not
    collide), an id for every tool call that lacks one (decisions bind to tool-call ids), and
    ``finish_reason`` / ``usage`` / ``model`` unless the reply already sets them.
    """
    # One message, copied field by field: a to_dict()/from_dict() round trip deep-copied everything twice.
    meta = _fresh(reply.meta)
    meta["id"] = new_id()
    result = reply.tool_call_result
    fresh = ChatMessage(
        role=reply.role,
        text=reply.text,
        tool_calls=[
            ToolCall(tc.tool_name, _fresh(tc.arguments), tc.id or f"call_{new_id()[:24]}") for tc in reply.tool_calls
        ],
        tool_call_result=ToolCallResult.from_dict(result.to_dict()) if result else None,
        meta=meta,
    )
    fresh.meta.setdefault("finish_reason", "tool_calls" if fresh.tool_calls else "stop")
    fresh.meta.setdefault("usage", dict(ZERO_USAGE))
    fresh.meta.setdefault("model", model)
    fresh.meta.setdefault("index", 0)
    return fresh


_SCALARS = (str, int, float, bool, type(None))


def _fresh(mapping: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``mapping`` sharing nothing mutable: a flat one (the usual case) needs no deep copy."""
    if all(type(v) in _SCALARS for v in mapping.values()):
        return dict(mapping)
    return copy.deepcopy(mapping)


class LocalChatGenerator(ABC):
    """Shared plumbing of generators that answer in-process (scripted, offline demo).

    Subclasses implement :meth:`_reply`; this class provides ``run`` / ``run_async`` and hands a
    streaming callback the reply as one chunk (its text, and its tool calls as whole deltas).
    """

    @abstractmethod
    def _reply(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None,
        generation_kwargs: dict[str, Any] | None,
    ) -> ChatMessage:
        """The reply to ``messages`` (a fresh message, see :func:`finalize_local_reply`)."""

    def run(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Answer ``messages``; works inside or outside a running event loop."""
        if streaming_callback is None:
            return {"replies": [self._reply(messages, tools, generation_kwargs)]}
        from bot.aio import run_sync

        return run_sync(self.run_async(messages, tools, generation_kwargs, streaming_callback))

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: StreamingCallback | None = None,
    ) -> dict[str, list[ChatMessage]]:
        """Async twin of :meth:`run`; a streaming callback gets the reply's text as one chunk."""
        reply = self._reply(messages, tools, generation_kwargs)
        if streaming_callback is not None:
            meta = {"model": reply.meta.get("model"), "index": 0, "usage": reply.meta.get("usage")}
            deltas = [
                {"index": i, "id": call.id, "name": call.tool_name, "arguments": json.dumps(call.arguments)}
                for i, call in enumerate(reply.tool_calls)
            ]
            chunk = StreamingChunk(
                content=reply.text or "",
                tool_call_deltas=deltas,
                meta=meta,
                finish_reason=reply.meta.get("finish_reason"),
            )
            await emit_chunk(streaming_callback, chunk)
        return {"replies": [reply]}


def tool_names(tools: Sequence[Tool | Toolset] | None) -> list[str]:
    """The names of ``tools`` after expanding toolsets."""
    return [t.name for t in flatten_tools(tools)]
