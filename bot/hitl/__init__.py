"""Human in the loop: policies (whether to ask), UIs (what the human said), strategies (the decision)."""

from bot.hitl.apply import apply_decisions, close_dangling_tool_calls, closing_results, dangling_tool_calls
from bot.hitl.blocking import (
    MODIFICATION_FEEDBACK_TEMPLATE,
    REJECTION_FEEDBACK_TEMPLATE,
    USER_FEEDBACK_TEMPLATE,
    BlockingConfirmationStrategy,
    ConfirmationStrategy,
)
from bot.hitl.breakpoint import BreakpointConfirmationStrategy, HITLBreakpointException
from bot.hitl.dataclasses import ConfirmationUIResult, ToolExecutionDecision
from bot.hitl.policies import AlwaysAskPolicy, AskOncePolicy, ConfirmationPolicy, NeverAskPolicy
from bot.hitl.snapshot_calls import get_tool_calls_and_descriptions_from_snapshot
from bot.hitl.ui import ConfirmationUI, RichConsoleUI, SimpleConsoleUI

__all__ = [
    "MODIFICATION_FEEDBACK_TEMPLATE",
    "REJECTION_FEEDBACK_TEMPLATE",
    "USER_FEEDBACK_TEMPLATE",
    "AlwaysAskPolicy",
    "AskOncePolicy",
    "BlockingConfirmationStrategy",
    "BreakpointConfirmationStrategy",
    "ConfirmationPolicy",
    "ConfirmationStrategy",
    "ConfirmationUI",
    "ConfirmationUIResult",
    "HITLBreakpointException",
    "NeverAskPolicy",
    "RichConsoleUI",
    "SimpleConsoleUI",
    "ToolExecutionDecision",
    "apply_decisions",
    "close_dangling_tool_calls",
    "closing_results",
    "dangling_tool_calls",
    "get_tool_calls_and_descriptions_from_snapshot",
]
