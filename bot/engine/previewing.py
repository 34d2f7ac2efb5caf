"""Previews in the engine (issue 30): computed at a pause, stored with the approval, checked again before the run.

- At a pause, every pending call of a tool with ``preview=`` gets its preview computed (concurrently, each within
  ``COUNTERSIGN_PREVIEW_TIMEOUT``) and stored with its approval (:func:`stored_preview`).
- ``preview_required`` refuses Approve while the stored preview is not ``ok`` (:func:`approve_refusal`).
- Right before an approved call runs, its preview is computed again (:meth:`Prechecks.check`): a digest that differs
  from the approved one keeps the call from running; it is asked again, its new approval showing the approved
  preview beside the new one. A call that passes gets the approved preview's text as ``approved_preview`` when its
  tool takes one (through the ledger's claim: :attr:`StorageExecutionLedger.approved_previews`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot import failpoints
from bot.agent import AgentSnapshot
from bot.engine.decisions import approval_call_key
from bot.engine.errors import EngineError
from bot.engine.ledger import StorageExecutionLedger, ledger_key
from bot.engine.model import MODIFY
from bot.hitl.apply import bind_decisions
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.previews import (
    CHANGED_SINCE_APPROVED,
    Preview,
    approval_refusal,
    compute_preview,
    recheck,
    shown_preview,
    takes_approved_preview,
)
from bot.messages import ToolCall
from bot.tools import Tool
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)


class PreviewRequired(EngineError):
    """``preview_required`` and the call's preview failed, timed out or is missing: it may not be approved."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"{reason} Nothing was decided; reject it, or ask again once the preview works.")


EDITED_REASON = "The call was edited: its preview was computed again for the edited arguments."
NOT_RUN_AFTER_RESTART = (
    "not run: the bot restarted before this call ran, and its preview no longer matches the approved one; "
    "ask for it again if it is still wanted"
)
"""What the model is told of an approved call that a recovery finds with a changed preview (it never runs)."""


