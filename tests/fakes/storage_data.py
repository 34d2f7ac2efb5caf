"""Realistic records for the storage tests: a Slack thread, its run, its paused tool calls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bot.messages import ChatMessage, ToolCall
from storage import NewApproval, RunRecord, Storage

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
THREAD = "slack:T1:C1:1700000000.000100"


def create_run(storage: Storage, run_id: str = "run-1", *, thread: str = THREAD, status: str = "running") -> RunRecord:
    """A run started by U_ANA in #C1 of workspace T1."""
    return storage.runs.create(
        run_id,
        chat_history_id=thread,
        platform="slack",
        workspace="T1",
        channel="C1",
        thread=thread.rsplit(":", 1)[-1],
        requester="U_ANA",
        status=status,
        now=NOW,
    )


def new_approval(
    run_id: str = "run-1",
    tool_call_id: str = "call_1",
    *,
    step: int = 1,
    tool_name: str = "delete_file",
    arguments: dict[str, Any] | None = None,
    ttl: timedelta = timedelta(hours=1),
    **overrides: Any,
) -> NewApproval:
    """A paused ``delete_file`` call that expires an hour after NOW."""
    fields: dict[str, Any] = {
        "run_id": run_id,
        "step": step,
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "arguments": {"path": "/srv/app/a.txt"} if arguments is None else arguments,
        "requester": "U_ANA",
        "platform": "slack",
        "chat_history_id": THREAD,
        "created_at": NOW,
        "expires_at": NOW + ttl,
        "approvers": ["U_BOB", "U_CAROL"],
    }
    fields.update(overrides)
    return NewApproval(**fields)


def tool_exchange(*calls: tuple[str, dict[str, Any]]) -> list[ChatMessage]:
    """An assistant message calling each tool in parallel, followed by one result per call."""
    tool_calls = [ToolCall(tool_name=name, arguments=args, id=f"call_{name}") for name, args in calls]
    return [
        ChatMessage.from_assistant(tool_calls=tool_calls),
        *(ChatMessage.from_tool(f"{call.tool_name} done", origin=call) for call in tool_calls),
    ]
