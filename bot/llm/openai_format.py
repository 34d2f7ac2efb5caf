"""Translation between our :class:`~bot.messages.ChatMessage` and the OpenAI chat-completions wire format.

Pure functions, no I/O: messages out, replies in, and the assembly of streamed tool-call deltas.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from bot.llm.base import LLMResponseError
from bot.messages import ChatMessage, ChatRole, ToolCall


def to_openai_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Convert a conversation to the ``messages`` array of a chat-completions request.

    >>> to_openai_messages([ChatMessage.from_user("hi")])
    [{'role': 'user', 'content': 'hi'}]
    """
    return [to_openai_message(m) for m in messages]


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """Convert one message; tool calls and tool results must carry ids (OpenAI pairs them by id)."""
    if message.role is ChatRole.TOOL:
        result = message.tool_call_result
        if result is None:
            raise ValueError(f"Tool message {message.id} has no tool_call_result.")
        if not result.origin.id:
            raise ValueError(f"Tool result for '{result.origin.tool_name}' has no tool call id; OpenAI needs one.")
        return {"role": "tool", "tool_call_id": result.origin.id, "content": result.result}
    if message.role is ChatRole.ASSISTANT:
        out: dict[str, Any] = {"role": "assistant", "content": message.text}
        if message.tool_calls:
            out["tool_calls"] = [_tool_call_to_openai(tc) for tc in message.tool_calls]
        return out
    return {"role": message.role.value, "content": message.text or ""}


def _tool_call_to_openai(call: ToolCall) -> dict[str, Any]:
    if not call.id:
        raise ValueError(f"Tool call '{call.tool_name}' has no id; OpenAI needs one to pair it with its result.")
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.tool_name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
    }


def parse_arguments(tool_name: str, raw: str | None) -> dict[str, Any]:
    """Parse a tool call's JSON ``arguments``; an empty string means no arguments.

    Raises :class:`LLMResponseError` unless the text is a JSON object.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as err:
        raise LLMResponseError(
            f"The model sent arguments for tool '{tool_name}' that are not valid JSON ({err.msg} at {err.pos})."
        ) from err
    if not isinstance(value, dict):
        raise LLMResponseError(
            f"The model sent arguments for tool '{tool_name}' that are a JSON {type(value).__name__}, not an object."
        )
    return value


def usage_to_dict(usage: Any) -> dict[str, int]:
    """The three token counts of an OpenAI ``usage`` object, or of its JSON (zeros when absent)."""
    if usage is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    read = usage.get if isinstance(usage, dict) else functools.partial(getattr, usage)
    prompt = int(read("prompt_tokens", 0) or 0)
    completion = int(read("completion_tokens", 0) or 0)
    total = int(read("total_tokens", 0) or (prompt + completion))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def reply_from_choice(choice: Any, *, model: str, usage: dict[str, int]) -> ChatMessage:
    """Build our assistant reply from one ``choices[i]`` of a non-streamed completion."""
    message = choice.message
    calls = []
    for tc in message.tool_calls or []:
        function = getattr(tc, "function", None)
        if function is None:  # custom (non-function) tools are never offered, so never expected back
            raise LLMResponseError(f"The model sent a tool call of unsupported type {tc.type!r}.")
        calls.append(
            ToolCall(
                tool_name=function.name,
                arguments=parse_arguments(function.name, function.arguments),
                id=tc.id,
            )
        )
    return ChatMessage.from_assistant(
        text=message.content,
        tool_calls=calls,
        meta={"model": model, "finish_reason": choice.finish_reason, "usage": usage, "index": choice.index},
    )


@dataclass
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class StreamAssembler:
    """Accumulates streamed chunks of one choice into a complete reply.

    Tool calls arrive as deltas keyed by ``index``: the name and id first, then argument fragments.
    """

    index: int = 0
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None

    def add_delta(self, delta: dict[str, Any], finish_reason: str | None) -> list[dict[str, Any]]:
        """Fold one ``choices[i].delta`` (its JSON) in; return the tool-call deltas as plain dicts."""
        content = delta.get("content")
        if content:
            self.text.append(content)
        plain: list[dict[str, Any]] = []
        for tc in delta.get("tool_calls") or ():
            index, call_id = tc.get("index", 0), tc.get("id")
            partial = self.calls.get(index)
            if partial is None:
                partial = self.calls[index] = _PartialCall()
            function = tc.get("function") or {}
            name, fragment = function.get("name"), function.get("arguments")
            if call_id:
                partial.id = call_id
            if name:
                partial.name += name
            if fragment:
                partial.arguments += fragment
            plain.append({"index": index, "id": call_id, "name": name, "arguments": fragment or ""})
        if finish_reason:
            self.finish_reason = finish_reason
        return plain

    def reply(self, *, model: str, usage: dict[str, int]) -> ChatMessage:
        """The assembled reply; raises :class:`LLMResponseError` on a call without a name or bad arguments."""
        calls = []
        for position in sorted(self.calls):
            partial = self.calls[position]
            if not partial.name:
                raise LLMResponseError(f"The model streamed a tool call (index {position}) without a name.")
            calls.append(
                ToolCall(
                    tool_name=partial.name,
                    arguments=parse_arguments(partial.name, partial.arguments),
                    id=partial.id,
                )
            )
        text = "".join(self.text) or None
        finish_reason = self.finish_reason or ("tool_calls" if calls else "stop")
        return ChatMessage.from_assistant(
            text=text,
            tool_calls=calls,
            meta={"model": model, "finish_reason": finish_reason, "usage": usage, "index": self.index},
        )