def stored_preview(
    preview: Preview, *, approved: Preview | None = None, reason: str = "", arguments: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A preview as an approval row stores it (``approved``/``reason``: a re-asked call's approved preview and why)."""
    data: dict[str, Any] = {"status": preview.status, "text": preview.text, "digest": preview.digest}
    if approved is not None:
        data["approved"] = {"status": approved.status, "text": approved.text, "digest": approved.digest}
    if reason:
        data["reason"] = reason
    if arguments is not None:
        data["arguments"] = dict(arguments)
    return data


def preview_of(data: Mapping[str, Any] | None) -> Preview | None:
    """The :class:`Preview` an approval row stored (``None``: the call had none)."""
    if not isinstance(data, Mapping) or data.get("status") not in ("ok", "failed", "timeout"):
        return None
    digest = data.get("digest")
    return Preview(data["status"], str(data.get("text") or ""), digest if isinstance(digest, str) else None)


def approved_preview_of(data: Mapping[str, Any] | None) -> Preview | None:
    """A re-asked approval's earlier, approved preview (``None``: not a re-ask)."""
    return preview_of(data.get("approved")) if isinstance(data, Mapping) else None


SHOW_MORE_LIMIT = 6_000
"""How much of each preview "show more" shows (Slack's modal, Teams' ``Action.ShowCard``), masked; a card shows less
(its own limit) and the full text stays in the approval row."""


def is_cut(data: Mapping[str, Any] | None, limit: int) -> bool:
    """Whether showing the stored preview at ``limit`` characters cuts any part of it (offer "show more" then)."""
    return any(section.cut for section in preview_sections(data, limit))


@dataclass(frozen=True)
class PreviewSection:
    """One part of a preview as an approval shows it: a label, the masked and cut text, whether it was cut."""

    label: str
    text: str
    cut: bool = False


def preview_sections(data: Mapping[str, Any] | None, limit: int) -> list[PreviewSection]:
    """What an approval shows of its stored preview (every surface words it alike): the preview, or for a re-asked
    call the reason, the approved preview and the new one ("changed since you approved"). Masked and cut to
    ``limit`` (:func:`bot.hitl.previews.shown_preview`)."""
    preview = preview_of(data)
    if preview is None:
        return []
    label = {"ok": "preview", "failed": "preview failed", "timeout": "preview timed out"}[preview.status]
    text, cut = shown_preview(preview, limit)
    approved = approved_preview_of(data)
    if approved is None:
        return [PreviewSection(label, text, cut)]
    reason = str(data.get("reason") or "") if data is not None else ""
    before, before_cut = shown_preview(approved, limit)
    return [
        PreviewSection(CHANGED_SINCE_APPROVED, reason or f"The preview {CHANGED_SINCE_APPROVED}."),
        PreviewSection("approved preview", before, before_cut),
        PreviewSection(f"{label} now", text, cut),
    ]


def approve_refusal(tool: Tool | None, record: ApprovalRecord) -> str | None:
    """Why this approval may not be approved (``preview_required`` and no good preview), else ``None``."""
    if tool is None or record.kind != "approval":
        return None
    return approval_refusal(tool, preview_of(record.preview))


def audit_preview(record: ApprovalRecord) -> dict[str, Any]:
    """What a decision's audit entry says of the preview it was made on (nothing without one)."""
    preview = preview_of(record.preview)
    if preview is None:
        return {}
    return {"preview_status": preview.status, "preview_digest": preview.digest}


async def pause_previews(
    tools: Mapping[str, Tool], calls: Sequence[ToolCall], seconds: float, asked: Sequence[int]
) -> dict[int, Preview]:
    """The previews of the ``asked`` calls (by position) whose tools have one, computed concurrently, each within
    ``seconds``."""
    wanted = [(i, tools[calls[i].tool_name]) for i in asked if calls[i].tool_name in tools]
    wanted = [(i, t) for i, t in wanted if t.preview is not None]
    if not wanted:
        return {}
    computed = await asyncio.gather(*(compute_preview(t, calls[i].arguments, seconds) for i, t in wanted))
    return {i: p for (i, _), p in zip(wanted, computed, strict=True) if p is not None}


@dataclass(frozen=True)
class Reask:
    """Calls of a resumed step whose preview changed since approval: the pause that asks them again."""

    pause: HITLBreakpointException
    previews: dict[str, dict[str, Any]]
    """Per re-asked call (its approval's ``tool_call_id``): the preview to store, with the approved one."""
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per re-asked edited call: the edited arguments the new approval asks about."""
    audit: list[dict[str, Any]] = field(default_factory=list)
    """One entry per re-asked call: the tool, its old approval, the approved and the new digest, why."""


class Prechecks:
    """The re-check right before a resumed step's approved calls run (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        ledger: StorageExecutionLedger,
        *,
        clock: Callable[[], datetime],
        seconds: float,
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.ledger = ledger
        self.clock = clock
        self.seconds = seconds

    async def check(
        self,
        run_id: str,
        snapshot: AgentSnapshot,
        records: Sequence[ApprovalRecord],
        decisions: list[ToolExecutionDecision],
        started: Collection[int] = (),
    ) -> Reask | None:
        """Compute the preview of each approved call again; ``None``: every one matches (they run, each given its
        approved preview if its tool takes it), else the pause that asks the changed ones again.

        ``decisions``: what the step resumes with, those made at the pause first, then one per record (in order).
        ``started``: positions of calls that began already (a recovery finds them in the ledger): not judged.
        """
        step = snapshot.step_message
        try:
            bound = bind_decisions(step.tool_calls, decisions)
        except ValueError:
            return None  # decisions that do not fit the step: applying them refuses it, nothing of it runs
        offset = len(decisions) - len(records)
        record_of = {id(decisions[offset + n]): r for n, r in enumerate(records)}
        checks: list[tuple[int, ToolCall, Tool, ApprovalRecord, dict[str, Any]]] = []
        for position, decision in bound.items():
            record = record_of.get(id(decision))
            tool = self.tools.get(decision.tool_name)
            if record is None or tool is None or tool.preview is None or not decision.execute or position in started:
                continue
            call = step.tool_calls[position]
            final = dict(decision.final_tool_params) if decision.final_tool_params is not None else dict(call.arguments)
            checks.append((position, call, tool, record, final))
        if not checks:
            return None
        fresh = await asyncio.gather(*(compute_preview(t, final, self.seconds) for _, _, t, _, final in checks))
        failpoints.failpoint("after_preview_recheck")
        changed: list[tuple[int, ToolCall, Tool, ApprovalRecord, dict[str, Any], Preview | None, str]] = []
        for (position, call, tool, record, final), now in zip(checks, fresh, strict=True):
            approved = preview_of(record.preview)
            outcome = recheck(tool, approved.digest if approved is not None else None, now)
            if outcome.run:
                if approved is not None and takes_approved_preview(tool):
                    key = ledger_key(run_id, call.id or f"{step.id}:{position}")
                    self.ledger.approved_previews[key] = approved.text
                continue
            reason = EDITED_REASON if record.status == "modified" else outcome.reason
            changed.append((position, call, tool, record, final, now, reason))
        if not changed:
            return None
        return self._reask(snapshot, bound, changed)

    async def recovered(
        self,
        run_id: str,
        snapshot: AgentSnapshot,
        records: Sequence[ApprovalRecord],
        decisions: list[ToolExecutionDecision],
        started: Collection[int],
    ) -> list[ToolExecutionDecision]:
        """A recovery's re-check of the calls it is about to run: one whose preview no longer matches is not run (its
        decision becomes a rejection the model is told about); the others run with their approved preview."""
        reask = await self.check(run_id, snapshot, records, decisions, started)
        if reask is None:
            return decisions
        again = {id(c) for c in reask.pause.pending_tool_calls}
        bound = bind_decisions(snapshot.step_message.tool_calls, decisions)
        changed = {id(d) for p, d in bound.items() if id(snapshot.step_message.tool_calls[p]) in again}
        logger.warning("a recovered call's preview changed since it was approved; not run", extra={"run_id": run_id})
        return [
            ToolExecutionDecision(d.tool_name, False, d.tool_call_id, feedback=NOT_RUN_AFTER_RESTART)
            if id(d) in changed
            else d
            for d in decisions
        ]

    def _reask(
        self,
        snapshot: AgentSnapshot,
        bound: Mapping[int, ToolExecutionDecision],
        changed: Sequence[tuple[int, ToolCall, Tool, ApprovalRecord, dict[str, Any], Preview | None, str]],
    ) -> Reask:
        step = snapshot.step_message
        again = {position for position, *_ in changed}
        # The decisions that still stand go with the snapshot; only the changed calls are asked again.
        standing = [bound[p] for p in sorted(bound) if p not in again]
        pending = [step.tool_calls[p] for p in sorted(again)]
        previews: dict[str, dict[str, Any]] = {}
        arguments: dict[str, dict[str, Any]] = {}
        audit: list[dict[str, Any]] = []
        for position, call, _tool, record, final, now, reason in changed:
            key = approval_call_key(call.id, step.id, position)
            approved = preview_of(record.preview)
            shown = now if now is not None else Preview("failed", "The preview returned nothing.", None)
            previews[key] = stored_preview(shown, approved=approved, reason=reason)
            if record.status == "modified" or final != call.arguments:
                arguments[key] = final
            audit.append(
                {
                    "tool": record.tool_name,
                    "approval": record.approval_id,
                    "approved_digest": approved.digest if approved is not None else None,
                    "new_digest": shown.digest,
                    "new_status": shown.status,
                    "reason": reason,
                    "edited": record.status == MODIFY or record.status == "modified",
                }
            )
        pause = HITLBreakpointException(
            f"{len(pending)} tool call(s) must be approved again: the preview changed",
            tool_name=pending[0].tool_name,
            tool_call_id=pending[0].id,
        )
        pause.snapshot = replace(snapshot, decisions=standing, pending_tool_calls=list(pending))
        pause.pending_tool_calls = list(pending)
        return Reask(pause, previews, arguments, audit)
