"""What a storage backend offers: one small protocol per store, and the frozen records they return.

The SQLite classes in this package implement these protocols; a PostgreSQL backend can follow them
for deployments with several bot replicas. Every time in a record is a timezone-aware UTC
``datetime``. Methods that take ``now`` accept an aware ``datetime``, epoch seconds, or ``None``
(the current time), so tests can pin the clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

# A batch's types are storage.batch_types' (which imports no store protocol); Handle and HandleSource are
# re-exported here, where they were first defined.
from storage.batch_types import Batch, BatchOutcome
from storage.batch_types import Handle as Handle
from storage.batch_types import HandleSource as HandleSource

if TYPE_CHECKING:
    from bot.messages import ChatMessage
    from storage.audit_chain import AuditHead, AuditVerification

T = TypeVar("T")

Instant = datetime | float | None
"""A moment passed to a store: an aware datetime, epoch seconds, or None for "now"."""

RunStatus = Literal["running", "paused", "resuming", "finished", "failed", "expired", "stopped"]
RUN_STATUSES: tuple[str, ...] = ("running", "paused", "resuming", "finished", "failed", "expired", "stopped")
ACTIVE_RUN_STATUSES: tuple[str, ...] = ("running", "paused", "resuming")
TERMINAL_RUN_STATUSES: tuple[str, ...] = ("finished", "failed", "expired", "stopped")
"""``stopped``: a person stopped the run from chat; it ended after the step that was under way."""

ApprovalStatus = Literal[
    "pending", "approved", "rejected", "modified", "expired", "superseded", "cancelled", "responded"
]
APPROVAL_STATUSES: tuple[str, ...] = (
    "pending",
    "approved",
    "rejected",
    "modified",
    "expired",
    "superseded",
    "cancelled",
    "responded",
)
DECISION_STATUSES: tuple[str, ...] = ("approved", "rejected", "modified", "responded")
"""``responded`` (issue 30): a person answered in the tool's place; the tool never runs."""
CLOSING_STATUSES: tuple[str, ...] = ("superseded", "cancelled")
VOTES: tuple[str, ...] = ("confirm", "reject", "modify", "respond")
COUNTED_VOTES: tuple[str, ...] = ("confirm", "respond")
"""The votes a quorum counts (issue 30: a Respond is one of them)."""
VOID_VOTE = "void"
"""A vote that no longer counts: its voter may not decide the approval under the policy an admin tightened since
(:meth:`ApprovalStore.rejudge` marks it; it is never cast)."""

POLICY_MODES: tuple[str, ...] = ("always", "never", "once", "deny", "review", "always+review")
APPROVAL_KINDS: tuple[str, ...] = ("approval", "review")
"""An ``approval`` decides a call before it runs; a ``review`` decides what the model sees of its result."""
RULE_FIELDS: tuple[str, ...] = ("mode", "approvers", "quorum", "four_eyes", "ttl_seconds")


@dataclass(frozen=True)
class RunRecord:
    """One agent invocation in a thread; its snapshot is read with ``runs.snapshot(run_id)``."""

    run_id: str
    chat_history_id: str
    platform: str
    workspace: str
    channel: str
    thread: str
    requester: str
    status: str
    step: int
    error: str | None
    has_snapshot: bool
    created_at: datetime
    updated_at: datetime
    owner: str | None = None
    """The instance id of the process working on the run (``None`` while paused or ended)."""
    lease_expires_at: datetime | None = None
    """Until when the owner holds the run; after it, recovery may claim the run."""
    recoveries: int = 0
    """How many times recovery has taken the run over after its owner stopped."""
    stop_requested_by: str | None = None
    """Who asked, from chat, that the run stop after its current step (any process may ask)."""

    @property
    def is_active(self) -> bool:
        """Whether the run is running, paused or resuming."""
        return self.status in ACTIVE_RUN_STATUSES


