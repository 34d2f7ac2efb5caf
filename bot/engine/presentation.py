"""Platform-free presentation of approvals: masked, truncated values and outcome sentences.

Adapters escape the strings returned here for their own markup; the full values stay in storage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.engine.breakglass_marks import MARK as BREAKGLASS_MARK
from bot.engine.breakglass_marks import NOT_OK
from bot.engine.model import (
    APPROVED,
    CANCELLED,
    EXPIRED,
    MODIFIED,
    REJECTED,
    RESPONDED,
    SUPERSEDED,
    ApprovalView,
    ToolStep,
)
from bot.engine.roles import group_label
from bot.redaction import MASK, is_secret_key, mask_for_display, mask_shown_part, mask_text, scrub

DEFAULT_VALUE_LIMIT = 500
ELLIPSIS = "…"


@dataclass(frozen=True)
class DisplayArgument:
    """One argument as it may be shown: ``text`` is masked and truncated; ``truncated`` says so."""

    name: str
    text: str
    truncated: bool
    secret: bool


def value_text(value: Any) -> str:
    """A value as one readable string (strings as is, anything else as compact JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def truncate(text: str, limit: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``limit`` characters, marking the cut with an ellipsis and the size."""
    if len(text) <= limit:
        return text, False
    note = f"{ELLIPSIS} (+{len(text) - limit} chars)"
    return text[: max(0, limit - len(note))] + note, True


def display_arguments(arguments: dict[str, Any], limit: int = DEFAULT_VALUE_LIMIT) -> list[DisplayArgument]:
    """Arguments in call order, secrets masked (by name and by value), each truncated to ``limit`` characters.

    >>> display_arguments({"path": "a.txt", "api_key": "sk-123"})[1].text
    '••••••'
    >>> display_arguments({"cmd": "curl -H 'Authorization: Bearer abc123'"})[0].text
    "curl -H 'Authorization: Bearer ••••••'"
    """
    shown = []
    for name, value in arguments.items():
        secret = is_secret_key(name)
        if secret:
            text = MASK
        elif isinstance(value, str):
            text = mask_shown_part(value, limit)  # a huge value is cut below: mask only what can show
        else:
            text = value_text(mask_for_display(value))
        text, cut = truncate(text, limit)
        shown.append(DisplayArgument(name=name, text=text, truncated=cut, secret=secret))
    return shown


TOOL_STEP_VALUE_LIMIT = 40
TOOL_STEP_LIMIT = 200


def tool_step_line(step: ToolStep, limit: int = TOOL_STEP_LIMIT) -> str:
    """One line for a call that ran without approval, masked like approvals and cut to ``limit`` characters.

    >>> tool_step_line(ToolStep("r1", "read_file", {"path": "notes.txt", "token": "x"}, "hello\nworld"))
    'read_file(path=notes.txt, token=••••••) → hello world'
    """
    arguments = ", ".join(f"{a.name}={a.text}" for a in display_arguments(step.arguments, TOOL_STEP_VALUE_LIMIT))
    # A tool may echo a secret argument back: scrub it by value, then mask what looks like one.
    result = " ".join(mask_shown_part(scrub(step.result[: limit + 8_192], step.arguments), limit).split())
    line = f"{step.tool_name}({arguments}) {'✗ failed:' if step.error else '→'} {result}"
    return truncate(" ".join(line.split()), limit)[0]


def display_result(view: ApprovalView, limit: int = DEFAULT_VALUE_LIMIT * 4) -> tuple[str, bool]:
    """A review's result as it may be shown: secrets masked, cut to ``limit`` characters (the full one stays stored).

    >>> display_result(review_of("token=abc123 ok"))
    ('token=•••••• ok', False)
    """
    return truncate(mask_shown_part(view.result or "", limit), limit)


def changed_arguments(view: ApprovalView) -> dict[str, Any]:
    """The arguments an edit changed (new values, secrets masked by name and by value)."""
    final = view.final_arguments or {}
    return mask_for_display({k: v for k, v in final.items() if view.arguments.get(k) != v})


def format_time(moment: datetime | None) -> str:
    """``2026-11-30 14:05 UTC``."""
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def outcome_sentence(view: ApprovalView) -> str:
    """One plain sentence saying what happened to an approval (untrusted parts are the adapter's to escape)."""
    who = view.decided_by or "someone"
    when = format_time(view.decided_at)
    if view.is_review:
        return _review_outcome(view, who, when)
    reason = f" Reason: {mask_text(view.feedback)}" if view.feedback else ""  # issue 31: justification
    if view.status == APPROVED and (view.feedback or "").startswith(BREAKGLASS_MARK):  # issue 31: break-glass
        why = breakglass_reason(view)
        state = "a review is due" if view.breakglass_review is None else "reviewed"
        return f"🔴 BREAK GLASS: run by {who} at {when} without an approval; {state}. Reason: {why}"
    if view.status == APPROVED:
        return f"Approved by {who} at {when}.{reason}"
    if view.status == REJECTED:
        feedback = f" Feedback: {mask_text(view.feedback)}" if view.feedback else ""
        return f"Rejected by {who} at {when}.{feedback}"
    if view.status == MODIFIED:
        change = ", ".join(f"{k}={value_text(v)}" for k, v in changed_arguments(view).items())
        return f"Edited and approved by {who} at {when}: {change}.{reason}"
    if view.status == RESPONDED:  # issue 30
        return f"Answered by {who} at {when} instead of running the tool: {mask_text(view.feedback or '')}"
    if view.status == EXPIRED:
        return f"Expired without a decision at {when}; the call was not run."
    if view.status == SUPERSEDED:
        return "Superseded by a newer message; the call was not run."
    if view.status == CANCELLED:
        return "Cancelled; the call was not run."
    votes = f" ({len(view.votes)}/{view.quorum} approvals)" if view.quorum > 1 else ""
    void = "".join(f" {void_vote_sentence(view, voter)}" for voter in view.void_votes)
    return f"Waiting for a decision until {format_time(view.expires_at)}{votes}.{void}"


def void_vote_sentence(view: ApprovalView, voter: str) -> str:
    """Why ``voter``'s vote no longer counts after an admin tightened the policy while the call waited (issue 30)."""
    if view.four_eyes and voter == view.requester:
        return f"{voter}'s approval no longer counts: four-eyes is on, and they asked for this call."
    approvers = ", ".join(group_label(a) for a in view.approvers) or "the requester and admins"
    return f"{voter}'s approval no longer counts: approvers are now {approvers}."


def is_breakglass_view(view: ApprovalView) -> bool:
    """Issue 31: whether ``view`` was decided by breaking glass (its card is shown in red)."""
    return view.status == APPROVED and not view.is_review and (view.feedback or "").startswith(BREAKGLASS_MARK)


def breakglass_reason(view: ApprovalView) -> str:
    """Issue 31: the reason given for a break-glass, masked (the adapter escapes it)."""
    return mask_text((view.feedback or "")[len(BREAKGLASS_MARK) :])


def breakglass_review_due(view: ApprovalView) -> bool:
    """Issue 31: whether a break-glass decision still waits for its review (the card offers Review: OK / Not OK)."""
    return is_breakglass_view(view) and view.breakglass_review is None


def breakglass_review_sentence(view: ApprovalView, reviewer: str | None = None) -> str | None:
    """Issue 31: the review's outcome, ``Review: not OK by @ben at …: too broad.`` (``None`` until reviewed);
    ``reviewer`` shows the reviewer (default: their id)."""
    review = view.breakglass_review
    if review is None:
        return None
    verdict = "not OK" if review.outcome == NOT_OK else "OK"
    note = f": {mask_text(review.note)}" if review.note else ""
    return f"Review: {verdict} by {reviewer or review.reviewer} at {format_time(review.at)}{note}."


def _review_outcome(view: ApprovalView, who: str, when: str) -> str:
    if view.status == APPROVED:
        return f"Result approved by {who} at {when}; the model sees it as it is."
    if view.status == REJECTED:
        feedback = f" Feedback: {mask_text(view.feedback)}" if view.feedback else ""
        return f"Result rejected by {who} at {when}; the model gets the feedback instead.{feedback}"
    if view.status == MODIFIED:
        return f"Result edited by {who} at {when}; the model sees the edited text."
    if view.status == EXPIRED:
        return f"Not reviewed in time ({when}); the result was withheld from the model."
    if view.status in (SUPERSEDED, CANCELLED):
        return f"{view.status.capitalize()}; the result was withheld from the model."
    votes = f" ({len(view.votes)}/{view.quorum} approvals)" if view.quorum > 1 else ""
    return f"The tool ran; its result waits for review until {format_time(view.expires_at)}{votes}."
