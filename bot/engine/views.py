"""How approvals look to the people who decide them: views of records, the lists a person is offered.

Reads only: a view is built from the stored approval (and its tool, its votes and who may decide it);
nothing here changes what is stored except noting where a list was shown (so its buttons may decide).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.breakglass_marks import SETTING as BREAKGLASS_SETTING
from bot.engine.breakglass_marks import delay_seconds, is_breakglass, may_open, opens_at, review_of
from bot.engine.errors import ApprovalNotFound
from bot.engine.gate import Gate
from bot.engine.model import PENDING, ApprovalView, ThreadRef
from bot.engine.responding import RespondableSettings
from bot.engine.roles import Roles
from bot.engine.threads import thread_of_run
from bot.tools import Tool
from storage import NotFound
from storage.protocols import COUNTED_VOTES, VOID_VOTE, ApprovalRecord, ClickedApproval

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

MAX_ID_LENGTH = 200


class Views:
    """Builds :class:`ApprovalView` s from stored approvals (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        roles: Roles,
        gate: Gate,
        admins: Collection[str],
        clock: Callable[[], datetime],
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.roles = roles
        self.gate = gate
        self.admins = admins
        self.clock = clock
        self.respondable = RespondableSettings(storage, clock)
        """Issue 30: which tools an admin allowed Respond on, as cards show it (a short cache; clicks read afresh)."""

    # --- records ------------------------------------------------------------------------------------

    async def record(self, approval_id: str) -> ApprovalRecord:
        """The approval ``approval_id``; :class:`ApprovalNotFound` for an unknown id."""
        check_approval_id(approval_id)
        try:
            return await self.storage.approvals.get(approval_id)
        except NotFound:
            raise ApprovalNotFound(approval_id) from None

    async def clicked(self, approval_id: str, place: str | None) -> ClickedApproval:
        """The approval a click names and whether it was shown where the click came from (one read)."""
        check_approval_id(approval_id)
        try:  # a place that is not a place key (clicks are untrusted) was shown nothing
            return await self.storage.approvals.get_clicked(approval_id, place if isinstance(place, str) else None)
        except NotFound:
            raise ApprovalNotFound(approval_id) from None

    async def thread_of(self, record: ApprovalRecord) -> ThreadRef:
        """The thread of an approval, from its run (ids like Teams channels contain ':', so never split keys)."""
        return thread_of_run(await self.storage.runs.get(record.run_id))

    async def note_shown(self, place: str, approval_ids: Sequence[str]) -> None:
        """Record that these approvals are shown in ``place``, so clicks from there may decide them."""
        if approval_ids:
            await self.storage.places.record(list(approval_ids), place, now=self.clock())

    # --- views --------------------------------------------------------------------------------------

    async def get_approval(self, approval_id: str) -> ApprovalView:
        """The approval as adapters render it; :class:`ApprovalNotFound` for an unknown id."""
        return await self.view(await self.record(approval_id))

    async def step_approvals(self, approval_id: str) -> list[ApprovalView]:
        """Every approval of the paused step that ``approval_id`` belongs to."""
        return (await self.step_views(await self.record(approval_id)))[1]

    async def step_views(self, record: ApprovalRecord) -> tuple[list[ApprovalRecord], list[ApprovalView]]:
        """The step of ``record``: its approvals and their views (the run's thread comes in the same read)."""
        try:
            paused = await self.storage.approvals.step(record.run_id, record.step)
        except NotFound:  # the run is gone (pruned): nothing of its step to show
            return [], []
        return paused.approvals, await self.views(paused.approvals, thread_of_run(paused.run))

    async def views(self, records: Sequence[ApprovalRecord], thread: ThreadRef | None = None) -> list[ApprovalView]:
        """Views of approvals of one step (one run, so its thread is read once, unless the caller knows it)."""
        if not records:
            return []
        thread = thread or await self.thread_of(records[0])
        delays = await self.breakglass_delays(records)
        return [await self.view(r, thread, delays) for r in records]

    async def breakglass_delays(self, records: Sequence[ApprovalRecord]) -> dict[str, int]:
        """Issue 31: the break-glass delay of each tool that has one (read only if one of ``records`` may offer it)."""
        now = self.clock()
        if not any(may_open(r, now) for r in records):  # e.g. a card shown as its call pauses: no read
            return {}
        values = await self.storage.tool_settings.values(BREAKGLASS_SETTING)
        return {tool: seconds for tool, value in values.items() if (seconds := delay_seconds(value)) is not None}

    async def view(
        self, record: ApprovalRecord, thread: ThreadRef | None = None, delays: Mapping[str, int] | None = None
    ) -> ApprovalView:
        """The view of one approval (its thread read from its run unless given; ``delays``: the break-glass delays
        as :meth:`breakglass_delays` read them, else read here when needed)."""
        tool = self.tools.get(record.tool_name)
        if delays is None:
            delays = await self.breakglass_delays([record])
        glass_at = opens_at(record, delays.get(record.tool_name)) if record.status == PENDING else None
        now = self.clock()
        reviewed = None
        if is_breakglass(record):  # issue 31: its review, once done, is shown on the card
            reviewed = review_of(await self.storage.audit.recent(50, subject=record.approval_id))
        votes = await self.storage.approvals.votes(record.approval_id) if record.quorum > 1 else []
        return ApprovalView(
            approval_id=record.approval_id,
            run_id=record.run_id,
            thread=thread or await self.thread_of(record),
            tool_name=record.tool_name,
            tool_description=tool.description if tool else "",
            arguments=record.arguments,
            parameters_schema=tool.parameters if tool else {"type": "object", "properties": {}},
            requester=record.requester,
            policy_mode=record.mode,
            approvers=tuple(record.approvers),
            quorum=record.quorum,
            four_eyes=record.four_eyes,
            votes=tuple(v.voter for v in votes if v.vote in COUNTED_VOTES),
            created_at=record.created_at,
            expires_at=record.expires_at,
            status=record.status,
            decided_by=record.decided_by,
            decided_at=record.decided_at,
            feedback=record.feedback,
            final_arguments=record.final_arguments,
            message_ref=record.message_ref,
            kind=record.kind,
            result=record.result,
            final_result=record.final_result,
            destructive=bool(tool and tool.destructive),
            deciders=tuple(await self.deciders(record)) if record.status == PENDING else (),
            provenance=record.provenance,
            preview=record.preview,
            respondable=record.kind == "approval"
            and tool is not None
            and (tool.respondable or await self.respondable.allows(record.tool_name)),
            void_votes=tuple(v.voter for v in votes if v.vote == VOID_VOTE),
            breakglass_open=glass_at is not None and glass_at <= now < record.expires_at,
            breakglass_review=reviewed,
        )

    async def deciders(self, record: ApprovalRecord) -> list[str]:
        """The people who may decide ``record`` (the rule of :func:`authorize`, groups from the cache)."""
        entries = record.approvers or (record.requester, *sorted(self.admins))
        people = await self.roles.people(entries, record.platform, fresh=False)
        return [p for p in people if not (record.four_eyes and p == record.requester)]

    # --- what one person is offered ------------------------------------------------------------------

    async def pending_for(self, platform: str, actor: str, place: str | None = None) -> list[ApprovalView]:
        """Pending approvals on ``platform`` that ``actor`` may decide now.

        Pass ``place`` when the list is shown there (an App Home tab, a console): its buttons may then
        decide them.
        """
        views: list[ApprovalView] = []
        always = place is not None and await self.roles.is_admin(actor, platform, fresh=False)
        for record in await self.storage.approvals.pending(platform=platform):
            if await self.gate.may_decide(record, actor):
                views.extend(offered([await self.view(record)], always))
        if place is not None:
            await self.note_shown(place, [v.approval_id for v in views])
        return views

    async def personal_step(self, approval_id: str, actor: str, place: str | None) -> tuple[list[ApprovalView], bool]:
        """The step of ``approval_id`` as ``actor`` alone sees it (a Teams user-specific view), and whether they
        may decide any of its pending calls there; admins are offered "Approve and always allow here"."""
        clicked = await self.clicked(approval_id, place)
        record = clicked.record
        step, views = await self.step_views(record)
        may = False
        if place and clicked.shown_here:
            for other in step:
                may = await self.gate.may_decide(other, actor) or may
        admin = may and await self.roles.is_admin(actor, record.platform, fresh=False)
        return offered(views, admin), may


def offered(views: Sequence[ApprovalView], always: bool) -> list[ApprovalView]:
    """``views`` as one admin sees them alone: pending calls offer "Approve and always allow here"."""
    return [replace(v, offer_always_allow=always and v.is_pending and v.kind == "approval") for v in views]


def check_approval_id(approval_id: object) -> None:
    """:class:`ApprovalNotFound` for what cannot be an approval id (clicks are untrusted), before any read."""
    if not isinstance(approval_id, str) or not approval_id or len(approval_id) > MAX_ID_LENGTH:
        raise ApprovalNotFound(str(approval_id)[:40])
