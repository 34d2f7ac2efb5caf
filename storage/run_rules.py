"""The backend-neutral rules of runs: which statuses exist and own nothing, what a transition may set,
how a snapshot is checked before it is stored, and how a paused run is claimed.

Both backends (:mod:`storage.sqlite`, :mod:`storage.postgres`) apply them, so they live in neither.
"""

from __future__ import annotations

from typing import Any

from bot import jsonio
from storage.codec import dumps
from storage.protocols import RUN_STATUSES, TERMINAL_RUN_STATUSES, TokenUsage

_UNOWNED_STATUSES = ("paused", *TERMINAL_RUN_STATUSES)
"""Statuses in which a run has no owner: moving there clears the owner and the lease."""


_SETTABLE = ("snapshot_json", "error", "step")


def usage_columns(usage: TokenUsage | None) -> dict[str, int]:
    """The ``runs`` columns a transition (or a run's end) sets to record ``usage`` (none for ``None``), as
    :meth:`RunStore.record_usage` sets them."""
    if usage is None:
        return {}
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def _check_status(status: str) -> str:
    if status not in RUN_STATUSES:
        raise ValueError(f"unknown run status {status!r}; expected one of {RUN_STATUSES}")
    return status


def _snapshot_text(run_id: str, snapshot_json: str | dict[str, Any]) -> str:
    """Validate a snapshot before it is stored, so that a bad one fails the writer, not the resume.

    A dict (what the engine passes) is encoded once; text from other callers is parsed to check it.
    """
    if isinstance(snapshot_json, dict):
        return dumps(snapshot_json)
    try:
        parsed = jsonio.loads(snapshot_json)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"snapshot of run {run_id!r} is not valid JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise ValueError(f"snapshot of run {run_id!r} must be a JSON object")
    return snapshot_json


STEP_DECIDED = (
    " AND EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.run_id AND a.step = runs.step)"
    " AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = runs.run_id AND a.step = runs.step"
    " AND a.status = 'pending')"
)
"""The ``runs`` condition (both backends) of a paused step that has approvals, none of them pending."""


def claimed_status(step: int | None, start: bool) -> str:
    """The status ``claim_paused`` moves a paused run to (both backends): ``running`` when it starts the work too.

    Starting needs ``step``: the caller resumes that step's snapshot, so the claim must be pinned to it.
    """
    if start and step is None:
        raise ValueError("claim_paused(start=True) needs the step it resumes")
    return "running" if start else "resuming"
