"""Deciding approvals: whether one is still open, who may decide it, and the decision it becomes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.confirmation import DENY, best_condition, policy_of
from bot.engine.errors import AlreadyDecided, ApprovalClosed, ApprovalExpired, NotAnApprover
from bot.engine.model import (
    BREAKGLASS,
    CONFIRM,
    EXPIRED,
    MODIFY,
    PENDING,
    REJECT,
    RESPOND,
    RESPONDED,
    SUPERSEDED,
    Mention,
)
from bot.engine.roles import Roles
from bot.hitl.apply import bind_decisions
from bot.hitl.blocking import MODIFICATION_FEEDBACK_TEMPLATE, REJECTION_FEEDBACK_TEMPLATE, USER_FEEDBACK_TEMPLATE
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.respond import human_response
from bot.messages import ToolCall
from bot.redaction import mask_secrets
from bot.tools import Tool
from storage.policy_rules import channel_scopes
from storage.protocols import ApprovalRecord, PolicyView

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

EXPIRED_FEEDBACK = "Tool execution for '{tool_name}' was rejected: expired without a decision."
BLOCKED_AFTER_APPROVAL_FEEDBACK = (
    "Tool execution for '{tool_name}' was blocked by policy: it was denied after this call was approved."
)
"""What the model is told of an approved call that a ``deny`` set since stopped (:func:`step_decisions`)."""
BLOCKED_AFTER_APPROVAL = "blocked after approval"
"""The audit action of such a call."""
ID_LESS_PREFIX = "no-id:"
"""Marks the stored key of a call the model gave no id (its decision must then carry none)."""
STATUS_OF_ACTION = {
    CONFIRM: "approved",
    REJECT: "rejected",
    MODIFY: "modified",
    BREAKGLASS: "approved",
    RESPOND: "responded",
}
"""A break-glass decision is an approval (bot.engine.breakglass marks it in its feedback and audit action)."""


def approval_call_key(call_id: str | None, step_message_id: str, position: int) -> str:
    """The key an approval stores for its call: the model's id, or a marked stand-in when it gave none.

    Model ids take many shapes (vLLM: ``functions.delete_file:0``), so an id-less call is recognised by
    its prefix, never by the shape of the id.
    """
    return call_id if call_id is not None else f"{ID_LESS_PREFIX}{step_message_id}:{position}"


def check_open(now: datetime, record: ApprovalRecord) -> None:
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


def authorize(
    is_admin: Callable[[str], bool], record: ApprovalRecord, actor: str, *, approver: bool | None = None
) -> None:
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


async def authorize_now(roles: Roles, record: ApprovalRecord, actor: str, *, fresh: bool = True) -> None:
    """:func:`authorize` with groups resolved through ``roles`` (:class:`bot.engine.roles.Roles`).

    Decisions pass ``fresh=True`` (the default): group membership is read now, never from a cache.
    """
    approver = bool(record.approvers) and await roles.includes(record.approvers, actor, record.platform, fresh=fresh)
    admin = (
        not record.approvers and actor != record.requester and await roles.is_admin(actor, record.platform, fresh=fresh)
    )
    authorize(lambda _: admin, record, actor, approver=approver)


def who_decides(record: ApprovalRecord) -> tuple[str | Mention, ...]:
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


def decision_from_record(record: ApprovalRecord) -> ToolExecutionDecision:
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
    if record.status == RESPONDED:  # issue 30: the person's text is the call's answer; the tool never runs
        return ToolExecutionDecision(record.tool_name, False, call_id, feedback=human_response(record.feedback or ""))
    if record.status == EXPIRED:
        return ToolExecutionDecision(
            record.tool_name, False, call_id, feedback=EXPIRED_FEEDBACK.format(tool_name=record.tool_name)
        )
    # rejected, and anything unexpected: fail closed
    feedback = REJECTION_FEEDBACK_TEMPLATE.format(tool_name=record.tool_name) + user_feedback
    return ToolExecutionDecision(record.tool_name, False, call_id, feedback=feedback)


@dataclass(frozen=True)
class BlockedCall:
    """A call of a decided step that was to run, stopped because its tool's policy is ``deny`` now."""

    tool_name: str
    tool_call_id: str | None
    approval_id: str | None
    """The call's approval; ``None`` for a call the policy let run without asking (decided at the pause)."""
    denied_by: dict[str, Any]
    """Where the ``deny`` comes from: the rule's scope, its condition if it has one, and who set it."""


