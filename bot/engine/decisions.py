"""Deciding approvals: whether one is still open, who may decide it, and the decision it becomes."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from bot.engine.errors import AlreadyDecided, ApprovalClosed, ApprovalExpired, NotAnApprover
from bot.engine.model import CONFIRM, EXPIRED, MODIFY, PENDING, REJECT, SUPERSEDED, Mention
from bot.hitl.blocking import MODIFICATION_FEEDBACK_TEMPLATE, REJECTION_FEEDBACK_TEMPLATE, USER_FEEDBACK_TEMPLATE
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.redaction import mask_secrets

EXPIRED_FEEDBACK = "Tool execution for '{tool_name}' was rejected: expired without a decision."
ID_LESS_PREFIX = "no-id:"
"""Marks the stored key of a call the model gave no id (its decision must then carry none)."""
STATUS_OF_ACTION = {CONFIRM: "approved", REJECT: "rejected", MODIFY: "modified"}


def approval_call_key(call_id: str | None, step_message_id: str, position: int) -> str:
    """The key an approval stores for its call: the model's id, or a marked stand-in when it gave none.

    Model ids take many shapes (vLLM: ``functions.delete_file:0``), so an id-less call is recognised by
    its prefix, never by the shape of the id.
    """
    return call_id if call_id is not None else f"{ID_LESS_PREFIX}{step_message_id}:{position}"


def check_open(now: datetime, record: Any) -> None:
    """Raise why ``record`` can no longer be decided (expired, closed, decided); return if it can."""
    if record.status == PENDING and now >= record.expires_at:
        raise ApprovalExpired()
    if record.status == PENDING:
        return
    if record.status == EXPIRED:
        raise ApprovalExpired()
    if record.status in (SUPERSEDED, "cancelled"):
        raise ApprovalClosed(record.status)
    raise AlreadyDecided(record.status, record.decided_by, record.decided_at)


def authorize(is_admin: Callable[[str], bool], record: Any, actor: str, *, approver: bool | None = None) -> None:
    """Raise :class:`NotAnApprover` unless ``actor`` may decide ``record`` (approvers; else requester and admins;
    four-eyes excludes the requester).

    ``approver`` says whether ``actor`` is one of the record's approvers (a person named, or a member of a
    group named), as :func:`authorize_now` resolves it; by default only people named by id count.
    """
    if record.four_eyes and actor == record.requester:
        raise NotAnApprover("Four-eyes policy: you asked for this call, so someone else must approve it.")
    if record.approvers:
        if not (actor in record.approvers if approver is None else approver):
            raise NotAnApprover("You are not one of the approvers for this tool.")
        return
    if actor != record.requester and not is_admin(actor):
        raise NotAnApprover("Only the person who asked and countersign admins can decide this call.")


async def authorize_now(roles: Any, record: Any, actor: str, *, fresh: bool = True) -> None:
    """:func:`authorize` with groups resolved through ``roles`` (:class:`bot.engine.roles.Roles`).

    Decisions pass ``fresh=True`` (the default): group membership is read now, never from a cache.
    """
    approver = bool(record.approvers) and await roles.includes(record.approvers, actor, record.platform, fresh=fresh)
    admin = (
        not record.approvers
        and actor != record.requester
        and await roles.is_admin(actor, record.platform, fresh=fresh)
    )
    authorize(lambda _: admin, record, actor, approver=approver)


def who_decides(record: Any) -> tuple[str | Mention, ...]:
    """Who may decide ``record``, in words (the rule of :func:`authorize`), as parts of a :class:`Note`.

    >>> Note(who_decides(record)).plain()
    'U1 (who asked) or an admin'
    """
    if record.approvers:
        named: list[str | Mention] = []
        for entry in record.approvers:
            named += [", ", Mention(entry)] if named else [Mention(entry)]
        return tuple(named)
    if record.four_eyes:
        return ("an admin other than the person who asked",)
    return (Mention(record.requester), " (who asked) or an admin")


def decision_from_record(record: Any) -> ToolExecutionDecision:
    """The agent's decision for one settled approval: approved, edited, or (anything else) rejected."""
    call_id = None if record.tool_call_id.startswith(ID_LESS_PREFIX) else record.tool_call_id
    user_feedback = f" {USER_FEEDBACK_TEMPLATE.format(feedback=record.feedback)}" if record.feedback else ""
    if record.status == "approved":
        return ToolExecutionDecision(record.tool_name, True, call_id, final_tool_params=dict(record.arguments))
    if record.status == "modified":
        final = dict(record.final_arguments or record.arguments)
        # The explanation is text for the LLM and the thread's history: secret values stay masked in it
        # (as in bot.hitl.blocking); the call itself still runs with ``final``.
        feedback = MODIFICATION_FEEDBACK_TEMPLATE.format(
            tool_name=record.tool_name, final_tool_params=json.dumps(mask_secrets(final), ensure_ascii=False)
        )
        return ToolExecutionDecision(
            record.tool_name, True, call_id, feedback=feedback + user_feedback, final_tool_params=final
        )
    if record.status == EXPIRED:
        return ToolExecutionDecision(
            record.tool_name, False, call_id, feedback=EXPIRED_FEEDBACK.format(tool_name=record.tool_name)
        )
    # rejected, and anything unexpected: fail closed
    feedback = REJECTION_FEEDBACK_TEMPLATE.format(tool_name=record.tool_name) + user_feedback
    return ToolExecutionDecision(record.tool_name, False, call_id, feedback=feedback)
