"""Extension points of the agent loop: hooks, the confirmation hook, reviews after acting, and breakpoints."""

from bot.hooks.breakpoints import AgentBreakpoint, Breakpoint, BreakpointException
from bot.hooks.confirmation import ConfirmationHook
from bot.hooks.events import (
    AFTER_LLM,
    AFTER_TOOL,
    BEFORE_LLM,
    BEFORE_TOOL,
    HOOK_POINTS,
    ON_FINISH,
    STOP_RUN_KEY,
    HookError,
    HookEvent,
)
from bot.hooks.registry import AgentHooks, Hook, hooks_from_dict
from bot.hooks.review import REVIEW_EXPIRED_RESULT, REVIEW_REJECTED_TEMPLATE, ToolResultReview, apply_reviews

__all__ = [
    "AFTER_LLM",
    "AFTER_TOOL",
    "BEFORE_LLM",
    "BEFORE_TOOL",
    "HOOK_POINTS",
    "ON_FINISH",
    "REVIEW_EXPIRED_RESULT",
    "REVIEW_REJECTED_TEMPLATE",
    "STOP_RUN_KEY",
    "AgentBreakpoint",
    "AgentHooks",
    "Breakpoint",
    "BreakpointException",
    "ConfirmationHook",
    "Hook",
    "HookError",
    "HookEvent",
    "ToolResultReview",
    "apply_reviews",
    "hooks_from_dict",
]