@dataclass(frozen=True)
class TokenUsage:
    """Tokens the model used: for one run, or summed over ``runs`` runs (the ``usage`` command)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    runs: int = 0

    @classmethod
    def of(cls, usage: Any) -> TokenUsage:
        """A run's usage from an agent's ``token_usage`` dict (missing or odd counts are 0).

        >>> TokenUsage.of({"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28}).total_tokens
        28
        """
        usage = usage if isinstance(usage, dict) else {}

        def count(key: str) -> int:
            value = usage.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

        return cls(count("prompt_tokens"), count("completion_tokens"), count("total_tokens"), runs=1)

    def as_dict(self) -> dict[str, int]:
        """The three counts (for the audit log)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class RunFence:
    """The fencing token a run's owner carries: its instance id and the run's takeover generation.

    A process that starts, resumes or takes over a run gets the run's ``recoveries`` count as it claimed
    it; a takeover (``leases.claim_expired``) bumps that count and changes the owner. Every durable write
    the owner makes on behalf of the run (its history, the ledger's ``finish``, the run's status changes,
    its answer in the outbox) passes the fence, and the store makes the write only if, in the same
    transaction, the run is still running or resuming with ``owner = fence.owner`` and
    ``recoveries = fence.generation``. A stalled owner that wakes after a takeover thus writes nothing.

    >>> RunFence("run-1", "host-1-a", 0)
    """

    run_id: str
    owner: str
    generation: int

    @classmethod
    def of(cls, run: RunRecord) -> RunFence:
        """The fence of a run as its owner claimed it (``run.owner`` must be set)."""
        if run.owner is None:
            raise ValueError(f"run {run.run_id!r} has no owner to fence with")
        return cls(run.run_id, run.owner, run.recoveries)

    def holds_for(self, run: RunRecord) -> bool:
        """Whether the fence holds for the run as read (the stores check it again in each fenced write)."""
        return (
            run.run_id == self.run_id
            and run.owner == self.owner
            and run.recoveries == self.generation
            and run.status in ("running", "resuming")
        )


@dataclass(frozen=True)
class NewApproval:
    """What the engine knows when a tool call pauses; ``approvals.create_many`` stores it.

    ``approval_id`` defaults to an unguessable token (it travels in button values) and
    ``args_digest`` to the digest of ``arguments``' canonical JSON (a given digest must match it).
    """

    run_id: str
    step: int
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    requester: str
    platform: str
    chat_history_id: str
    expires_at: datetime
    mode: str = "always"
    approvers: Sequence[str] = ()
    quorum: int = 1
    four_eyes: bool = False
    approval_id: str | None = None
    args_digest: str | None = None
    created_at: datetime | None = None
    kind: str = "approval"
    result: str | None = None
    """For a review: the full result of the call that ran (shown masked and truncated)."""
    provenance: dict[str, Any] | None = None
    """Which arguments came from untrusted text, and from where (``bot.engine.provenance``); ``None``: none did."""
    preview: dict[str, Any] | None = None
    """What the call would do, as computed when it paused (``bot.hitl.previews``): ``status``, ``text``, ``digest``
    and, for a re-asked call, ``approved`` (the preview approved before) and ``reason``; ``None``: no preview."""
    request_reason: str | None = None
    """The reason the requester gave in the request that led to the call ("… because <reason>"; issue 31,
    ``bot.engine.justification``); ``None``: none was given."""


@dataclass(frozen=True)
class ApprovalRecord:
    """One paused tool call awaiting (or past) a human decision."""

    approval_id: str
    run_id: str
    step: int
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    args_digest: str
    requester: str
    mode: str
    approvers: tuple[str, ...]
    quorum: int
    four_eyes: bool
    platform: str
    chat_history_id: str
    message_ref: dict[str, Any] | None
    status: str
    decided_by: str | None
    decided_at: datetime | None
    feedback: str | None
    final_arguments: dict[str, Any] | None
    created_at: datetime
    expires_at: datetime
    kind: str = "approval"
    result: str | None = None
    """For a review: the full result held back from the model."""
    final_result: str | None = None
    """For a review decided ``modified``: the edited result the model sees."""
    provenance: dict[str, Any] | None = None
    """Which arguments came from untrusted text, and from where (``bot.engine.provenance``); ``None``: none did."""
    preview: dict[str, Any] | None = None
    """What the call would do, as computed when it paused (``bot.hitl.previews``): ``status``, ``text``, ``digest``
    and, for a re-asked call, ``approved`` (the preview approved before) and ``reason``; ``None``: no preview."""
    request_reason: str | None = None
    """The reason the requester gave in the request that led to the call ("… because <reason>"; issue 31,
    ``bot.engine.justification``); ``None``: none was given."""

    @property
    def is_pending(self) -> bool:
        """Whether nobody has decided yet (it may still be past its expiry; see ``is_expired_at``)."""
        return self.status == "pending"

    def is_expired_at(self, now: datetime) -> bool:
        """Whether ``now`` is at or after the expiry time."""
        return now >= self.expires_at


@dataclass(frozen=True)
class ApprovalStep:
    """One paused step as a click's follow-up needs it: the run (its thread, requester and step) and the
    step's approvals in the order they were created (read together by :meth:`ApprovalStore.step`)."""

    run: RunRecord
    approvals: list[ApprovalRecord]
    snapshot: dict[str, Any] | None = None
    """Once every approval of the step is decided and the run's stored snapshot is this step's: that snapshot,
    parsed (what resuming the step needs; a pause writes a snapshot and a new step number together, so the
    snapshot of a step never changes). ``None`` otherwise, and when the stored snapshot does not parse
    (``RunStore.snapshot`` says why)."""


@dataclass(frozen=True)
class ClickedApproval:
    """An approval and whether it was shown in the place a click came from (:meth:`ApprovalStore.get_clicked`)."""

    record: ApprovalRecord
    shown_here: bool


@dataclass(frozen=True)
class Vote:
    """One approver's vote on an approval (quorum counts the ``confirm`` votes)."""

    approval_id: str
    voter: str
    vote: str
    voted_at: datetime


@dataclass(frozen=True)
class LedgerEntry:
    """The execution record of one tool call: ``executing`` → ``done`` | ``failed``."""

    tool_call_id: str
    run_id: str | None
    tool_name: str | None
    args_digest: str
    status: str
    result: str | None
    started_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class PolicyRule:
    """One stored rule; a ``None`` field means "inherit from a less specific rule"."""

    scope: str
    tool_key: str
    mode: str | None
    approvers: tuple[str, ...] | None
    quorum: int | None
    four_eyes: bool | None
    ttl_seconds: int | None
    updated_by: str
    updated_at: datetime


@dataclass(frozen=True)
class EffectiveRule:
    """The rule that applies to one tool in one channel, field by field.

    A field is ``None`` when no rule sets it (the engine applies its defaults). ``sources`` maps each
    field that is set to the ``(scope, tool_key)`` of the rule it came from.
    """

    tool_name: str
    mode: str | None = None
    approvers: tuple[str, ...] | None = None
    quorum: int | None = None
    four_eyes: bool | None = None
    ttl_seconds: int | None = None
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyView:
    """Everything stored that decides one tool's policy in one channel, read at once
    (:meth:`PolicyStore.view`): the plain rule, resolved field by field, and the conditional rules of the
    tool in the channel's three scopes (the engine evaluates their conditions on a call's arguments)."""

    rule: EffectiveRule
    conditions: tuple[ConditionalRule, ...] = ()


@dataclass(frozen=True)
class AuditEntry:
    """One append-only audit log line (``prev_hash`` and ``hash`` link it into the chain; read by ``since``)."""

    id: int
    at: datetime
    actor: str
    action: str
    subject: str
    details: dict[str, Any]
    prev_hash: str | None = None
    hash: str | None = None


@dataclass(frozen=True)
class ApproverGroup:
    """A named group of people (``group set oncall @a @b``): approvers or admins may name it as ``@oncall``."""

    name: str
    members: tuple[str, ...]
    updated_by: str
    updated_at: datetime


@dataclass(frozen=True)
class ConditionalRule:
    """A policy mode that applies only to calls whose arguments match ``condition`` (its canonical text,
    e.g. ``env=prod``; the engine parses and evaluates it)."""

    scope: str
    tool_name: str
    condition: str
    mode: str
    updated_by: str
    updated_at: datetime


@dataclass(frozen=True)
class AccessRule:
    """Who may start runs in a scope (a workspace or a channel): a person, a group reference, or ``everyone``."""

    scope: str
    principal: str
    updated_by: str
    updated_at: datetime


@dataclass(frozen=True)
class ThreadAddress:
    """Where a thread lives: the history key and the platform coordinates a surface posts to."""

    chat_history_id: str
    platform: str
    workspace: str
    channel: str
    thread: str


@dataclass(frozen=True)
class InboxItem:
    """A person's message waiting in its thread's inbox for the thread's run to end or pause."""

    id: int
    address: ThreadAddress
    requester: str
    message: dict[str, Any]
    """The user's ``ChatMessage.to_dict()``; its id is the id it gets in the history."""
    message_ref: str | None
    """The platform's id of the message (for reactions and the status line), if any."""
    received_at: datetime


@dataclass(frozen=True)
class OutboxMessage:
    """A message owed to a thread: durable before it is posted, marked delivered after."""

    key: str
    address: ThreadAddress
    text: str
    created_at: datetime
    attempts: int
    next_attempt_at: datetime
    claimed_by: str | None
    delivered_at: datetime | None


@dataclass(frozen=True)
class PruneCounts:
    """What one retention pass deleted (or, in a dry run, would delete)."""

    runs: int = 0
    approvals: int = 0
    ledger: int = 0
    messages: int = 0
    outbox: int = 0

    def as_dict(self) -> dict[str, int]:
        """``{"runs": …, "approvals": …, …}`` for reports and logs."""
        return {
            "runs": self.runs,
            "approvals": self.approvals,
            "ledger": self.ledger,
            "messages": self.messages,
            "outbox": self.outbox,
        }


@runtime_checkable
class ChatMessageStore(Protocol):
    """Thread history: idempotent writes, ``last_k`` reads that never split a tool call from its results."""

    def write_messages(
        self, chat_history_id: str, messages: Sequence[ChatMessage], fence: RunFence | None = None
    ) -> int:
        """Append the messages that are new (by id); how many were.

        With a ``fence`` (a run owner writing its step), the write happens only if the fence holds in the
        same transaction (see :class:`RunFence`); otherwise nothing is written and
        :class:`storage.errors.FencedOut` is raised.
        """
        ...

    def retrieve_messages(
        self, chat_history_id: str, last_k: int | None = None, *, up_to: str | None = None
    ) -> list[ChatMessage]:
        """The last ``last_k`` messages, oldest first, never starting on a tool result.

        ``up_to`` (a message id): the window as it was when that message was the thread's newest, so
        messages written after it are never read; no messages when the thread has no such message.
        """
        ...

    def count_messages(self, chat_history_id: str) -> int: ...

    def delete_messages(self, chat_history_id: str) -> int: ...


class RunStore(Protocol):
    """Agent runs and their snapshots; status changes are compare-and-set.

    At most one run per thread (``chat_history_id``) is active (running, paused or resuming), enforced by
    the database itself (a unique partial index, or a conditional insert): ``create`` raises
    :class:`storage.errors.ActiveRunExists` instead of opening a second one, whichever process asks.
    ``transition`` to ``paused`` or a terminal status clears the run's owner and lease.
    ``transition(..., fence=...)`` moves the run only while the fence holds (see :class:`RunFence`):
    a fenced-out owner gets ``False`` and the run is left as its new owner has it.
    """

    def create(
        self,
        run_id: str,
        *,
        chat_history_id: str,
        platform: str,
        workspace: str,
        channel: str,
        thread: str,
        requester: str,
        status: str = "running",
        now: Instant = None,
    ) -> RunRecord: ...

    def get(self, run_id: str) -> RunRecord: ...

    def transition(
        self,
        run_id: str,
        from_status: str | tuple[str, ...],
        to_status: str,
        *,
        fence: RunFence | None = None,
        usage: TokenUsage | None = None,
        **fields: Any,
    ) -> bool:
        """Move the run if it is in ``from_status`` (``True`` for one caller); ``usage``: also record the run's
        token usage so far (as :meth:`record_usage`), in the same statement."""
        ...

    def save_snapshot(self, run_id: str, snapshot_json: str | dict[str, Any]) -> None: ...

    def snapshot(self, run_id: str) -> dict[str, Any]: ...

    def active_for_thread(self, chat_history_id: str) -> RunRecord | None: ...

    def latest_for_thread(self, chat_history_id: str) -> RunRecord | None:
        """The thread's newest run, whatever its status (whose requester the thread "belongs" to now)."""
        ...

    def list_by_status(self, *statuses: str) -> list[RunRecord]: ...

    def request_stop(self, run_id: str, actor: str) -> bool:
        """Ask a running or resuming run to stop after its current step; ``False`` if it is not working."""
        ...

    def record_usage(self, run_id: str, usage: TokenUsage) -> None:
        """Set the run's token usage (the agent's running total: it carries over a pause)."""
        ...

    def usage(self, *, platform: str, workspace: str, since: Instant, channel: str | None = None) -> TokenUsage:
        """The summed usage of the runs created since ``since`` in a workspace (or one of its channels)."""
        ...


class ApprovalStore(Protocol):
    """Approvals, their votes, and the single compare-and-set that decides each one."""

    def create_many(
        self, records: Sequence[NewApproval], *, shown_in: str | None = None, shown_at: Instant = None
    ) -> list[ApprovalRecord]:
        """Store one paused step's approvals (all or none); ``shown_in``: also note each as shown in that place
        at ``shown_at``, in the same write (as :meth:`ApprovalPlaces.record`)."""
        ...

    def get(self, approval_id: str) -> ApprovalRecord: ...

    def for_run(self, run_id: str, step: int | None = None) -> list[ApprovalRecord]: ...

    def get_clicked(self, approval_id: str, place: str | None) -> ClickedApproval:
        """The approval (or :class:`NotFound`) and whether it was shown in ``place`` (never for no place),
        read together: a click needs both before anything else."""
        ...

    def step(self, run_id: str, step: int) -> ApprovalStep:
        """The run (or :class:`NotFound`) and the approvals of one of its steps, read together: re-rendering
        a step and resuming it need both; with the step's snapshot once it is fully decided (see
        :class:`ApprovalStep`). SQL: ``runs LEFT JOIN approvals ON run_id AND step``."""
        ...

    def set_message_ref(self, approval_ids: Sequence[str], message_ref: dict[str, Any]) -> int: ...

    def mark_rendered(self, approval_ids: Sequence[str], message_ref: dict[str, Any]) -> dict[str, str]:
        """:meth:`set_message_ref` (one ``UPDATE … RETURNING``), returning each approval's status once it is
        recorded, by approval id: a decision that landed before shows in it, a later one finds the reference."""
        ...

    def add_vote(
        self, approval_id: str, voter: str, vote: str, now: Instant = None, feedback: str | None = None
    ) -> int | None:
        """Record ``voter``'s vote (the first one counts); the number of counted votes (``confirm`` and ``respond``),
        or ``None`` once the approval is no longer pending or has expired. A ``respond`` vote's ``feedback`` (the
        person's answer) is kept as the pending approval's feedback, the latest one winning."""
        ...

    def votes(self, approval_id: str) -> list[Vote]: ...

    def rejudge(
        self,
        approval_id: str,
        *,
        approvers: Sequence[str],
        quorum: int,
        four_eyes: bool,
        void_voters: Sequence[str] = (),
    ) -> bool:
        """Give a pending approval the approvers, quorum and four-eyes of a policy tightened since it paused, and mark
        the votes of ``void_voters`` :data:`VOID_VOTE` (they no longer count); ``True`` if it was still pending."""
        ...

    def decide(
        self,
        approval_id: str,
        *,
        status: str,
        decided_by: str,
        feedback: str | None = None,
        final_arguments: dict[str, Any] | None = None,
        now: Instant = None,
        final_result: str | None = None,
    ) -> bool: ...

    def expire(self, approval_id: str, now: Instant = None) -> bool: ...

    def mark_reminded(self, approval_id: str, now: Instant = None) -> bool:
        """Record that the approvers of a pending approval were reminded; ``True`` for exactly one caller, ever.

        Durable for the approval's whole life (unlike the 7-day event dedupe), so a reminder is sent once
        whatever the TTL: ``UPDATE approvals SET reminded_at = now WHERE approval_id = ? AND status = 'pending'
        AND reminded_at IS NULL``. ``False`` once decided or reminded; :class:`NotFound` for an unknown id.
        """
        ...

    def expire_due(self, now: Instant = None, limit: int = 500) -> list[ApprovalRecord]:
        """Expire up to ``limit`` pending approvals due by ``now`` in ONE statement; return those this caller expired.

        However many processes sweep at once, each approval is returned to exactly one of them. SQLite:
        ``UPDATE approvals SET status='expired' ... WHERE approval_id IN (SELECT ... WHERE status='pending'
        AND expires_at <= now ORDER BY expires_at LIMIT n) AND status='pending' RETURNING ...``; PostgreSQL
        can select the batch ``FOR UPDATE SKIP LOCKED`` so concurrent sweepers take different batches.
        """
        ...

    def close_pending_for_run(self, run_id: str, status: str, reason: str) -> list[str]: ...

    def due_for_expiry(self, now: Instant = None, limit: int = 100) -> list[ApprovalRecord]: ...

    def pending(
        self, platform: str | None = None, chat_history_id: str | None = None, approver: str | None = None
    ) -> list[ApprovalRecord]: ...


class ToolLedger(Protocol):
    """At-most-once execution: ``begin`` succeeds once per tool call, before the side effect."""

    def begin(
        self,
        tool_call_id: str,
        args_digest: str,
        run_id: str | None = None,
        tool_name: str | None = None,
        fence: RunFence | None = None,
    ) -> bool:
        """Record ``executing`` for the call; ``False`` if it ever began before.

        With a ``fence``, :class:`~storage.errors.FencedOut` (nothing written) unless the fence holds in the same
        transaction: an owner whose run was taken over starts no call of it.
        """
        ...

    def finish(self, tool_call_id: str, ok: bool, result: str, fence: RunFence | None = None) -> bool:
        """Record the outcome of an ``executing`` call; ``False`` if it was finished (or marked unknown) already.

        With a ``fence``, also ``False`` (nothing written) unless the fence holds in the same transaction
        (see :class:`RunFence`): the "outcome unknown" a recoverer wrote, or will write, is never overwritten.
        """
        ...

    def get(self, tool_call_id: str) -> LedgerEntry | None: ...

    def executing(self, run_id: str | None = None) -> list[LedgerEntry]: ...

    def mark_unknown(self, tool_call_id: str, result: str) -> bool: ...


class PolicyStore(Protocol):
    """Per-scope, per-tool confirmation rules, tool groups, and the ask-once memory."""

    def define_group(self, name: str, tool_names: Sequence[str]) -> None: ...

    def groups(self) -> dict[str, list[str]]: ...

    def set_rule(self, scope: str, tool_key: str, *, updated_by: str, **fields: Any) -> PolicyRule: ...

    def get_rule(self, scope: str, tool_key: str) -> PolicyRule | None: ...

    def reset_rule(self, scope: str, tool_key: str) -> bool: ...

    def list_rules(self, scope: str | None = None) -> list[PolicyRule]: ...

    def resolve(self, tool_name: str, *, platform: str, workspace: str, channel: str) -> EffectiveRule: ...

    def view(self, tool_name: str, *, platform: str, workspace: str, channel: str) -> PolicyView:
        """:meth:`resolve` and the tool's conditional rules of the channel, workspace and global scopes
        (``ConditionalRuleStore.rules``) in one read: one consistent answer per policy decision, never cached."""
        ...

    def views(
        self, tool_names: Sequence[str], *, platform: str, workspace: str, channel: str
    ) -> Mapping[str, PolicyView]:
        """:meth:`view` of each of ``tool_names`` in the channel, in one statement (a run's read-ahead at its start):
        ``views(names, ...)[name] == view(name, ...)`` for every name given (tool groups, ``"*"``, conditional rules
        and the three scopes included). Each tool's view may be resolved only when it is asked for."""
        ...

    def unchanged(self, tool_name: str, view: PolicyView, *, platform: str, workspace: str, channel: str) -> bool:
        """Whether :meth:`view` of the tool in the channel equals ``view`` now: a batch's compare-and-set
        (``batch.require(stores.policies.unchanged, ...)``) that refuses to store what was decided with a view
        that has changed since."""
        ...

    def remember_confirmation(
        self, scope: str, tool_name: str, args_digest: str, confirmed_by: str, now: Instant = None
    ) -> None: ...

    def is_confirmed(self, scope: str, tool_name: str, args_digest: str) -> bool: ...

    def revoke_confirmations(self, scope: str, tool_name: str | None = None) -> int: ...


class ApproverGroupStore(Protocol):
    """Named approver groups (``storage.approver_groups``); names are case-insensitive, stored lower-case."""

    def set_group(self, name: str, members: Sequence[str], *, updated_by: str, now: Instant = None) -> ApproverGroup:
        """Create or replace the group ``name`` with exactly ``members`` (in the given order, without repeats)."""
        ...

    def get(self, name: str) -> ApproverGroup | None: ...

    def list_groups(self) -> list[ApproverGroup]:
        """Every group, by name."""
        ...

    def delete_group(self, name: str) -> bool:
        """Remove the group; whether it existed."""
        ...


class ConditionalRuleStore(Protocol):
    """Policy modes with conditions on the arguments (``storage.conditions``), one per scope, tool and condition."""

    def set_rule(
        self, scope: str, tool_name: str, condition: str, mode: str, *, updated_by: str, now: Instant = None
    ) -> ConditionalRule: ...

    def reset_rule(self, scope: str, tool_name: str, condition: str) -> bool:
        """Remove one rule; whether it existed."""
        ...

    def rules(self, scopes: Sequence[str] | None = None, tool_name: str | None = None) -> list[ConditionalRule]:
        """The rules of ``scopes`` (all when ``None``), of one tool when given, by scope, tool and condition."""
        ...


class ToolSettingStore(Protocol):
    """Per-tool switches admins set (``storage.tool_settings``), e.g. ``justification`` = ``required`` (issue 31)."""

    def set_value(
        self, tool_name: str, setting: str, value: str | None, *, updated_by: str, now: Instant = None
    ) -> None:
        """Set one tool's ``setting`` (``None`` removes it)."""
        ...

    def values(self, setting: str) -> dict[str, str]:
        """Every tool's value of ``setting``, by tool name."""
        ...

    def is_not(self, tool_name: str, setting: str, value: str) -> bool:
        """Whether the tool's ``setting`` is anything but ``value`` (a batch's check, e.g. no reason required)."""
        ...


class AccessStore(Protocol):
    """Who may start runs (``storage.access``): allow rules per scope, and whether direct messages are allowed.

    A scope with no rule lets everyone ask; revoking its last rule returns it to that default.
    """

    def allow(self, scope: str, principal: str, *, updated_by: str, now: Instant = None) -> AccessRule: ...

    def revoke(self, scope: str, principal: str) -> bool:
        """Remove one rule; whether it existed."""
        ...

    def rules(self, scopes: Sequence[str] | None = None) -> list[AccessRule]:
        """The rules of ``scopes`` (every rule when ``None``), by scope then principal."""
        ...

    def set_direct_messages(self, scope: str, allowed: bool, *, updated_by: str, now: Instant = None) -> None: ...

    def direct_messages_allowed(self, scope: str) -> bool:
        """Whether direct messages are allowed in the workspace ``scope`` (yes unless turned off)."""
        ...


class AuditLog(Protocol):
    """Append-only, tamper-evident record of decisions, denied attempts, policy changes and expiries.

    Every entry carries the hash of the one before it (:mod:`storage.audit_chain`); ``verify`` walks the chain.
    """

    def append(self, actor: str, action: str, subject: str, details: dict[str, Any], now: Instant = None) -> int: ...

    def append_many(self, entries: Sequence[tuple[str, str, str, dict[str, Any]]], now: Instant = None) -> int:
        """Append ``(actor, action, subject, details)`` entries in one transaction; returns how many."""
        ...

    def recent(
        self, n: int = 20, actor: str | None = None, subject: str | None = None, *, workspace: str | None = None
    ) -> list[AuditEntry]:
        """The ``n`` newest entries, newest first; ``workspace`` (``slack:T1``) keeps only that workspace's."""
        ...

    def since(self, since: Instant = None, limit: int | None = None) -> list[AuditEntry]:
        """Entries at or after ``since`` (all when ``None``), oldest first, with their hashes."""
        ...

    def fewer_than(self, limit: int, actor: str, action: str, since: Instant = None) -> bool:
        """Whether ``actor`` has fewer than ``limit`` entries of ``action`` at or after ``since``: a rate limit.

        Required in a write batch just before the append that counts one more, the check and the count are one
        step: batches checking at the same time wait for each other (SQLite: the write lock; PostgreSQL: the
        chain's head, locked until the commit), so concurrent callers never pass the limit together.
        """
        ...

    def verify(self, *, prunes_allowed: bool = True, against: AuditHead | None = None) -> AuditVerification:
        """Check the chain from the newest pruning anchor (or the first entry) to its head.

        ``prunes_allowed``: whether audit retention is on (when it is not, any anchor is a forgery). With the
        store's audit key, every signature is checked. ``against``: a checkpoint (:meth:`head`) taken earlier.
        """
        ...

    def head(self) -> AuditHead:
        """The chain's newest entry, with its signature when the store has the audit key."""
        ...

    def sign_unsigned(self) -> int:
        """With the audit key: sign every entry and anchor that has no signature yet, and the head; how many.

        For a log written before the key was set; check the chain first (``countersign audit sign`` does).
        """
        ...

    def prune(self, older_than: Instant) -> int:
        """Delete entries older than ``older_than`` after recording the anchor the chain continues from."""
        ...


class EventDedupe(Protocol):
    """Platform event ids already handled (platforms retry deliveries)."""

    def first_time(self, event_key: str, now: Instant = None) -> bool: ...

    def prune(self, older_than_seconds: float, now: Instant = None) -> int: ...


class ConversationStore(Protocol):
    """Platform conversation references (e.g. for Teams proactive messages), by key."""

    def save(self, key: str, data: dict[str, Any]) -> None: ...

    def load(self, key: str) -> dict[str, Any] | None: ...


class ApprovalPlaces(Protocol):
    """Where each approval was shown (place keys such as ``slack:C1`` or ``slack:home:U1``)."""

    def record(self, approval_ids: Sequence[str], place: str, now: Instant = None) -> None: ...

    def shown_in(self, approval_id: str, place: str) -> bool: ...


class RunLeases(Protocol):
    """Who works on which run, until when: the owner's lease, renewed by its heartbeat.

    A run that is running or resuming has an owner (a process's instance id) and a lease expiry. Only a
    run whose lease has expired (or that has none) may be taken over, and taking over is one
    compare-and-set on the expiry, so two recovering processes never both win. A paused run has no
    owner: it waits for people, not for a process. Every method is one statement.
    """

    def claim_paused(
        self,
        run_id: str,
        owner: str,
        until: Instant,
        *,
        step: int | None = None,
        decided: bool = False,
        start: bool = False,
    ) -> RunRecord | None:
        """``paused → resuming`` with ``owner`` and a lease until ``until``; the run as claimed for exactly one
        caller (``UPDATE … WHERE status = 'paused' [AND step = ?] RETURNING …``), ``None`` for everyone else.

        ``step``: only a run paused at that step. ``decided``: only if the run's paused step has approvals and
        none of them is pending. The returned run is the row the claim wrote, so its owner can fence with it at
        once (no read after).

        ``start`` (with ``step`` only: the caller resumes that step's snapshot): ``paused → running`` in the same
        statement, the claim and the start of the work on it in one (a decision's transaction claims the run for
        its resume this way). The state machine holds in effect: ``resuming`` is only ever observable between a
        claim and its start, and here both commit together. ``ValueError`` without ``step``.
        """
        ...

    def claim_expired(self, run_id: str, owner: str, until: Instant, now: Instant = None) -> RunRecord | None:
        """Take over a running/resuming run whose lease expired by ``now``; the run, or ``None``.

        Counts the take-over in ``recoveries``. SQL: ``UPDATE runs SET owner=?, lease_expires_at=?,
        recoveries=recoveries+1 WHERE run_id=? AND status IN ('running','resuming') AND
        (lease_expires_at IS NULL OR lease_expires_at <= now) RETURNING ...``.

        ``recoveries`` is the run's fencing generation (see :class:`RunFence`): bumping it, with the new
        owner, in this one statement is what fences out every write of the previous owner from now on,
        even when a process takes over its own run. A release (``owner`` cleared) fences out too.
        """
        ...

    def renew(self, owner: str, until: Instant) -> list[str]:
        """Extend the lease of every running/resuming run ``owner`` holds; returns those runs' ids.

        A run the owner works on that is missing from the answer was taken over: the owner stops working on it.
        """
        ...

    def release(self, owner: str, now: Instant = None) -> int:
        """Give up ``owner``'s runs (owner cleared, lease expired at ``now``) so another process continues them."""
        ...

    def claim_own(self, owner: str, until: Instant, limit: int = 100) -> list[RunRecord]:
        """Take back, whatever their lease, the running/resuming runs ``owner`` holds; the runs as taken.

        Called once by a process that starts with the instance id of its previous life (which died holding
        these runs), before its first heartbeat renews them: it recovers them at once instead of after the
        lease. Bumps ``recoveries`` (the fencing generation) as a takeover does. SQL: ``UPDATE runs SET
        lease_expires_at=?, recoveries=recoveries+1 WHERE owner=? AND status IN ('running','resuming')``.
        """
        ...

    def expired(self, now: Instant = None, limit: int = 100) -> list[RunRecord]:
        """Running/resuming runs whose lease expired by ``now`` (or that have none), oldest first."""
        ...

    def decided_paused(self, limit: int = 100) -> list[RunRecord]:
        """Paused runs whose current step has approvals and none of them is pending (due a resume)."""
        ...


class ThreadInbox(Protocol):
    """Messages waiting for their thread, in arrival order; each starts exactly one run.

    ``start_next`` is the only way out of the inbox and is one transaction: if the thread has no active
    run, it takes the oldest waiting message, creates the run (running, with owner and lease), writes the
    message into the thread's history (by its id, so idempotently) and deletes it from the inbox. Either
    all of that happens or none, so a message is never lost between the inbox and the history and never
    starts two runs; and since only the thread's one active run writes to its history, messages are
    never interleaved.
    """

    def enqueue(
        self,
        address: ThreadAddress,
        requester: str,
        message: dict[str, Any],
        message_ref: str | None = None,
        now: Instant = None,
        event_key: str | None = None,
    ) -> int | None:
        """Store a message for the thread and return its inbox id (larger ids arrived later).

        With ``event_key``, the key is recorded in the event dedupe table in the same transaction, and a key
        seen before stores nothing and returns ``None`` (a platform's redelivery).
        """
        ...

    def start_next(
        self, chat_history_id: str, run_id: str, owner: str, until: Instant, now: Instant = None
    ) -> tuple[RunRecord, InboxItem] | None:
        """Start a run for the thread's oldest waiting message; ``None`` if a run is active or none waits."""
        ...

    def waiting(self, chat_history_id: str) -> list[InboxItem]:
        """The thread's waiting messages, oldest first."""
        ...

    def is_waiting(self, item_id: int) -> bool:
        """Whether the message is still in the inbox (not yet started)."""
        ...

    def orphaned(self, limit: int = 100) -> list[InboxItem]:
        """The oldest waiting message of each thread that has no running or resuming run.

        Those are messages whose drainer stopped (a crash, a shutdown); the sweep starts them.
        """
        ...


class Outbox(Protocol):
    """Messages owed to threads: stored first, then posted, then marked delivered.

    Each message has a caller-chosen ``key`` (adding the same key again changes nothing). Delivery is
    claimed by compare-and-set on ``claimed_until``, so one process posts it at a time; a process that
    dies mid-delivery leaves a claim that expires, and the message is posted again (at least once).
    """

    def add(
        self,
        key: str,
        address: ThreadAddress,
        text: str,
        *,
        claimed_by: str | None = None,
        claim_until: Instant = None,
        now: Instant = None,
        finishes_run: str | None = None,
        fence: RunFence | None = None,
        usage: TokenUsage | None = None,
    ) -> bool:
        """Store a message (claimed by ``claimed_by`` until ``claim_until`` if given); ``False`` if the key exists.

        ``finishes_run`` also moves that run from running/resuming to finished in the same transaction, and
        ``usage`` (only with ``finishes_run``) records its token usage then (as :meth:`RunStore.record_usage`).
        With a ``fence`` (for ``finishes_run``), nothing is written and ``False`` returned unless the fence
        holds in that transaction (see :class:`RunFence`): a fenced-out owner owes no answer.
        """
        ...

    def claim(self, key: str, owner: str, until: Instant, now: Instant = None) -> bool:
        """Claim an undelivered message whose claim is free or expired; ``True`` for one caller."""
        ...

    def delivered(self, key: str, now: Instant = None) -> bool:
        """Mark the message delivered (it is never posted again)."""
        ...

    def retry_later(self, key: str, at: Instant) -> bool:
        """Release the claim after a failed post; the message is due again at ``at``."""
        ...

    def due(self, platforms: Sequence[str], now: Instant = None, limit: int = 100) -> list[OutboxMessage]:
        """Undelivered messages of ``platforms`` that are due and not claimed, oldest first."""
        ...

    def undelivered(self, chat_history_id: str | None = None) -> list[OutboxMessage]:
        """Every message not yet delivered (of one thread, if given), oldest first."""
        ...


class Operations(Protocol):
    """What operators need: gauges for ``/metrics``, the ``/readyz`` probe, and retention.

    Retention never touches an active run, a pending approval, a tool call still ``executing``, or a
    thread with an active run or waiting messages; messages go by whole idle threads, so no tool call is
    ever separated from its result.
    """

    def pending_by_tool(self) -> dict[str, int]:
        """How many approvals wait for a decision, per tool."""
        ...

    def inbox_depth(self) -> int:
        """How many messages wait in thread inboxes."""
        ...

    def readiness_problem(self) -> str | None:
        """``None`` when the database is reachable, writable and migrated to this code's schema; else why not."""
        ...

    def drop_snapshots(self, finished_before: Instant) -> int:
        """Drop the snapshots of runs that ended before ``finished_before``; returns how many."""
        ...

    def prune(self, older_than: Instant, *, dry_run: bool = False) -> PruneCounts:
        """Delete ended runs (with their approvals and ledger entries), idle threads' messages and delivered
        outbox rows older than ``older_than``; with ``dry_run`` only count them."""
        ...


STORE_NAMES: tuple[str, ...] = (
    "messages",
    "runs",
    "approvals",
    "ledger",
    "policies",
    "audit",
    "events",
    "conversations",
    "places",
    "leases",
    "inbox",
    "outbox",
    "approver_groups",
    "access",
    "conditions",
    "tool_settings",
    "memories",
    "ops",
    "batches",
)
"""The stores every backend has, by attribute (the same on SQLite's facade and on PostgreSQL)."""


class WriteBatches(Protocol):
    """Several writes of one step in one transaction, and in one storage round trip.

    The engine describes a step's writes as a :class:`~storage.batch.Batch` (each write the store method it
    calls, named through ``storage.batch.stores``) and hands them over together; the backend applies them in
    order, atomically: SQLite in one ``SAVEPOINT`` on its writer thread (one hop, one group commit), PostgreSQL
    on one connection in one transaction. Each write means exactly what the store method means alone (fences,
    compare-and-sets, the audit chain). If a ``require``-d write returns a falsy result, or any write raises,
    nothing of the batch is written. A read among the writes reads in the batch's transaction (what the step
    needs to know as of its own writes, e.g. whether messages wait for the thread), saving the round trip of a
    read after it; with ``read_from`` it reads what an earlier result points to (or nothing), e.g. the history
    a decided step's snapshot refers to, once the batch's claim of the run won.

    Audit appends come last in a batch (:class:`ValueError` otherwise): on PostgreSQL an append locks the
    chain's head until the commit, so taking it last keeps that lock short and every batch takes its
    locks in the same order (rows first, the chain's head last), never deadlocking against another.
    """

    def read(self, batch: Batch) -> BatchOutcome:
        """Make ``batch``'s reads (read methods only) in order, in one round trip and one read transaction: SQLite
        on one reader thread (``BEGIN`` … ``COMMIT``: one snapshot of the database), PostgreSQL on one connection.
        Each result is what the store method returns alone; an error in any read raises.

        >>> batch = Batch()
        >>> latest = batch.read(stores.runs.latest_for_thread, "slack:T1:C1:170.1")
        >>> rules = batch.read(stores.access.rules, ["slack:T1:C1", "slack:T1"])
        >>> outcome = storage.batches.read(batch)
        >>> outcome[latest], outcome[rules]
        """
        ...

    def apply(self, batch: Batch) -> BatchOutcome:
        """Apply ``batch``'s writes in order, all or nothing (a read among them reads in the same transaction).

        >>> batch = Batch()
        >>> moved = batch.require(stores.runs.transition, "run-1", "running", "paused")
        >>> batch.write(stores.audit.append, "U1", "paused", "run-1", {})
        >>> storage.batches.apply(batch).applied
        True
        """
        ...


@dataclass(frozen=True)
class Memory:
    """One long-term memory as a search returns it: higher ``score`` is more relevant.

    ``user_id``, ``run_id`` and ``agent_id`` are its scope (``None``: not scoped by that); ``metadata``
    holds anything else, e.g. the channel of a channel's shared memory.

    >>> Memory("m1", "our staging cluster is eu-2", 1.5, "U_ANA", None, None, {"channel": "C1"}).to_dict()["text"]
    'our staging cluster is eu-2'
    """

    id: str
    text: str
    score: float = 0.0
    user_id: str | None = None
    run_id: str | None = None
    agent_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible data."""
        return {
            "id": self.id,
            "text": self.text,
            "score": self.score,
            "user_id": self.user_id,
            "run_id": self.run_id,
            "agent_id": self.agent_id,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Memory:
        """Inverse of :meth:`to_dict`."""
        return cls(
            id=data["id"],
            text=data["text"],
            score=float(data.get("score") or 0.0),
            user_id=data.get("user_id"),
            run_id=data.get("run_id"),
            agent_id=data.get("agent_id"),
            metadata=dict(data.get("metadata") or {}),
        )


@runtime_checkable
class MemoryStore(Protocol):
    """Long-term memories, searchable by words and scoped to users, runs and agents (methods may be async).

    Scoping (the same on every backend):

    - **search**: ``user_id`` / ``agent_id`` given → only memories with that value; ``run_id`` given →
      memories of that run *and* memories of no run; ``run_id`` not given → only memories of no run, so a
      run's scratch memories are seen only by a search that names the run. ``filters`` narrow further.
    - **count and delete**: each scope value given must match exactly; nothing given does not restrict.
      A delete with no ids, no filters and no scope is refused (``ValueError``): it would erase everything.

    The words of a query are OR-ed and ranked (BM25 on SQLite, ``ts_rank`` on PostgreSQL), so a question
    finds the fact that answers it; an empty query returns the newest memories in scope. Adds are
    idempotent: a message keeps its id, a text gets the digest of its scope and text. Values that look
    like secrets are masked before anything is stored. A malformed filter raises
    :class:`storage.memory_filters.FilterError` (a ``ValueError``).
    """

    def add_memories(
        self,
        messages_or_texts: Sequence[ChatMessage | str],
        *,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[str]: ...

    def search_memories(
        self,
        query: str | None,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 5,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[Memory]: ...

    def delete_memories(
        self,
        ids: Sequence[str] | None = None,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> int: ...

    def count_memories(
        self,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> int: ...


@dataclass(frozen=True)
class Wakeup:
    """A signal that a thread has waiting messages for a process to start, or that everything needs a look.

    ``address`` ``None``: wake-ups may have been missed (the listener reconnected) or runs were handed over
    (a process stopped): the receiver checks every thread, as its sweep would. ``owner``: only the process
    with that instance id is meant to act (the owner of the thread's active run); ``None``: any process.
    """

    address: ThreadAddress | None = None
    owner: str | None = None


class InboxWakeups(Protocol):
    """Wake-ups between processes sharing a database, so a waiting message does not wait for a sweep.

    Natively async on both backends (it is a subscription, not a store). PostgreSQL sends them with
    ``NOTIFY`` and receives them on a dedicated ``LISTEN`` connection; SQLite (one host) delivers them
    within the process only. The inbox's ``enqueue`` wakes the owner of the thread's running run by
    itself. A lost wake-up is never a lost message: the periodic sweep finds every waiting message.
    """

    async def listen(self) -> None:
        """Start receiving wake-ups (idempotent); returns once they are received, or raises ``StorageError``."""
        ...

    async def wake(self, address: ThreadAddress | None = None) -> None:
        """Ask every listening process to start the thread's waiting messages (``None``: to look at everything)."""
        ...

    async def next(self) -> Wakeup:
        """Wait for the next wake-up."""
        ...

    async def aclose(self) -> None:
        """Stop receiving; a pending :meth:`next` is cancelled."""
        ...
