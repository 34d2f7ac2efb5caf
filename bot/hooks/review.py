"""Review after acting: a tool has run, and a person decides what of its result the model sees."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.canonical import canonical_json
from bot.hitl.apply import bind_decisions
from bot.messages import ChatMessage, ToolCall

APPROVE, EDIT, REJECT, EXPIRE = "approve", "edit", "reject", "expire"
REVIEW_ACTIONS = (APPROVE, EDIT, REJECT, EXPIRE)
REVIEW_REJECTED_TEMPLATE = "The result of tool '{tool_name}' was rejected by a reviewer."
REVIEW_FEEDBACK_TEMPLATE = "Reviewer feedback: {feedback}"
REVIEW_EXPIRED_RESULT = "result withheld: not reviewed in time"


@dataclass(frozen=True)
class ToolResultReview:
    """A person's decision about one tool result held for review.

    ``action``: ``"approve"`` (the result goes to the model as it is), ``"edit"`` (``result`` replaces
    it), ``"reject"`` (the model gets ``feedback`` instead, marked as rejected by a reviewer) or
    ``"expire"`` (nobody decided in time: the result is withheld).

    >>> agent.run([], snapshot=pause.snapshot, tool_result_reviews=[
    ...     ToolResultReview("send_email", "call_1", "edit", result="Draft sent to the team.")])
    """

    tool_name: str
    tool_call_id: str | None
    action: str
    result: str | None = None
    feedback: str | None = None

    def __post_init__(self) -> None:
        if self.action not in REVIEW_ACTIONS:
            raise ValueError(f"A review's action is one of {list(REVIEW_ACTIONS)}, not {self.action!r}.")
        if self.action == EDIT and not isinstance(self.result, str):
            raise ValueError("An edited review needs the new result text.")

    def to_dict(self) -> dict[str, Any]:
        """Serialise to JSON-compatible data."""
        return {
            "tool_name": self.tool_name,
            "tool_call_id": self.tool_call_id,
            "action": self.action,
            "result": self.result,
            "feedback": self.feedback,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResultReview:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def released_result(message: ChatMessage, review: ToolResultReview) -> ChatMessage:
    """The tool message the model sees for a held result under ``review``."""
    outcome = message.tool_call_result
    assert outcome is not None
    origin = outcome.origin
    if review.action == APPROVE:
        return message
    if review.action == EDIT:
        return ChatMessage.from_tool(review.result or "", origin=origin, error=outcome.error, meta={"reviewed": EDIT})
    if review.action == REJECT:
        text = REVIEW_REJECTED_TEMPLATE.format(tool_name=origin.tool_name)
        if review.feedback:
            text += " " + REVIEW_FEEDBACK_TEMPLATE.format(feedback=review.feedback)
        return ChatMessage.from_tool(text, origin=origin, error=True, meta={"reviewed": REJECT})
    return ChatMessage.from_tool(REVIEW_EXPIRED_RESULT, origin=origin, error=True, meta={"reviewed": EXPIRE})


def apply_reviews(
    held: Sequence[ChatMessage], under_review: Sequence[ToolCall], reviews: Iterable[ToolResultReview]
) -> list[ChatMessage]:
    """The held results of a step as the model will see them; every call under review needs exactly one review.

    Raises ``ValueError`` (naming the call) for a missing, doubled or unmatched review.
    """
    bound = bind_decisions(list(under_review), reviews)
    by_call = {id(call): bound[i] for i, call in enumerate(under_review)}
    keys = {_key(call): by_call[id(call)] for call in under_review}
    released = []
    for message in held:
        outcome = message.tool_call_result
        assert outcome is not None
        review = keys.get(_key(outcome.origin))
        released.append(message if review is None else released_result(message, review))
    return released


def _key(call: ToolCall) -> tuple[str | None, str, str]:
    # Ids bind; an id-less call is known by its tool and arguments within the step.
    return (call.id, call.tool_name, canonical_json(call.arguments))
