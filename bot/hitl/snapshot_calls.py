"""Reading the paused calls out of an ``AgentSnapshot`` (for UIs that render approvals)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bot.agent.snapshot import AgentSnapshot


def get_tool_calls_and_descriptions_from_snapshot(
    agent_snapshot: AgentSnapshot, breakpoint_tool_only: bool = True
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The tool calls of the paused step (as dicts) and the descriptions of their tools.

    With ``breakpoint_tool_only`` (the default) only the calls awaiting a human decision are returned;
    otherwise every call of the step.
    """
    calls = agent_snapshot.pending_tool_calls if breakpoint_tool_only else agent_snapshot.step_message.tool_calls
    names = {c.tool_name for c in calls}
    descriptions = {n: d for n, d in agent_snapshot.tool_descriptions.items() if n in names}
    return [c.to_dict() for c in calls], descriptions
