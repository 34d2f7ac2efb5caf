"""Respond, the fourth decision: a person answers in the tool's place (issue 30).

The tool never runs; the model gets the person's text marked as a human response. For Haystack-style
strategies it is a :class:`ToolExecutionDecision` with ``execute=False`` and the response as feedback,
so existing strategies keep working.
"""

from __future__ import annotations

from bot.hitl.dataclasses import ToolExecutionDecision
from bot.tools import Tool

RESPOND = "Respond"
"""The button's label (API.md); Slack opens a modal and Teams shows a card input with one text field."""

HUMAN_RESPONSE_PREFIX = "[Answered by a person instead of running the tool] "
MAX_RESPONSE_CHARS = 4_000


class RespondRefused(ValueError):
    """A Respond that may not be given (the tool is not respondable, or the text is empty)."""


def respond_allowed(tool: Tool, *, policy_allows: bool = False) -> bool:
    """``@tool(respondable=True)`` or the policy's flag allows Respond."""
    return tool.respondable or policy_allows


def human_response(text: str) -> str:
    """The tool result the model receives: the person's text, marked as a human response."""
    return HUMAN_RESPONSE_PREFIX + text


def respond_decision(
    tool: Tool, tool_call_id: str | None, text: str, *, policy_allows: bool = False
) -> ToolExecutionDecision:
    """The Haystack decision for a Respond: ``execute=False``, the marked response as ``feedback``."""
    if not respond_allowed(tool, policy_allows=policy_allows):
        raise RespondRefused(f"{tool.name} does not accept a typed response (respondable is off).")
    answer = text.strip()
    if not answer:
        raise RespondRefused("A response needs some text.")
    if len(answer) > MAX_RESPONSE_CHARS:
        raise RespondRefused(f"A response is at most {MAX_RESPONSE_CHARS} characters.")
    return ToolExecutionDecision(
        tool_name=tool.name, execute=False, tool_call_id=tool_call_id, feedback=human_response(answer)
    )
