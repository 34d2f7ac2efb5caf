"""The backend-neutral rules of approvals: who closes them, and how a new one is checked and laid out.

Both backends insert approvals with :func:`_row_values`, so it lives in neither.
"""

from __future__ import annotations

from typing import Any

from bot.canonical import args_digest as digest_of
from bot.ids import new_approval_id
from storage.codec import dumps, epoch
from storage.protocols import APPROVAL_KINDS, POLICY_MODES, NewApproval

SYSTEM_ACTOR = "countersign"
"""``decided_by`` of approvals closed by the bot itself (expired, superseded, cancelled)."""


def _row_values(new: NewApproval, now: float) -> list[Any]:
    """Validate one :class:`NewApproval` and return its column values (in ``_INSERT`` order)."""
    digest = digest_of(new.arguments)
    if new.args_digest is not None and new.args_digest != digest:
        raise ValueError(f"args_digest of tool call {new.tool_call_id!r} does not match its arguments")
    if new.mode not in POLICY_MODES:
        raise ValueError(f"unknown policy mode {new.mode!r}; expected one of {POLICY_MODES}")
    if new.kind not in APPROVAL_KINDS:
        raise ValueError(f"unknown approval kind {new.kind!r}; expected one of {APPROVAL_KINDS}")
    if (new.kind == "review") != (new.result is not None):
        raise ValueError("a review (and only a review) carries the result it holds back")
    if isinstance(new.quorum, bool) or not isinstance(new.quorum, int) or new.quorum < 1:
        raise ValueError(f"quorum must be a positive integer, not {new.quorum!r}")
    if isinstance(new.approvers, str):
        raise ValueError("approvers must be a list of user ids, not one string")
    created = now if new.created_at is None else epoch(new.created_at)
    expires = epoch(new.expires_at)
    if expires <= created:
        raise ValueError(f"approval for tool call {new.tool_call_id!r} would expire before it is created")
    return [
        new.approval_id or new_approval_id(),
        new.run_id,
        new.step,
        new.tool_call_id,
        new.tool_name,
        dumps(new.arguments),
        digest,
        new.requester,
        new.mode,
        dumps(list(new.approvers)),
        new.quorum,
        int(new.four_eyes),
        new.platform,
        new.chat_history_id,
        created,
        expires,
        new.kind,
        new.result,
        dumps(new.provenance) if new.provenance is not None else None,
        dumps(new.preview) if new.preview is not None else None,
        new.request_reason,
    ]


CLOSED_RUN_APPROVALS_REASON = "closed at upgrade: its run had ended"
"""The feedback of the approvals :func:`_close_approvals_of_ended_runs` closes (both backends)."""
