"""Applying tool-execution decisions to a step's transcript, and closing dangling tool calls.

The transcript shape follows Haystack 3.x: a rejected call is split into its own assistant message
followed by ``tool(feedback, error=True)``; a modified call gets a user message explaining the change;
all surviving calls sit in one assistant message, last. Decisions bind to calls by ``tool_call_id``;
an id-less decision matches only an id-less call of the same name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from bot.canonical import canonical_json
from bot.hitl.blocking import MODIFICATION_FEEDBACK_TEMPLATE, REJECTION_FEEDBACK_TEMPLATE
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.respond import HUMAN_RESPONSE_PREFIX
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.redaction import scrub
from bot.tools import InvalidToolArguments, Tool

_ASSISTANT = ChatRole.ASSISTANT
_TOOL = ChatRole.TOOL


def call_key(call: ToolCall) -> str:
    """How a call is named in errors: its id, or its tool name when it has none."""
    return call.id or f"<{call.tool_name} without id>"


class CallDecision(Protocol):
    """What binds a decision to its call: the tool it names and, when the call has one, the call's id."""

    @property
    def tool_name(self) -> str: ...

    @property
    def tool_call_id(self) -> str | None: ...


DecisionT = TypeVar("DecisionT", bound=CallDecision)


def bind_decisions(calls: Sequence[ToolCall], decisions: Iterable[DecisionT]) -> dict[int, DecisionT]:
    """Map each call's position to its one decision.

    Raises ``ValueError`` naming the call when a call has no decision, two decisions, or a decision
    matches no call of the step.
    """
    by_position: dict[int, DecisionT] = {}
    for decision in decisions:
        if decision.tool_call_id is not None:
            matches = [i for i, c in enumerate(calls) if c.id == decision.tool_call_id]
        else:
            # An id-less decision takes the first id-less call of its tool that has no decision yet.
            matches = [
                i
                for i, c in enumerate(calls)
                if c.id is None and c.tool_name == decision.tool_name and i not in by_position
            ][:1]
        if not matches:
            raise ValueError(
                f"Decision for '{decision.tool_name}' (tool_call_id={decision.tool_call_id!r}) matches no "
                "undecided tool call of this step."
            )
        position = matches[0]
        if calls[position].tool_name != decision.tool_name:
            raise ValueError(
                f"Decision names tool '{decision.tool_name}' but call {call_key(calls[position])} is "
                f"'{calls[position].tool_name}'."
            )
        if position in by_position:
            raise ValueError(f"More than one decision for tool call {call_key(calls[position])}.")
        by_position[position] = decision
    missing = [call_key(c) for i, c in enumerate(calls) if i not in by_position]
    if missing:
        raise ValueError(f"No decision for tool call(s): {', '.join(missing)}.")
    return by_position


@dataclass
class AppliedStep:
    """The outcome of applying decisions to one assistant message with tool calls."""

    messages: list[ChatMessage] = field(default_factory=list)
    """New transcript messages in order: split rejected calls with their results, modification notes,
    and finally the assistant message with the surviving calls (absent when none survive)."""
    to_execute: list[ToolCall] = field(default_factory=list)
    """The surviving calls, with their final arguments, in call order."""
    rejected: list[ToolCall] = field(default_factory=list)
    """Calls that will not run (rejected, or an invalid edit)."""


def apply_decisions(
    assistant_message: ChatMessage,
    decisions: Iterable[ToolExecutionDecision],
    tools: Mapping[str, Tool],
) -> AppliedStep:
    """Turn a step's assistant message and its decisions into the transcript and the calls to run.

    Edited parameters are validated against the tool's JSON schema; an invalid edit is refused: the
    call does not run and gets an error result naming the problem. An edit that changes nothing is a
    confirm. When every call runs unchanged, the assistant message is kept as it is (same id).
    """
    calls = assistant_message.tool_calls
    bound = bind_decisions(calls, decisions)
    applied = AppliedStep()
    surviving: list[ToolCall] = []
    for position, call in enumerate(calls):
        decision = bound[position]
        if not decision.execute:
            feedback = decision.feedback or REJECTION_FEEDBACK_TEMPLATE.format(tool_name=call.tool_name)
            applied.messages.extend(_split_rejected(assistant_message, call, feedback))
            applied.rejected.append(call)
            continue
        final = call.arguments if decision.final_tool_params is None else dict(decision.final_tool_params)
        # Compared canonically, as the blocking strategy does: in Python 1 == True == 1.0.
        if final is call.arguments or canonical_json(final) == canonical_json(call.arguments):
            surviving.append(call)
            continue
        tool = tools.get(call.tool_name)
        if tool is not None:
            try:
                tool.validate(final)
            except InvalidToolArguments as exc:
                # jsonschema quotes the offending values: a mistyped secret must not reach the transcript.
                reason = scrub(f"The edited parameters were refused: {exc}", [call.arguments, final])
                applied.messages.extend(_split_rejected(assistant_message, call, reason))
                applied.rejected.append(call)
                continue
        note = decision.feedback or MODIFICATION_FEEDBACK_TEMPLATE.format(
            tool_name=call.tool_name, final_tool_params=json.dumps(final, ensure_ascii=False)
        )
        applied.messages.append(ChatMessage.from_user(note, meta={"modification_of": call.id}))
        surviving.append(ToolCall(tool_name=call.tool_name, arguments=final, id=call.id))
    if surviving:
        # Identity, not ==: an edited call can compare equal to its original (1 == True).
        if len(surviving) == len(calls) and all(s is c for s, c in zip(surviving, calls, strict=True)):
            applied.messages.append(assistant_message)
        else:
            applied.messages.append(
                ChatMessage.from_assistant(
                    text=assistant_message.text, tool_calls=surviving, meta=_derived_meta(assistant_message)
                )
            )
    applied.to_execute = surviving
    return applied


