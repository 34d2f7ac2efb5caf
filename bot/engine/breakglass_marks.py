"""What a break-glass leaves on an approval, readable without the break-glass part (views and cards read it).

Pure names and predicates over stored records: the ``tool_settings`` setting, the mark of a break-glass decision's
feedback, the audit actions, and when a pending call opens to its requester. :mod:`bot.engine.breakglass` holds the
rules that use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from bot.engine.model import PENDING, BreakGlassReview
from storage.protocols import ApprovalRecord, AuditEntry

SETTING = "breakglass"
"""The ``tool_settings`` setting: the delay in seconds after which the requester may break glass."""
AUDIT_ACTION = "break-glass"
REVIEW_ACTION = "break-glass review"
MARK = "[break-glass] "
"""The start of a break-glass decision's stored feedback: how a decided card knows to show it in red."""
OK, NOT_OK = "ok", "not-ok"
MIN_DELAY = timedelta(seconds=1)
"""The shortest delay ``breakglass after`` takes: a call younger than this cannot offer break-glass yet."""


def is_breakglass(record: ApprovalRecord) -> bool:
    """Whether ``record`` was decided by breaking glass."""
    return record.status == "approved" and (record.feedback or "").startswith(MARK)


def reason_of(feedback: str | None) -> str:
    """The reason of a break-glass decision's stored feedback (without :data:`MARK`)."""
    text = feedback or ""
    return text[len(MARK) :] if text.startswith(MARK) else text


def is_tainted(record: ApprovalRecord) -> bool:
    """Whether a call had an argument copied from untrusted text (its stored provenance lists one)."""
    provenance = record.provenance or {}
    return bool(provenance.get("tainted"))


def delay_seconds(value: str | None) -> int | None:
    """A stored delay setting as seconds (``None``: not set or unreadable)."""
    return int(value) if value and value.isdigit() else None


def opens_at(record: ApprovalRecord, delay: int | None) -> datetime | None:
    """When the requester may break glass on ``record`` with the tool's ``delay`` (``None``: never)."""
    if delay is None or record.kind != "approval" or record.mode == "deny" or is_tainted(record):
        return None
    return record.created_at + timedelta(seconds=delay)


def may_open(record: ApprovalRecord, now: datetime) -> bool:
    """Whether ``record`` could offer break-glass now with some delay (so its tool's delay is worth reading)."""
    return record.status == PENDING and opens_at(record, 0) is not None and now - record.created_at >= MIN_DELAY


def review_of(entries: Sequence[AuditEntry]) -> BreakGlassReview | None:
    """The review of a break-glass among its audit entries (the newest one), or ``None``."""
    for entry in sorted(entries, key=lambda e: e.id, reverse=True):
        if entry.action == REVIEW_ACTION:
            note = entry.details.get("note")
            return BreakGlassReview(
                reviewer=entry.actor,
                outcome=str(entry.details.get("outcome", "")),
                note=note if isinstance(note, str) else None,
                at=entry.at,
            )
    return None
