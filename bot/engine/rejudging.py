"""Judging pending approvals again after an admin tightens a policy (issue 30: policy changes while a call waits).

After ``policy set``, ``policy reset``, ``approvers``, ``quorum`` and ``four-eyes`` (and ``group set`` /
``group delete``, for every tool), each pending approval in the
workspace of a tool the command names (a tool, a tool group, ``*``) gets its tool's policy read afresh in its run's
channel, on its own arguments:

- ``deny`` closes it: it is rejected by the admin with a sentence (the model and the card get it; the thread is
  told once, through the outbox), and its step resumes like after any rejection;
- stricter approvers, a larger quorum or four-eyes are given to it (:meth:`ApprovalStore.rejudge`) and its card is
  re-rendered; the votes whose voters may not decide under the new rule are voided, and every surface says so
  ("U_ANN's approval no longer counts: approvers are now @sre", :func:`bot.engine.presentation.void_vote_sentence`);
- after ``group set`` / ``group delete`` the rule may be the same but a group's members not: the votes of people
  no longer in it are voided the same way (a group that only grows changes nothing);
- a looser rule changes nothing: the approval keeps the stricter rule it paused with (each part is taken at its
  stricter value, so a change that loosens one part and tightens another applies the tightened part only).

Every closing and every re-judged approval has its audit entry (``closed by policy``, ``rejudged``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.confirmation import DENY, effective_policy
from bot.engine.deciding import Deciding
from bot.engine.decisions import authorize_now
from bot.engine.errors import EngineError
from bot.engine.model import AdminRequest, Mention, Note
from bot.engine.outbox import Deliveries
from bot.engine.roles import Roles
from bot.engine.threads import channel_of
from bot.engine.views import Views
from bot.tools import Tool
from storage.batch import Batch, stores
from storage.protocols import COUNTED_VOTES, ApprovalRecord

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

CLOSED_BY_POLICY = "closed by policy"
REJUDGED = "rejudged"


def denied_sentence(tool_name: str) -> str:
    """What the card, the model and the thread are told of a pending call that a ``deny`` closed."""
    return f"An admin set {tool_name} to deny while this call waited, so it was closed without running."


@dataclass(frozen=True)
class Rejudged:
    """What judging the pending approvals again did (the admin's answer says it)."""

    closed: int = 0
    tightened: int = 0
    voided: int = 0

    def sentence(self) -> str:
        """One line for the admin, empty when nothing changed."""
        parts = []
        if self.closed:
            parts.append(f"{self.closed} pending approval(s) closed (denied)")
        if self.tightened:
            parts.append(f"{self.tightened} pending approval(s) now follow the stricter rule")
        if self.voided:
            parts.append(f"{self.voided} earlier approval(s) no longer count")
        return ("Pending: " + "; ".join(parts) + ".") if parts else ""


class Rejudging:
    """Judges the pending approvals of the tools a policy change names again (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        *,
        roles: Roles,
        views: Views,
        deciding: Deciding,
        deliveries: Deliveries,
        clock: Callable[[], datetime],
        default_ttl: int,
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.roles = roles
        self.views = views
        self.deciding = deciding
        self.deliveries = deliveries
        self.clock = clock
        self.default_ttl = default_ttl

    async def after_change(self, request: AdminRequest, tool_key: str) -> Rejudged:
        """Judge again every pending approval in the request's workspace of the tools ``tool_key`` names."""
        names = await self._tool_names(tool_key)
        prefix = f"{request.platform}:{request.workspace}:"
        pending = [
            r
            for r in await self.storage.approvals.pending(platform=request.platform)
            if r.chat_history_id.startswith(prefix) and r.tool_name in names
        ]
        outcome = Rejudged()
        for record in pending:
            try:
                outcome = await self._judge(record, request, outcome)
            except EngineError:  # e.g. decided meanwhile: nothing to judge any more
                logger.info("pending approval not rejudged", extra={"approval_id": record.approval_id})
        return outcome

    async def _tool_names(self, tool_key: str) -> set[str]:
        if tool_key == "*":
            return set(self.tools)
        groups = await self.storage.policies.groups()
        return set(groups.get(tool_key, ())) | ({tool_key} if tool_key in self.tools else set())

    async def _judge(self, record: ApprovalRecord, request: AdminRequest, outcome: Rejudged) -> Rejudged:
        thread = await self.views.thread_of(record)
        policy = await effective_policy(
            self.storage, self.tools.get(record.tool_name), channel_of(thread), self.default_ttl, record.arguments
        )
        if policy.mode == DENY and record.kind == "approval":
            if await self._close(record, request):
                text = Note((Mention(record.requester), ": ", denied_sentence(record.tool_name)))
                await self.deliveries.say(thread, text, f"policy-closed:{record.approval_id}")
                await self.deciding.after_decision_quietly(record, "Closed by policy.")
                return replace(outcome, closed=outcome.closed + 1)
            return outcome
        approvers = _stricter_approvers(record.approvers, policy.approvers)
        quorum = max(record.quorum, policy.quorum)
        four_eyes = record.four_eyes or policy.four_eyes
        same = (approvers, quorum, four_eyes) == (tuple(record.approvers), record.quorum, record.four_eyes)
        stricter = replace(record, approvers=approvers, quorum=quorum, four_eyes=four_eyes)
        voters = [v.voter for v in await self.storage.approvals.votes(record.approval_id) if v.vote in COUNTED_VOTES]
        void = [voter for voter in voters if not await self._may_decide(stricter, voter)]
        if same and not void:
            return outcome  # looser or the same: nothing changes until someone decides
        if not await self.storage.approvals.rejudge(
            record.approval_id, approvers=approvers, quorum=quorum, four_eyes=four_eyes, void_voters=void
        ):
            return outcome
        await self.storage.audit.append(
            request.actor,
            REJUDGED,
            record.approval_id,
            {
                "tool": record.tool_name,
                "run_id": record.run_id,
                "before": _rule(record),
                "after": _rule(stricter),
                "no_longer_counted": void,
            },
            now=self.clock(),
        )
        await self.deciding.cards.update_rendering(stricter)
        return replace(outcome, tightened=outcome.tightened + 1, voided=outcome.voided + len(void))

    async def _close(self, record: ApprovalRecord, request: AdminRequest) -> bool:
        """Reject the approval for the admin with the ``deny`` sentence, audited in the same write; whether it won."""
        batch = Batch()
        sentence = denied_sentence(record.tool_name)
        batch.require(
            stores.approvals.decide,
            record.approval_id,
            status="rejected",
            decided_by=request.actor,
            feedback=sentence,
            now=self.clock(),
        )
        batch.write(
            stores.audit.append,
            request.actor,
            CLOSED_BY_POLICY,
            record.approval_id,
            {"tool": record.tool_name, "run_id": record.run_id, "kind": record.kind, "feedback": sentence},
            now=self.clock(),
        )
        return (await self.storage.batches.apply(batch)).applied

    async def _may_decide(self, record: ApprovalRecord, voter: str) -> bool:
        try:
            await authorize_now(self.roles, record, voter)
        except EngineError:
            return False
        return True


def _stricter_approvers(before: Sequence[str], now: Sequence[str]) -> tuple[str, ...]:
    """The approvers a pending approval keeps: the new ones, unless they only add to a named list, or name nobody
    (the requester and admins), which loosens it."""
    if not now or (before and set(before) <= set(now)):
        return tuple(before)
    return tuple(now)


def _rule(record: ApprovalRecord) -> dict[str, object]:
    return {"approvers": list(record.approvers), "quorum": record.quorum, "four_eyes": record.four_eyes}