async def step_decisions(
    storage: AsyncStores,
    step_calls: Sequence[ToolCall],
    decided: Sequence[ToolExecutionDecision],
    records: Sequence[Any],
    *,
    run_id: str,
    tools: Mapping[str, Tool],
    context: Mapping[str, Any],
    default_ttl: int,
    now: datetime,
    views: Mapping[str, PolicyView] | None = None,
    started: Collection[int] = (),
) -> list[ToolExecutionDecision]:
    """Every decision a paused step resumes with (``decided``: those made at the pause; then one per approval
    record), with each call that was to run checked against its tool's policy now: one whose policy in the run's
    channel, on the call's final arguments, is ``deny`` does not run (its decision becomes a rejection the model is
    told about, and an audit entry says so). The approval records themselves stay as decided.

    The one place this rule lives: a resume after a decision, a resume by the sweep, and a recovery all apply it
    right before the calls run. ``context``: the run's ``platform``, ``workspace`` and ``channel``; ``views``: the
    tools' policy views in that channel read just now (with the decision that completed the step); tools missing
    from them are read here, in one read. ``started``: the positions in ``step_calls`` of calls that started already
    (a recovery finds them in the execution ledger): they are not about to run, so they are not judged.
    """
    decisions = [*decided, *(decision_from_record(r) for r in records)]
    try:
        position = {id(d): p for p, d in bind_decisions(step_calls, decisions).items()}
    except ValueError:  # decisions that do not fit the step: applying them refuses the step, nothing of it runs
        position = {}
    running = [(i, d) for i, d in enumerate(decisions) if d.execute and position.get(id(d)) not in started]
    if not running:
        return decisions
    names = list(dict.fromkeys(d.tool_name for _, d in running))
    missing = [name for name in names if views is None or name not in views]
    if missing:
        fresh = await storage.policies.views(
            missing, platform=context["platform"], workspace=context["workspace"], channel=context["channel"]
        )
        views = {**(views or {}), **{name: fresh[name] for name in missing}}
    assert views is not None
    blocked: list[BlockedCall] = []
    for i, decision in running:
        arguments = _final_arguments(decision, step_calls, position.get(id(decision)))
        view, tool = views[decision.tool_name], tools.get(decision.tool_name)
        if not _may_deny(view, tool):  # the usual case: no rule (or default) could deny it, so nothing to evaluate
            continue
        policy = await policy_of(view, tool, context, default_ttl, arguments=arguments)
        if policy.mode != DENY:
            continue
        approval_id = records[i - len(decided)].approval_id if i >= len(decided) else None
        blocked.append(
            BlockedCall(
                decision.tool_name,
                decision.tool_call_id,
                approval_id,
                await _denied_by(storage, view, context, arguments),
            )
        )
        decisions[i] = ToolExecutionDecision(
            decision.tool_name,
            False,
            decision.tool_call_id,
            feedback=BLOCKED_AFTER_APPROVAL_FEEDBACK.format(tool_name=decision.tool_name),
        )
    for call in blocked:
        logger.info("approved call blocked by policy", extra={"tool": call.tool_name, "approval_id": call.approval_id})
        await storage.audit.append(
            "countersign",
            BLOCKED_AFTER_APPROVAL,
            call.approval_id or run_id,
            {"tool": call.tool_name, "run_id": run_id, "tool_call_id": call.tool_call_id, "policy": call.denied_by},
            now=now,
        )
    return decisions


def _may_deny(view: PolicyView, tool: Tool | None) -> bool:
    """Whether the tool's policy could be ``deny`` for some arguments: a plain or conditional rule says so, or, with
    no rule setting the mode, the tool's own default does (``needs_approval`` only ever asks or lets run)."""
    if view.rule.mode == DENY or any(c.mode == DENY for c in view.conditions):
        return True
    return view.rule.mode is None and tool is not None and tool.confirmation_default == DENY


def _final_arguments(
    decision: ToolExecutionDecision, step_calls: Sequence[ToolCall], position: int | None
) -> dict[str, Any]:
    """The arguments a call would run with: its decision's final ones, else the call's own (at ``position``)."""
    if decision.final_tool_params is not None:
        return dict(decision.final_tool_params)
    if position is not None:
        return dict(step_calls[position].arguments)
    return {}  # matches no call: it cannot run anyway (applying the decisions refuses the step)


async def _denied_by(
    storage: AsyncStores, view: PolicyView, context: Mapping[str, Any], arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """Where a ``deny`` comes from, for the audit log: the matching conditional rule or the plain rule (its scope,
    and who last set it: a read of its own, made only for a call that is blocked)."""
    matched = best_condition(view.conditions, context, arguments)
    if matched is not None and matched[1] == DENY:
        scopes = channel_scopes(context["platform"], context["workspace"], context["channel"])
        scope = scopes[len(scopes) - matched[0][0]]
        rule = next((c for c in view.conditions if c.scope == scope and c.condition == matched[2]), None)
        return {"scope": scope, "condition": matched[2], "set_by": rule.updated_by if rule else None}
    source = view.rule.sources.get("mode")
    if source is None:  # no admin's rule: the tool's own default
        return {"scope": None}
    plain = await storage.policies.get_rule(*source)
    return {"scope": source[0], "rule": source[1], "set_by": plain.updated_by if plain else None}
