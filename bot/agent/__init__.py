"""The agent: the loop, its snapshots, and the tool runner."""

from bot.agent.agent import RESERVED_STATE_KEYS, Agent
from bot.agent.snapshot import AgentSnapshot, SnapshotError
from bot.agent.tool_runner import OUTCOME_UNKNOWN, ExecutionLedger, LedgerClaim, ToolRunner
from bot.hitl.snapshot_calls import get_tool_calls_and_descriptions_from_snapshot
from bot.hooks import AgentBreakpoint, Breakpoint, BreakpointException, ToolResultReview

__all__ = [
    "OUTCOME_UNKNOWN",
    "RESERVED_STATE_KEYS",
    "Agent",
    "AgentBreakpoint",
    "AgentSnapshot",
    "Breakpoint",
    "BreakpointException",
    "ExecutionLedger",
    "LedgerClaim",
    "SnapshotError",
    "ToolResultReview",
    "ToolRunner",
    "get_tool_calls_and_descriptions_from_snapshot",
]
