"""Review after acting in the engine: which results policy holds for a person, and what each review decides."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bot.agent.snapshot import AgentSnapshot
from bot.engine.confirmation import REVIEW_MODES, effective_policy, note_policy, policy_of
from bot.engine.decisions import ID_LESS_PREFIX
from bot.engine.errors import InvalidEdit
from bot.engine.model import EXPIRED
from bot.hooks import HookEvent, ToolResultReview
from bot.hooks.review import APPROVE, EDIT, EXPIRE, REJECT
from bot.messages import ToolCall
from bot.tools import Tool
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

REVIEW = "review"
"""The ``kind`` of an approval that decides what the model sees of a result (the other kind is ``approval``)."""
MAX_EDITED_RESULT = 20_000
"""The longest edited result a reviewer may give the model (characters)."""
WITHHELD_AFTER_RESTART = "result withheld: the bot restarted before it was reviewed"


class PolicyReviewHook:
    """The engine's ``after_tool`` hook: a tool whose policy is ``review`` or ``always+review`` is held for review.

    The policy is read per channel from storage, as the confirmation strategy reads it before the call.
    """

    def __init__(self, storage: AsyncStores, tools: Mapping[str, Tool], default_ttl: int, ledger: Any = None) -> None:
        self.storage = storage
        self.tools = tools
        self.default_ttl = default_ttl
        self.ledger = ledger
        """The engine's ledger: the policy read with the call's outcome (just now, after it ran) is used, if any."""

    async def __call__(self, event: HookEvent) -> None:
        """Ask for a review when the tool's effective policy, read now (time of use), says so."""
        call, context = event.tool_call, event.confirmation_strategy_context
        assert call is not None
        tool = self.tools.get(call.tool_name)
        if tool is None or not context:  # as in needs_review: nothing to review, or no channel to have a policy
            return
        view = self.ledger.policy_seen(event.run_id, call.tool_name, call.id) if self.ledger is not None else None
        if view is not None:  # read in the transaction that recorded the call's outcome: no read of its own
            policy = await policy_of(view, tool, context, self.default_ttl, call.arguments)
        else:
            policy = await effective_policy(self.storage, tool, context, self.default_ttl, arguments=call.arguments)
        note_policy(context, call.tool_name, call.id, call.arguments, policy)  # the review's pause stores it
        if policy.mode in REVIEW_MODES:
            event.request_review(f"policy of {call.tool_name} asks for review")

    def to_dict(self) -> dict[str, Any]:
        """Not serialisable: it is bound to a live storage."""
        raise TypeError("PolicyReviewHook is bound to live storage and is not serialisable")


async def needs_review(
    storage: AsyncStores,
    tools: Mapping[str, Tool],
    tool_name: str,
    context: Mapping[str, Any] | None,
    default_ttl: int,
    arguments: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the result of ``tool_name`` in this channel must be reviewed before the model sees it (with the
    call's ``arguments``, a rule with a condition on them counts, as it did when the call was let through)."""
    tool = tools.get(tool_name)
    if tool is None or not context:  # "not found" has nothing to review; without a channel there is no policy
        return False
    return (await effective_policy(storage, tool, context, default_ttl, arguments=arguments)).mode in REVIEW_MODES


def held_result(snapshot: AgentSnapshot, call: ToolCall) -> str:
    """The full result of ``call`` held in a review snapshot."""
    for message in snapshot.held_results:
        outcome = message.tool_call_result
        if outcome is not None and outcome.origin is call:
            return outcome.result
    raise ValueError(f"no held result for tool call {call.id!r}")


def edited_result(text: Any) -> str:
    """A reviewer's edited result, checked: non-empty text of a bounded size (:class:`InvalidEdit` otherwise)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidEdit({"result": "the edited result must not be empty"})
    if len(text) > MAX_EDITED_RESULT:
        raise InvalidEdit({"result": f"the edited result is longer than {MAX_EDITED_RESULT} characters"})
    return text


def review_from_record(record: ApprovalRecord) -> ToolResultReview:
    """The agent's review for one settled review record: approved, edited, rejected, or (anything else) withheld."""
    call_id = None if record.tool_call_id.startswith(ID_LESS_PREFIX) else record.tool_call_id
    if record.status == "approved":
        return ToolResultReview(record.tool_name, call_id, APPROVE)
    if record.status == "modified" and record.final_result is not None:
        return ToolResultReview(record.tool_name, call_id, EDIT, result=record.final_result)
    if record.status == "rejected":
        return ToolResultReview(record.tool_name, call_id, REJECT, feedback=record.feedback)
    if record.status != EXPIRED:  # superseded, cancelled, anything unexpected: fail closed, never release
        return ToolResultReview(record.tool_name, call_id, REJECT, feedback=f"the review was {record.status}")
    return ToolResultReview(record.tool_name, call_id, EXPIRE)