def _split_rejected(assistant_message: ChatMessage, call: ToolCall, feedback: str) -> list[ChatMessage]:
    return [
        ChatMessage.from_assistant(text=None, tool_calls=[call], meta=_derived_meta(assistant_message)),
        # A person's Respond (bot.hitl.respond) is the call's answer, not an error (issue 30).
        ChatMessage.from_tool(feedback, origin=call, error=not feedback.startswith(HUMAN_RESPONSE_PREFIX)),
    ]


def _derived_meta(message: ChatMessage) -> dict:
    meta = {k: v for k, v in message.meta.items() if k not in ("id", "usage")}
    meta["split_from"] = message.id
    return meta


def dangling_tool_calls(messages: Sequence[ChatMessage]) -> list[ToolCall]:
    """Every assistant tool call in ``messages`` that has no tool result after it.

    A result answers the open call with its id, the newest first (some servers reuse ids); a result
    without an id answers the first open id-less call of its tool in the newest message that has one.
    """
    # This runs on every history before it reaches the LLM: one pass, dict lookups, no per-message
    # function calls (and the roles are module constants: ``ChatRole.X`` is a slow attribute access).
    answered: set[int] = set()
    groups: list[list[ToolCall]] = []  # the calls of each assistant message, in order
    open_by_id: dict[str, list[ToolCall]] = {}
    for message in messages:
        role = message.role
        if role == _ASSISTANT:
            calls = message.tool_calls
            if calls:
                groups.append(calls)
                for call in calls:
                    if call.id is not None:
                        open_by_id.setdefault(call.id, []).append(call)
        elif role == _TOOL and message.tool_call_result is not None:
            origin = message.tool_call_result.origin
            if origin.id is not None:
                candidates = open_by_id.get(origin.id)
                if candidates:
                    answered.add(id(candidates.pop()))
            else:
                _answer_id_less(groups, answered, origin.tool_name)
    return [call for group in groups for call in group if id(call) not in answered]


def _answer_id_less(groups: list[list[ToolCall]], answered: set[int], tool_name: str) -> None:
    # The newest message first, but within a message in call order: results of id-less calls come
    # in the order of their calls.
    for group in reversed(groups):
        for call in group:
            if call.id is None and call.tool_name == tool_name and id(call) not in answered:
                answered.add(id(call))
                return


def close_dangling_tool_calls(messages: Sequence[ChatMessage], reason: str) -> list[ChatMessage]:
    """Return ``messages`` with an error tool result (``reason``) inserted for every call that has none.

    Each result goes right after the existing results of its assistant message, where an LLM expects
    it. Used for superseded, expired and crashed runs, and as a safety net before every LLM call.
    """
    dangling = {id(c) for c in dangling_tool_calls(messages)}
    if not dangling:
        return list(messages)
    result: list[ChatMessage] = []
    owed: list[ToolCall] = []
    for message in messages:
        if owed and message.role != _TOOL:
            result.extend(ChatMessage.from_tool(reason, origin=c, error=True) for c in owed)
            owed = []
        result.append(message)
        if message.role == _ASSISTANT:
            owed.extend(c for c in message.tool_calls if id(c) in dangling)
    result.extend(ChatMessage.from_tool(reason, origin=c, error=True) for c in owed)
    return result


def closing_results(messages: Sequence[ChatMessage], reason: str) -> list[ChatMessage]:
    """Only the error tool results that :func:`close_dangling_tool_calls` would add, in order.

    For an append-only store whose dangling calls sit at the tail of the history.
    """
    return [ChatMessage.from_tool(reason, origin=c, error=True) for c in dangling_tool_calls(messages)]
