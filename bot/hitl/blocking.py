"""Confirmation strategies turn a policy and a UI into a :class:`ToolExecutionDecision`.

:class:`BlockingConfirmationStrategy` waits for the human's answer in place, as Haystack's does, with
deliberate differences: it fails closed (an unknown action, or a policy or UI that raises, rejects the
call and never runs it); a modification is merged over the original params; and a modification that
changes nothing is a confirmation.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol, runtime_checkable

from bot.canonical import canonical_json
from bot.hitl.dataclasses import ConfirmationUIResult, ToolExecutionDecision
from bot.hitl.policies import ConfirmationPolicy
from bot.hitl.serialization import check_type, component_from_dict, component_to_dict, default_to_dict
from bot.hitl.ui import ConfirmationUI
from bot.redaction import mask_secrets, scrub

logger = logging.getLogger(__name__)

REJECTION_FEEDBACK_TEMPLATE = "Tool execution for '{tool_name}' was rejected by the user."
MODIFICATION_FEEDBACK_TEMPLATE = (
    "The parameters for tool '{tool_name}' were updated by the user to:\n{final_tool_params}"
)
USER_FEEDBACK_TEMPLATE = "With user feedback: {feedback}"

CONFIRMATION_FAILED_TEMPLATE = "Tool execution for '{tool_name}' was rejected: the confirmation failed ({error_type})."
UNKNOWN_ACTION_TEMPLATE = (
    "Tool execution for '{tool_name}' was rejected: the confirmation answer {action} was not understood."
)


@runtime_checkable
class ConfirmationStrategy(Protocol):
    """Decides what happens to one tool call: run it as requested, run it with edited params, or not."""

    def run(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Return the decision for a call of ``tool_name`` with ``tool_params``."""
        ...

    async def run_async(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """The async twin of :meth:`run`."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Serialise as ``{"type": ..., "init_parameters": {...}}``."""
        ...

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConfirmationStrategy:
        """Inverse of :meth:`to_dict`."""
        ...


class BlockingConfirmationStrategy:
    """Ask the human (when the policy says so) and wait for the answer.

    >>> strategy = BlockingConfirmationStrategy(AlwaysAskPolicy(), RichConsoleUI())
    >>> strategy.run(tool_name="delete_file", tool_description="Delete a file", tool_params={"path": "a.txt"})
    ToolExecutionDecision(tool_name='delete_file', execute=False, ...)
    """

    def __init__(
        self,
        confirmation_policy: ConfirmationPolicy,
        confirmation_ui: ConfirmationUI,
        reject_template: str = REJECTION_FEEDBACK_TEMPLATE,
        modify_template: str = MODIFICATION_FEEDBACK_TEMPLATE,
        user_feedback_template: str = USER_FEEDBACK_TEMPLATE,
    ) -> None:
        """Every template takes ``{tool_name}``; the modify one also ``{final_tool_params}``.

        ``user_feedback_template`` takes ``{feedback}`` and is appended after a space.
        """
        self.confirmation_policy = confirmation_policy
        self.confirmation_ui = confirmation_ui
        self.reject_template = reject_template
        self.modify_template = modify_template
        self.user_feedback_template = user_feedback_template

    def run(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Return the decision for one call; blocks while the UI waits for the human.

        Never raises for a failing policy or UI: the call is rejected instead, and the error is logged.
        """
        try:
            return self._decide(tool_name, tool_description, tool_params, tool_call_id)
        except Exception as exc:
            logger.error(
                "confirmation failed; the tool call is rejected",
                extra={
                    "tool_name": tool_name,
                    "tool_call_id": tool_call_id,
                    "error_type": type(exc).__name__,
                    "error": scrub(str(exc), tool_params),
                },
            )
            feedback = CONFIRMATION_FAILED_TEMPLATE.format(tool_name=tool_name, error_type=type(exc).__name__)
            return ToolExecutionDecision(
                tool_name=tool_name, execute=False, tool_call_id=tool_call_id, feedback=feedback
            )

    async def run_async(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """The async twin of :meth:`run`; the blocking UI runs in a worker thread, off the event loop."""
        return await asyncio.to_thread(
            self.run,
            tool_name=tool_name,
            tool_description=tool_description,
            tool_params=tool_params,
            tool_call_id=tool_call_id,
            confirmation_strategy_context=confirmation_strategy_context,
        )

    def _decide(
        self, tool_name: str, tool_description: str, tool_params: dict[str, Any], tool_call_id: str | None
    ) -> ToolExecutionDecision:
        def decision(
            execute: bool, feedback: str | None = None, params: dict[str, Any] | None = None
        ) -> ToolExecutionDecision:
            return ToolExecutionDecision(
                tool_name=tool_name,
                execute=execute,
                tool_call_id=tool_call_id,
                feedback=feedback,
                final_tool_params=params,
            )

        if not self.confirmation_policy.should_ask(tool_name, tool_description, tool_params):
            return decision(True, params=dict(tool_params))

        raw_answer = self.confirmation_ui.get_user_confirmation(tool_name, tool_description, tool_params)
        answer, merged, not_understood = _normalise(raw_answer, tool_params)
        # The policy learns what the answer amounted to: an edit that changed nothing is a confirmation,
        # an answer that was not understood is a rejection.
        self.confirmation_policy.update_after_confirmation(tool_name, tool_description, tool_params, answer)

        if not_understood is not None:
            logger.warning(
                "confirmation answer not understood; the tool call is rejected",
                extra={"tool_name": tool_name, "tool_call_id": tool_call_id},
            )
            return decision(False, UNKNOWN_ACTION_TEMPLATE.format(tool_name=tool_name, action=not_understood))
        if answer.action == "confirm":
            return decision(True, self._with_user_feedback(None, answer.feedback), dict(tool_params))
        if answer.action == "modify":
            # The explanation is shown to people and the LLM as text: secret values stay masked in it.
            text = self.modify_template.format(tool_name=tool_name, final_tool_params=mask_secrets(merged))
            return decision(True, self._with_user_feedback(text, answer.feedback), merged)
        text = self.reject_template.format(tool_name=tool_name)
        return decision(False, self._with_user_feedback(text, answer.feedback))

    def _with_user_feedback(self, text: str | None, feedback: str | None) -> str | None:
        if not feedback:
            return text
        user_text = self.user_feedback_template.format(feedback=feedback)
        return f"{text} {user_text}" if text else user_text

    def to_dict(self) -> dict[str, Any]:
        """Serialise, with the policy and the UI nested in the same shape."""
        return default_to_dict(
            self,
            confirmation_policy=component_to_dict(self.confirmation_policy),
            confirmation_ui=component_to_dict(self.confirmation_ui),
            reject_template=self.reject_template,
            modify_template=self.modify_template,
            user_feedback_template=self.user_feedback_template,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BlockingConfirmationStrategy:
        """Inverse of :meth:`to_dict`."""
        check_type(cls, data)
        params = dict(data.get("init_parameters") or {})
        params["confirmation_policy"] = component_from_dict(params["confirmation_policy"])
        params["confirmation_ui"] = component_from_dict(params["confirmation_ui"])
        return cls(**params)


def _normalise(
    answer: Any, tool_params: dict[str, Any]
) -> tuple[ConfirmationUIResult, dict[str, Any] | None, str | None]:
    """Reduce a UI answer to confirm, reject or a modify that changes something (with the merged params).

    Returns the reduced answer, the merged params (modify only) and, for an answer that is not
    understood, a short description of it (the answer then counts as a rejection).
    """
    if not isinstance(answer, ConfirmationUIResult):
        return ConfirmationUIResult(action="reject"), None, f"of type {type(answer).__name__}"
    if answer.action in ("confirm", "reject"):
        return answer, None, None
    if answer.action != "modify":
        return ConfirmationUIResult(action="reject"), None, _shorten(answer.action)
    edits = answer.new_tool_params or {}
    if not isinstance(edits, dict):
        return ConfirmationUIResult(action="reject"), None, "'modify' without a params object"
    merged = {**tool_params, **edits}
    # Compared canonically so that, say, True replacing 1 counts as a change.
    if canonical_json(merged) == canonical_json(tool_params):
        return ConfirmationUIResult(action="confirm", feedback=answer.feedback), None, None
    return answer, merged, None


def _shorten(action: Any, limit: int = 40) -> str:
    text = repr(action)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
