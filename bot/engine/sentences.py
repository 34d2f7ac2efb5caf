"""What the engine tells a thread in its own words: answers as shown, failures, stops and supersedes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.agent.stored_snapshot import HistoryUnavailable
from bot.engine.errors import MCPToolsChanged, PolicyKeptChanging, ToolsNotConfigured
from bot.engine.model import AdminRequest
from bot.llm import LLMError

SUPERSEDED_RESULT = "superseded by a newer message"
STOPPED_NOTICE = "(Stopped.)"
NOTHING_TO_STOP = "There is nothing to stop: this run is not working right now."
STOPPING = "Stopping after the current step."

_EXIT_NOTES = {
    "max_agent_steps": "(I stopped after too many steps without finishing.)",
    "length": "(My answer was cut off: it hit the model's length limit.)",
    "content_filter": "(The model's content filter stopped this answer.)",
}


def answer_text(result: Mapping[str, Any]) -> str:
    """The text a finished run's thread gets: the model's last answer, with a note on why it ended early."""
    last = result.get("last_message")
    text = last.text if last is not None and last.role == "assistant" and last.text else ""
    reason = result.get("exit_reason")
    if reason == "empty":
        return "(The model returned an empty answer twice; please try again.)"
    note = _EXIT_NOTES.get(reason) if isinstance(reason, str) else None
    if note is not None:
        text = (text + "\n\n" if text else "") + note
    return text


def place_name(request: AdminRequest, channel: str | None) -> str:
    """Where a command applies, as people know the place: ``#ops``, ``this channel``, or (no channel) the
    surface's name for its workspace (the console: ``this chat``), else ``this workspace``."""
    if channel is None:
        return request.workspace_name or "this workspace"
    name = request.channel_names.get(channel)
    if name:
        return f"#{name}"
    return "this channel" if channel == request.channel else f"#{channel}"


STEP_NOT_SAVED = (
    "I can't reach my database right now, so I could not save this step. Nothing of it is lost: "
    "I will pick this request up again from its last saved point as soon as the database is back."
)
"""What a thread is told when its run's step could not be written at all (the run is left for recovery)."""


def failure_sentence(exc: BaseException) -> str:
    """What a thread is told when its run failed with ``exc`` (never the exception's own text, but ours)."""
    if isinstance(exc, PolicyKeptChanging):
        return str(exc)
    if isinstance(exc, MCPToolsChanged):
        return f"Sorry, this request cannot continue: {exc} Nothing more of it ran; ask again to use it as it is now."
    if isinstance(exc, ToolsNotConfigured):
        return (
            f"Sorry, this request cannot continue: it was using {', '.join(exc.missing)}, which "
            f"{'is' if len(exc.missing) == 1 else 'are'} not configured here now (COUNTERSIGN_TOOLS). "
            "Nothing more of it ran; ask again once the tools are configured."
        )
    if isinstance(exc, HistoryUnavailable):
        return (
            "Sorry, this request cannot continue: the conversation history it paused with is no longer stored. "
            "Please ask again."
        )
    if isinstance(exc, LLMError):
        # ``reason`` is ours, built without credentials (bot/llm/openai_generator.py), never the server's text.
        why = f": {exc.reason}" if exc.reason else " (it timed out or failed)"
        return f"Sorry, the language model could not answer{why}. Nothing was lost; please try again."
    return "Sorry, something went wrong while working on this. Nothing was lost; please try again."
