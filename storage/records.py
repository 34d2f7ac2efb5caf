"""Rows to records, shared by every backend: one mapping per record, so the backends cannot drift.

Each backend selects the columns in the order a mapper reads them and passes its own :class:`TimeReader`
(SQLite stores epoch seconds, PostgreSQL ``timestamptz``). JSON columns arrive as text on both.

>>> run_record(row, SQLITE_TIMES)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from storage.codec import loads, to_datetime, to_datetime_or_none
from storage.errors import StorageError
from storage.protocols import ApprovalRecord, InboxItem, LedgerEntry, OutboxMessage, RunRecord, ThreadAddress


@dataclass(frozen=True)
class TimeReader:
    """How a backend turns a stored time into an aware UTC ``datetime`` (``optional`` keeps ``None``)."""

    required: Callable[[Any], datetime]
    optional: Callable[[Any], datetime | None]


SQLITE_TIMES = TimeReader(to_datetime, to_datetime_or_none)
"""SQLite keeps times as epoch seconds (PostgreSQL's reader is ``storage.postgres.database.POSTGRES_TIMES``)."""


def decided_snapshot(text: str | None, run_id: str) -> dict[str, Any] | None:
    """A step's stored snapshot read along with the step (:class:`ApprovalStep`), parsed; ``None`` when there
    is none or it does not parse: the resume then reads it through ``RunStore.snapshot``, which says why."""
    if text is None:
        return None
    try:
        value = loads(text, kind="run", record_id=run_id)
    except StorageError:
        return None
    return value if isinstance(value, dict) else None


def qualified(columns: str, alias: str) -> str:
    """A mapper's column list with every column taken from table ``alias`` (for a join of two tables).

    >>> qualified("run_id, snapshot_json IS NOT NULL", "r")
    'r.run_id, r.snapshot_json IS NOT NULL'
    """
    return ", ".join(f"{alias}.{column.strip()}" for column in columns.split(","))


def approval_record(row: Any, times: TimeReader) -> ApprovalRecord:
    """Columns: approval_id, run_id, step, tool_call_id, tool_name, arguments_json, args_digest, requester,
    mode, approvers_json, quorum, four_eyes, platform, chat_history_id, message_ref_json, status, decided_by,
    decided_at, feedback, final_arguments_json, created_at, expires_at, kind, result, final_result, provenance_json,
    preview_json, request_reason."""
    approval_id = row[0]

    def parse(text: str | None) -> Any:
        return loads(text, kind="approval", record_id=approval_id)

    return ApprovalRecord(
        approval_id=approval_id,
        run_id=row[1],
        step=row[2],
        tool_call_id=row[3],
        tool_name=row[4],
        arguments=parse(row[5]),
        args_digest=row[6],
        requester=row[7],
        mode=row[8],
        approvers=tuple(parse(row[9])),
        quorum=row[10],
        four_eyes=bool(row[11]),
        platform=row[12],
        chat_history_id=row[13],
        message_ref=parse(row[14]),
        status=row[15],
        decided_by=row[16],
        decided_at=times.optional(row[17]),
        feedback=row[18],
        final_arguments=parse(row[19]),
        created_at=times.required(row[20]),
        expires_at=times.required(row[21]),
        kind=row[22],
        result=row[23],
        final_result=row[24],
        provenance=parse(row[25]),
        preview=parse(row[26]),
        request_reason=row[27],
    )


def run_record(row: Any, times: TimeReader) -> RunRecord:
    """Columns: run_id, chat_history_id, platform, workspace, channel, thread, requester, status, step, error,
    has_snapshot, created_at, updated_at, owner, lease_expires_at, recoveries, stop_requested_by."""
    return RunRecord(
        run_id=row[0],
        chat_history_id=row[1],
        platform=row[2],
        workspace=row[3],
        channel=row[4],
        thread=row[5],
        requester=row[6],
        status=row[7],
        step=row[8],
        error=row[9],
        has_snapshot=bool(row[10]),
        created_at=times.required(row[11]),
        updated_at=times.required(row[12]),
        owner=row[13],
        lease_expires_at=times.optional(row[14]),
        recoveries=row[15] or 0,
        stop_requested_by=row[16],
    )


def ledger_entry(row: Any, times: TimeReader) -> LedgerEntry:
    """Columns: tool_call_id, run_id, tool_name, args_digest, status, result, started_at, finished_at."""
    return LedgerEntry(
        tool_call_id=row[0],
        run_id=row[1],
        tool_name=row[2],
        args_digest=row[3],
        status=row[4],
        result=row[5],
        started_at=times.required(row[6]),
        finished_at=times.optional(row[7]),
    )


def inbox_item(row: Any, times: TimeReader) -> InboxItem:
    """Columns: id, chat_history_id, platform, workspace, channel, thread, requester, message_json (text),
    message_ref, received_at."""
    return InboxItem(
        id=row[0],
        address=ThreadAddress(row[1], row[2], row[3], row[4], row[5]),
        requester=row[6],
        message=loads(row[7], kind="inbox message", record_id=str(row[0])),
        message_ref=row[8],
        received_at=times.required(row[9]),
    )


def outbox_message(row: Any, times: TimeReader) -> OutboxMessage:
    """Columns: key, chat_history_id, platform, workspace, channel, thread, text, created_at, attempts,
    next_attempt_at, claimed_by, delivered_at."""
    return OutboxMessage(
        key=row[0],
        address=ThreadAddress(row[1], row[2], row[3], row[4], row[5]),
        text=row[6],
        created_at=times.required(row[7]),
        attempts=row[8],
        next_attempt_at=times.required(row[9]),
        claimed_by=row[10],
        delivered_at=times.optional(row[11]),
    )
