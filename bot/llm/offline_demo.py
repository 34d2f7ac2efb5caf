"""A rule-based stand-in for an LLM, so ``countersign chat`` shows a pause, an approval and an answer offline.

It reads the last user message for a few commands ("list files", "read notes.txt", "delete old.log",
"restart nginx", "what time is it?"), calls the matching demo tool, and once tool results are back it
summarises them, saying plainly when a call failed or was rejected.

Any other configured tool can be called too:

- explicitly, ``call scale_service service=checkout replicas=3``: each value is typed by the tool's JSON
  schema (integers, numbers, booleans; JSON for objects and lists); see :mod:`bot.llm.offline_calls`;
- by a best-effort match of the message's words to a tool's name and parameters ("scale checkout to 3
  replicas");
- when neither fits, the reply lists the configured tools and the ``call`` syntax.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bot.llm.base import LocalChatGenerator, finalize_local_reply
from bot.llm.offline_calls import CALL_SYNTAX, explicit_call, tools_listing, word_match
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.tools import Tool, Toolset, flatten_tools

ANNOUNCEMENT = "offline demo model — set OPENAI_API_KEY or OPENAI_BASE_URL for a real LLM"

_ARG = r"[\"'`]?(?P<arg>[^\s,;!?\"'`]+)"
# Commands that take one argument: (tool, argument name, pattern). Several may appear in one message.
_ARG_RULES: list[tuple[str, str, re.Pattern[str]]] = [
    (
        "delete_file",
        "path",
        re.compile(r"\b(?:delete|remove|rm)\s+(?:the\s+)?(?:file\s+)?" + _ARG, re.IGNORECASE),
    ),
    (
        "read_file",
        "path",
        re.compile(r"\b(?:read|cat|show|open)\s+(?:the\s+)?(?:file\s+)?" + _ARG, re.IGNORECASE),
    ),
    (
        "restart_service",
        "service",
        re.compile(r"\brestart\s+(?:the\s+)?(?:service\s+)?" + _ARG, re.IGNORECASE),
    ),
]
_LIST = re.compile(r"\b(?:list|files|ls)\b", re.IGNORECASE)
_TIME = re.compile(r"\btime\b", re.IGNORECASE)
_FORCE = re.compile(r"\bforce", re.IGNORECASE)

_EXAMPLES = {
    "list_files": '"list files"',
    "read_file": '"read notes.txt"',
    "delete_file": '"delete old.log"',
    "restart_service": '"restart nginx"',
    "get_time": '"what time is it?"',
}


class OfflineDemoChatGenerator(LocalChatGenerator):
    """Answers like a (very small) LLM without any network, using only the tools it is given.

    >>> gen = OfflineDemoChatGenerator()
    >>> gen.run([ChatMessage.from_user("delete old.log")], tools=demo_tools)["replies"][0].tool_call
    ToolCall(tool_name='delete_file', arguments={'path': 'old.log'}, id='call_...')

    Its first text reply in a conversation says it is the offline demo model.
    """

    model = "offline-demo"

    def to_dict(self) -> dict[str, Any]:
        """Serialise (there is nothing to configure)."""
        return {"type": "bot.llm.OfflineDemoChatGenerator", "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OfflineDemoChatGenerator:
        """Inverse of :meth:`to_dict`."""
        return cls()

    # --- the rules ----------------------------------------------------------------------------

    def _reply(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool | Toolset] | None,
        generation_kwargs: dict[str, Any] | None = None,
    ) -> ChatMessage:
        offered = flatten_tools(tools)
        available = {t.name for t in offered}
        if messages and messages[-1].role is ChatRole.TOOL:
            reply = ChatMessage.from_assistant(self._announced(messages, _summarise(_trailing_results(messages))))
            return finalize_local_reply(reply, model=self.model)
        user_text = next((m.text or "" for m in reversed(messages) if m.role is ChatRole.USER), "")
        explicit = explicit_call(user_text, offered)
        if explicit is not None:
            call, problem = explicit
            if call is not None:
                reply = ChatMessage.from_assistant(tool_calls=[call])
            else:
                reply = ChatMessage.from_assistant(self._announced(messages, f"{problem}\n{tools_listing(offered)}"))
            return finalize_local_reply(reply, model=self.model)
        calls, missing = _calls_for(user_text, available)
        if not calls:
            matched = word_match(user_text, offered)
            if matched is not None:
                calls, missing = [matched], []
        if calls:
            reply = ChatMessage.from_assistant(tool_calls=calls)
        else:
            text = _help_text(available, missing)
            if not _offers_demo_tools(available):
                text = f"{text}\n{tools_listing(offered)}" if missing else tools_listing(offered)
            reply = ChatMessage.from_assistant(self._announced(messages, text))
        return finalize_local_reply(reply, model=self.model)

    @staticmethod
    def _announced(messages: list[ChatMessage], text: str) -> str:
        already = any(m.role is ChatRole.ASSISTANT and ANNOUNCEMENT in (m.text or "") for m in messages)
        return text if already else f"({ANNOUNCEMENT})\n{text}"


def _calls_for(text: str, available: set[str]) -> tuple[list[ToolCall], list[str]]:
    """The tool calls a user message asks for, in the order written, and the requested tools not on offer."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    for name, arg_name, pattern in _ARG_RULES:
        for match in pattern.finditer(text):
            arguments: dict[str, Any] = {arg_name: match.group("arg").rstrip(".")}
            if name == "restart_service" and _FORCE.search(text):
                arguments["force"] = True
            found.append((match.start(), name, arguments))
    if not found:
        if match := _LIST.search(text):
            found.append((match.start(), "list_files", {}))
        if match := _TIME.search(text):
            found.append((match.start(), "get_time", {}))
    found.sort(key=lambda item: item[0])
    calls = [ToolCall(tool_name=name, arguments=args) for _, name, args in found if name in available]
    missing = sorted({name for _, name, _ in found if name not in available})
    return calls, missing


def _trailing_results(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The tool-result messages at the end of the conversation (the results of the last step)."""
    results: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role is not ChatRole.TOOL:
            break
        results.append(message)
    return list(reversed(results))


def _summarise(results: list[ChatMessage]) -> str:
    lines = ["Here is what happened:"]
    for message in results:
        result = message.tool_call_result
        if result is None:
            continue
        call = result.origin
        label = f"{call.tool_name}({_format_args(call.arguments)})"
        if result.error:
            lines.append(f"- {label} failed or was rejected: {result.result}")
        elif "\n" in result.result.strip():
            body = "\n".join(f"    {line}" for line in result.result.strip().splitlines())
            lines.append(f"- {label} returned:\n{body}")
        else:
            lines.append(f"- {label}: {result.result.strip()}")
    return "\n".join(lines)


def _format_args(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())


def _offers_demo_tools(available: set[str]) -> bool:
    return any(name in available for name in _EXAMPLES)


def _help_text(available: set[str], missing: list[str]) -> str:
    lines: list[str] = []
    if missing:
        lines.append(f"I can't do that here: {', '.join(missing)} is not among the tools I was given.")
    offered = [example for name, example in _EXAMPLES.items() if name in available]
    if offered:
        lines.append(f"I understand a few commands: {', '.join(offered)}, or {CALL_SYNTAX} for any tool.")
    elif not available:
        lines.append("I have no tools to call, so I can only answer with this message.")
    return "\n".join(lines)
