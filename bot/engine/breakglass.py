"""Break-glass: when nobody with the right to decide has decided a call in time, its requester may run it once.

``policy set <tool> <mode> breakglass after <duration>`` stores the delay per tool (``storage.tool_settings``,
setting ``breakglass``, the seconds; ``breakglass off`` removes it). Once a pending approval of the tool is at least
that old, its requester may decide it with the action ``breakglass`` and a required reason. Every condition is
checked by the engine at the decision (:meth:`BreakGlass.authorise`, through the decision's gate), never only by a
surface: the requester only, a reason, the delay passed (engine clock, from the approval's durable ``created_at``,
so it survives a restart), not a ``deny`` tool, no tainted argument, the requester still allowed to ask there,
and at most ``COUNTERSIGN_BREAKGLASS_LIMIT`` break-glass decisions per person per 24 h (counted from the audit, in the
decision's own write: :meth:`BreakGlass.add_limit_check`).

The decision is an approval (status ``approved``, the same exactly-once claim, resume and ledger path as Approve)
whose stored feedback starts with :data:`MARK`, audited as ``break-glass``, counted by the decision metric with the
action ``breakglass``. Afterwards a post goes to ``COUNTERSIGN_BREAKGLASS_CHANNEL`` and a direct message to each
approver of the tool (through the durable outbox, once each), and a review by someone other than the requester is
due (``breakglass review <id> ok|not-ok [note]``, audited as ``break-glass review``; ``breakglass list`` shows
the open ones). Both the break-glass and its review live in the audit log, so they survive restarts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.durations import format_duration
from bot.engine.breakglass_marks import (  # noqa: F401 - re-exported: the names callers know from here
    AUDIT_ACTION,
    MARK,
    NOT_OK,
    OK,
    REVIEW_ACTION,
    SETTING,
    delay_seconds,
    is_breakglass,
    is_tainted,
    opens_at,
    reason_of,
)
from bot.engine.decisions import authorize_now
from bot.engine.errors import CommandError, EngineError, NotAnApprover
from bot.engine.model import (
    BREAKGLASS,
    DecisionRequest,
    DecisionResult,
    Inbound,
    Mention,
    Note,
    ThreadRef,
    conversation_place,
)
from storage.batch import stores

if TYPE_CHECKING:
    from bot.engine.access import AccessControl
    from bot.engine.admin_syntax import AdminCommand
    from bot.engine.model import AdminRequest
    from bot.engine.notices import ApproverNotices
    from bot.engine.outbox import Deliveries
    from bot.engine.surface import Surface
    from bot.engine.work import Work
    from storage.async_protocols import AsyncStores
    from storage.batch import Batch
    from storage.batch_types import Handle
    from storage.protocols import ApprovalRecord, AuditEntry

logger = logging.getLogger(__name__)

DEFAULT_LIMIT = 3
WINDOW = timedelta(hours=24)
DEFAULT_REVIEW_SECONDS = 24 * 3600
LIST_WINDOW = timedelta(days=90)
"""How far back ``breakglass list`` (and review) looks in the audit log for break-glass decisions."""
REMIND_WINDOW = timedelta(days=7)
"""A review overdue for longer than this is no longer reminded (bounds the audit read of each sweep)."""
REMIND_EVERY = timedelta(minutes=5)
"""How often one process looks for overdue reviews (each look reads a window of the audit log)."""
MAX_REASON_CHARS = 500


class BreakGlassRefused(EngineError):
    """Break-glass is not possible for this call, for this person, now; nothing was decided."""


@dataclass(frozen=True)
class OpenReview:
    """A break-glass decision whose review is not done yet."""

    approval_id: str
    tool_name: str
    requester: str
    reason: str
    broken_at: datetime
    due_at: datetime


class BreakGlass:
    """Checks, follows up and reviews break-glass decisions (see the module docstring)."""

    def __init__(
        self,
        storage: AsyncStores,
        *,
        access: AccessControl,
        notices: ApproverNotices,
        surfaces: Mapping[str, Surface],
        deliveries: Deliveries,
        clock: Callable[[], datetime],
        limit: int = DEFAULT_LIMIT,
        channel: str | None = None,
        review_seconds: int = DEFAULT_REVIEW_SECONDS,
        rerender: Callable[[ApprovalRecord], Awaitable[Any]] | None = None,
        work: Work | None = None,
    ) -> None:
        self.storage = storage
        self.access = access
        self.notices = notices
        self.surfaces = surfaces
        self.deliveries = deliveries
        self.clock = clock
        self.limit = limit
        self.channel = channel
        self.review_seconds = review_seconds
        self._next_remind: datetime | None = None
        self.rerender = rerender
        self.work = work
        """Where a re-render asked for later runs (a Slack form must be answered within 3 s)."""
        """Re-renders a call's card wherever it is shown (the cards part): once the offer opens, and after a review."""
        self.decider: Callable[[DecisionRequest], Awaitable[DecisionResult]] | None = None
        """How ``breakglass run`` decides (the engine's parts set it to the deciding part's ``decide``)."""

    async def delay_of(self, tool_name: str) -> int | None:
        """The tool's break-glass delay in seconds, ``None`` when break-glass is off for it."""
        return delay_seconds((await self.storage.tool_settings.values(SETTING)).get(tool_name))

    async def available_at(self, record: ApprovalRecord) -> datetime | None:
        """When the requester may break glass on ``record`` (``None``: never), ignoring the rate limit."""
        return opens_at(record, await self.delay_of(record.tool_name))

    async def sweep(self) -> int:
        """One sweep: :meth:`offer_due`, then :meth:`remind_overdue`; how many people were told now."""
        return await self.offer_due() + await self.remind_overdue()

    async def remind_overdue(self) -> int:
        """Remind, once per break-glass (the outbox key), that its review is overdue: in the call's thread, naming
        the requester and the approvers, and in the break-glass channel; how many reminders went out now."""
        now, sent = self.clock(), 0
        if self._next_remind is not None and now < self._next_remind:
            return 0
        self._next_remind = now + REMIND_EVERY
        window = now - timedelta(seconds=self.review_seconds) - REMIND_WINDOW
        for review in await self.open_reviews(since=window):
            if now < review.due_at:
                continue
            try:
                record = await self.storage.approvals.get(review.approval_id)
                thread = await self.notices.views.thread_of(record)
                people = await self.notices.approvers_of([record], fresh=False)
                text = Note(
                    (
                        "Break-glass review overdue: ",
                        Mention(review.requester),
                        f" ran {review.tool_name} on {review.broken_at:%Y-%m-%d %H:%M} UTC. Reviewers",
                        *[part for person in people for part in (" ", Mention(person))],
                        f": breakglass review {review.approval_id[:8]} ok|not-ok [note]",
                    )
                )
                key = f"breakglass-overdue:{review.approval_id}"
                if await self.deliveries.say(thread, text, key):
                    sent += 1
                if self.channel:
                    await self._say(
                        ThreadRef(thread.platform, thread.workspace, self.channel, ""), text, key + ":channel"
                    )
            except Exception:
                logger.warning(
                    "break-glass review reminder not sent", extra={"approval_id": review.approval_id}, exc_info=True
                )
        return sent

    async def offer_due(self) -> int:
        """Tell each requester whose call nobody decided within the delay that they may break glass: once per
        approval (the outbox key), whichever process sweeps, before or after a restart; how many were told now."""
        now, told = self.clock(), 0
        delays = {t: int(v) for t, v in (await self.storage.tool_settings.values(SETTING)).items() if v.isdigit()}
        if not delays:
            return 0
        for record in await self.storage.approvals.pending():
            at = await self.available_at(record) if record.tool_name in delays else None
            if at is None or now < at or now >= record.expires_at:
                continue
            text = Note(
                (
                    Mention(record.requester),
                    f": nobody decided {record.tool_name} within {format_duration(delays[record.tool_name])}. "
                    "If it cannot wait, you may break glass (it runs once, is announced and reviewed): "
                    f"press Break glass on the card, or breakglass run {record.approval_id[:8]} <reason>",
                )
            )
            try:
                thread = await self.notices.views.thread_of(record)
                if await self.deliveries.say(thread, text, f"breakglass-offer:{record.approval_id}"):
                    told += 1
                    await self._rerender(record)  # the card now offers its requester the Break glass button
            except Exception:
                logger.warning("break-glass offer not sent", extra={"approval_id": record.approval_id}, exc_info=True)
        return told

    async def authorise(self, record: ApprovalRecord, actor: str, feedback: str | None) -> None:
        """Raise why ``actor`` may not break glass on ``record`` now, with ``feedback`` as the reason; return if
        they may."""
        await self.check_offer(record, actor)
        if not (feedback or "").strip():
            raise BreakGlassRefused("Breaking glass needs a reason: nothing was decided.")
        await self.check_limits(record, actor)

    async def check_offer(self, record: ApprovalRecord, actor: str) -> None:
        """Raise why ``actor`` may not break glass on ``record`` now, whatever the reason (before asking for it)."""
        if actor != record.requester:
            raise NotAnApprover("Only the person who asked for this call can break glass.")
        if record.mode == "deny" or record.kind != "approval":
            raise BreakGlassRefused("Break-glass is not possible for this tool.")
        if is_tainted(record):
            raise BreakGlassRefused("Break-glass is not possible: an argument came from untrusted text.")
        at = await self.available_at(record)
        if at is None:
            raise BreakGlassRefused(f"Break-glass is not turned on for {record.tool_name}.")
        now = self.clock()
        if now < at:
            wait = format_duration(max(1, int((at - now).total_seconds())))
            raise BreakGlassRefused(f"Break-glass is possible only if nobody decides within the delay: wait {wait}.")

    async def check_limits(self, record: ApprovalRecord, actor: str) -> None:
        """Raise when ``actor`` may no longer ask the bot there, or has broken glass too often."""
        thread = await self.notices.views.thread_of(record)
        asking = Inbound(thread.platform, thread.workspace, thread.channel, thread.thread, actor, "", "breakglass")
        if await self.access.refusal(asking) is not None:
            raise BreakGlassRefused("You may no longer ask the bot there, so you cannot break glass.")
        if self.limit <= 0:
            raise BreakGlassRefused("Break-glass is turned off here (COUNTERSIGN_BREAKGLASS_LIMIT is 0).")
        # The rate limit is checked in the decision's own write (add_limit_check): atomic with its audit entry.

    async def check_rate(self, actor: str) -> None:
        """Before asking for the reason: raise when ``actor`` already broke glass ``limit`` times in 24 h (so nobody
        types a reason in vain; the decision's own write counts again, atomically: :meth:`add_limit_check`)."""
        if not await self.storage.audit.fewer_than(self.limit, actor, AUDIT_ACTION, self.clock() - WINDOW):
            raise self.limit_refusal()

    def add_limit_check(self, batch: Batch, actor: str) -> Handle[bool]:
        """Require, in a break-glass decision's write and just before its audit entry, that ``actor`` broke glass
        fewer than ``limit`` times in the last 24 h (the audit log counts them): two break-glasses by one person at
        once, in one process or two, are counted one after the other (``audit.fewer_than``)."""
        return batch.require(stores.audit.fewer_than, self.limit, actor, AUDIT_ACTION, self.clock() - WINDOW)

    def limit_refusal(self) -> BreakGlassRefused:
        """What a break-glass refused by :meth:`add_limit_check` says."""
        return BreakGlassRefused(f"You broke glass {self.limit} times in the last 24 h, the most allowed.")

    async def announce(self, record: ApprovalRecord, reason: str) -> None:
        """Post the break-glass to the break-glass channel and DM each approver of the tool (outbox, once each)."""
        text = Note(
            (
                "🔴 Break glass: ",
                Mention(record.requester),
                f" ran {record.tool_name} without an approval (id {record.approval_id[:8]}). Reason: {reason[:200]}. "
                f"A review by someone else is due within {format_duration(self.review_seconds)}: "
                f"breakglass review {record.approval_id[:8]} ok|not-ok [note]",
            ),
            review=record.approval_id,  # the review buttons on the post and in each DM, where a surface has them
        )
        workspace = (await self.notices.views.thread_of(record)).workspace
        if self.channel:
            thread = ThreadRef(record.platform, workspace, self.channel, "")
            await self._say(thread, text, f"breakglass:{record.approval_id}:channel")
        surface = self.surfaces.get(record.platform)
        if surface is None:
            return
        for person in await self.notices.approvers_of([record], fresh=True):
            try:
                direct = await surface.direct_thread(workspace, person)
            except Exception:
                logger.warning("break-glass DM not sent", extra={"approval_id": record.approval_id}, exc_info=True)
                continue
            if direct is not None:
                await self._say(direct, text, f"breakglass:{record.approval_id}:dm:{person}")

    async def _rerender(self, record: ApprovalRecord) -> None:
        if self.rerender is None:
            return
        try:
            await self.rerender(record)
        except Exception:
            logger.warning("break-glass card not re-rendered", extra={"approval_id": record.approval_id}, exc_info=True)

    async def _say(self, thread: ThreadRef, text: Note, key: str) -> None:
        try:
            await self.deliveries.say(thread, text, key)
        except Exception:
            logger.warning("break-glass notice not sent", extra={"key": key}, exc_info=True)

    async def open_reviews(self, since: datetime | None = None) -> list[OpenReview]:
        """The break-glass decisions not reviewed yet, oldest first (of those since ``since``; default: the last
        :data:`LIST_WINDOW`)."""
        entries = await self.storage.audit.since(since or self.clock() - LIST_WINDOW)
        reviewed = {e.subject for e in entries if e.action == REVIEW_ACTION}
        return [
            _open_review(e, self.review_seconds)
            for e in entries
            if e.action == AUDIT_ACTION and e.subject not in reviewed
        ]

    async def check_review(self, approval_prefix: str, actor: str) -> tuple[OpenReview, ApprovalRecord]:
        """The open review ``approval_prefix`` names, if ``actor`` may do it; else raise why not."""
        matches = [r for r in await self.open_reviews() if r.approval_id.startswith(approval_prefix)]
        if len(matches) != 1:
            raise CommandError(f"No open break-glass review matches '{approval_prefix[:64]}' (breakglass list).")
        review = matches[0]
        if actor == review.requester:
            raise NotAnApprover("You broke glass on this call, so someone else must review it.")
        # Who may review: who may have decided the call (its approvers; else admins), never the requester.
        record = await self.storage.approvals.get(review.approval_id)
        await authorize_now(self.notices.roles, record, actor)
        return review, record

    async def review(
        self, approval_prefix: str, actor: str, outcome: str, note: str | None, *, render_later: bool = False
    ) -> str:
        """Record the review of one break-glass decision (someone other than the requester; audited), and show
        its outcome on the call's card (with ``render_later``, in the background once the review is stored)."""
        review, record = await self.check_review(approval_prefix, actor)
        if outcome not in (OK, NOT_OK):
            raise CommandError("A review is 'ok' or 'not-ok'.")
        if outcome == NOT_OK and not (note or "").strip():
            raise CommandError("A 'not-ok' review needs a note saying why.")
        await self.storage.audit.append(
            actor,
            REVIEW_ACTION,
            review.approval_id,
            {"outcome": outcome, "note": (note or "")[:MAX_REASON_CHARS] or None, "tool": review.tool_name},
            now=self.clock(),
        )
        if render_later and self.work is not None:
            self.work.spawn(self._rerender(record), name=f"breakglass-review-{review.approval_id}")
        else:
            await self._rerender(record)
        return f"Review of the break-glass of {review.tool_name} by {review.requester} recorded: {outcome}."

    async def run_from_command(self, prefix: str, reason: str, request: AdminRequest) -> str:
        """``breakglass run <id> <reason>``: break glass on one of your pending calls from any conversation."""
        mine = [
            r
            for r in await self.storage.approvals.pending(platform=request.platform)
            if r.approval_id.startswith(prefix) and r.requester == request.actor
        ]
        if len(mine) != 1 or self.decider is None:
            raise CommandError(f"None of your pending calls matches '{prefix[:64]}'.")
        here = conversation_place(request.platform, request.channel)
        await self.storage.places.record([mine[0].approval_id], here, now=self.clock())
        decided = await self.decider(
            DecisionRequest(mine[0].approval_id, request.actor, BREAKGLASS, feedback=reason, place=here)
        )
        return decided.message

    async def run_command(self, command: AdminCommand, request: AdminRequest) -> str:
        """``breakglass list``, ``breakglass review <id> ok|not-ok [note]`` and ``breakglass run <id> <reason>``."""
        if command.name == "breakglass run":
            prefix, reason = command.value
            return await self.run_from_command(prefix, reason, request)
        if command.name == "breakglass review":
            prefix, outcome, note = command.value
            return await self.review(prefix, request.actor, outcome, note)
        reviews = await self.open_reviews()
        if not reviews:
            return "No break-glass review is open."
        now = self.clock()
        return "\n".join(
            f"{r.tool_name} by {r.requester} at {r.broken_at:%Y-%m-%d %H:%M} UTC (id {r.approval_id[:8]}), "
            f"review {'OVERDUE since' if now >= r.due_at else 'due'} {r.due_at:%Y-%m-%d %H:%M} UTC; reason: {r.reason}"
            for r in reviews
        )


def _open_review(entry: AuditEntry, review_seconds: int) -> OpenReview:
    details: dict[str, Any] = entry.details
    return OpenReview(
        approval_id=entry.subject,
        tool_name=str(details.get("tool", "")),
        requester=entry.actor,
        reason=reason_of(details.get("feedback")),
        broken_at=entry.at,
        due_at=entry.at + timedelta(seconds=review_seconds),
    )
