"""The data the engine exchanges with adapters: platform-free, frozen, and safe to log by id."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.engine.roles import group_label, is_group
from storage.protocols import RunStatus

UNREAD: Any = object()
"""A value not read yet (an argument a caller may pass after reading it together with others)."""

WORKING_RUN_STATUSES: tuple[RunStatus, ...] = ("running", "resuming")
"""A run some process works on now (a paused run waits for people; the others have ended)."""

PENDING = "pending"
APPROVED = "approved"
REJECTED = "rejected"
MODIFIED = "modified"
RESPONDED = "responded"
"""Issue 30: a person answered in the tool's place (Respond); the tool never ran."""
EXPIRED = "expired"
SUPERSEDED = "superseded"
CANCELLED = "cancelled"
APPROVAL_STATUSES = (PENDING, APPROVED, REJECTED, MODIFIED, EXPIRED, SUPERSEDED, CANCELLED, RESPONDED)

CONFIRM = "confirm"
REJECT = "reject"
MODIFY = "modify"
BREAKGLASS = "breakglass"
"""Issue 31: the requester runs the call once, with a reason, after nobody decided in time (bot.engine.breakglass)."""
RESPOND = "respond"
"""Issue 30: the approver types the result the model gets instead of running the tool (``feedback``)."""
ACTIONS = (CONFIRM, REJECT, MODIFY, BREAKGLASS, RESPOND)


def conversation_place(platform: str, conversation: str) -> str:
    """The place key of one conversation: a channel, a direct message, a Teams chat (its id without the
    reply-chain suffix). Conversation ids are unique per platform, so the workspace is not part of it.

    >>> conversation_place("slack", "C1")
    'slack:C1'
    """
    return f"{platform}:{conversation}"


def home_place(platform: str, user: str) -> str:
    """The place key of one person's own view of their approvals (Slack's App Home tab).

    >>> home_place("slack", "U1")
    'slack:home:U1'
    """
    return f"{platform}:home:{user}"


@dataclass(frozen=True)
class ThreadRef:
    """One conversation thread on one platform; ``key`` is its chat-history id.

    >>> ThreadRef("slack", "T1", "C1", "1700000000.000100").key
    'slack:T1:C1:1700000000.000100'
    """

    platform: str
    workspace: str
    channel: str
    thread: str

    @property
    def key(self) -> str:
        """The chat-history id of this thread."""
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.thread}"

    @property
    def place(self) -> str:
        """The place key of this thread's conversation (where its approvals are shown and clicked)."""
        return conversation_place(self.platform, self.channel)


@dataclass(frozen=True)
class Inbound:
    """A message from a person to the bot, already verified and translated by an adapter.

    ``thread`` is where the bot answers (Slack: the thread ts, or the message ts for a new mention;
    Teams: the conversation id, including the reply chain). ``message_id`` is the platform id of this
    message (Slack ts, Teams activity id), used to show that the bot is working on it. ``event_id``
    dedupes platform retries. ``mentioned`` says whether the message mentions the bot (adapters pass
    ``False`` for a thread reply without a mention); ``is_direct`` marks a direct message, which is always
    addressed to the bot. Whether the bot acts on it is the engine's rule (:mod:`bot.engine.listening`).
    """

    platform: str
    workspace: str
    channel: str
    thread: str
    user: str
    text: str
    event_id: str
    message_id: str | None = None
    user_name: str | None = None
    is_direct: bool = False
    mentioned: bool = True

    @property
    def thread_ref(self) -> ThreadRef:
        """The thread this message belongs to."""
        return ThreadRef(self.platform, self.workspace, self.channel, self.thread)


@dataclass(frozen=True)
class BreakGlassReview:
    """Issue 31: the review of a break-glass decision, by someone other than its requester (from the audit)."""

    reviewer: str
    outcome: str
    """``ok`` or ``not-ok``."""
    note: str | None
    at: datetime


@dataclass(frozen=True)
class ApprovalView:
    """Everything an adapter needs to render one approval (a paused tool call) and its outcome.

    ``arguments`` are the full, unmasked values: render them only through
    :func:`bot.engine.presentation.display_arguments`, which masks secrets and truncates.
    """

    approval_id: str
    run_id: str
    thread: ThreadRef
    tool_name: str
    tool_description: str
    arguments: dict[str, Any]
    parameters_schema: dict[str, Any]
    requester: str
    policy_mode: str
    approvers: tuple[str, ...]
    quorum: int
    four_eyes: bool
    votes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    status: str = PENDING
    decided_by: str | None = None
    decided_at: datetime | None = None
    feedback: str | None = None
    final_arguments: dict[str, Any] | None = None
    message_ref: dict[str, Any] | None = None
    kind: str = "approval"
    """``approval`` (decide a call before it runs) or ``review`` (decide what the model sees of its result)."""
    result: str | None = None
    """For a review: the full result (render it only through :func:`bot.engine.presentation.display_result`)."""
    final_result: str | None = None
    """For a review edited by a person: the result the model sees instead."""
    destructive: bool = False
    """The tool is marked ``destructive=True``: Approve asks for confirmation where the surface can."""
    offer_always_allow: bool = False
    """Shown to one admin only (a DM, a personal view): offer "Approve and always allow here"."""
    deciders: tuple[str, ...] = ()
    """Who may decide it, as people (groups expanded, possibly from a short cache): for rendering only,
    e.g. whom Teams shows the buttons to. Every click is still checked by the engine."""
    provenance: dict[str, Any] | None = None
    """Arguments copied from untrusted text and where from (``bot.engine.provenance.provenance_lines`` words it)."""
    respondable: bool = False
    """Issue 30: whether a person may answer in the tool's place (Respond)."""
    preview: dict[str, Any] | None = None
    """What the call would do, as stored with the approval (``bot.engine.previewing.preview_sections`` shows it)."""
    request_reason: str | None = None
    """Issue 31: the reason the requester gave in the request ("… because <reason>"), if any."""
    breakglass_open: bool = False
    """Issue 31: nobody decided within the tool's break-glass delay, so its requester is offered Break glass (for
    rendering only: the engine checks the click again)."""
    breakglass_review: BreakGlassReview | None = None
    """Issue 31: for a break-glass decision, its review once done (``None``: still due)."""
    void_votes: tuple[str, ...] = ()
    """Issue 30: voters whose approval no longer counts, after an admin tightened the policy while it waited
    (``bot.engine.presentation.void_vote_sentence`` says why)."""

    @property
    def is_pending(self) -> bool:
        """Whether the approval still waits for a decision."""
        return self.status == PENDING

    @property
    def is_review(self) -> bool:
        """Whether this decides a result after the call ran (review after acting)."""
        return self.kind == "review"


@dataclass(frozen=True)
class ToolStep:
    """A tool call that ran without anyone's approval, to show as one compact line in the thread.

    ``arguments`` and ``result`` are full and unmasked: render them only through
    :func:`bot.engine.presentation.tool_step_line`, which masks secrets and truncates.
    """

    run_id: str
    tool_name: str
    arguments: dict[str, Any]
    result: str
    error: bool = False


@dataclass(frozen=True)
class DecisionRequest:
    """A click, translated: who did what to which approval, and where they clicked.

    ``place`` is the place key of the conversation or view the click came from
    (:func:`conversation_place`, :func:`home_place`, :attr:`ThreadRef.place`). An approval is decided
    only from a place where it was shown; a click without a place is refused (fail closed).
    """

    approval_id: str
    actor: str
    action: str
    feedback: str | None = None
    edited_params: dict[str, Any] | None = None
    actor_name: str | None = None
    place: str | None = None
    edited_result: str | None = None
    """For a review's ``modify`` (Edit result): the text the model sees instead of the result."""


@dataclass(frozen=True)
class DecisionResult:
    """The engine's answer to a decision: the clicked approval and every approval of its step, after it."""

    approval: ApprovalView
    step: tuple[ApprovalView, ...]
    message: str
    resumed: bool = False
    refused: tuple[str, ...] = ()
    """For Approve all: one sentence per call this actor could not approve (tell the clicker)."""


@dataclass(frozen=True)
class AdminRequest:
    """An admin command typed by a person (Slack's ``/countersign``, a Teams message)."""

    platform: str
    workspace: str
    channel: str
    actor: str
    text: str
    channel_names: dict[str, str] = field(default_factory=dict)
    """Channel id → the name people know it by (``ops`` for ``#ops``), where the surface knows it."""
    private: bool = True
    """Whether only ``actor`` sees the answer (a Slack slash command, a DM, the console); not in a Teams channel."""
    workspace_name: str | None = None
    """How confirmations name the whole workspace (the console: ``this chat``); ``None``: ``this workspace``."""


@dataclass(frozen=True)
class Mention:
    """Someone the engine names in a :class:`Note`: a person's platform id, or an approver group entry."""

    entry: str


@dataclass(frozen=True)
class Note:
    """A short text the engine writes that names people (who can decide, who asked).

    Surfaces render each :class:`Mention` their way (Slack: a real ``<@U…>`` mention; Teams: the display
    name) and escape every text part, so only ids the engine put in a ``Mention`` can become mentions.
    Groups are always shown by name, never as a ping.

    >>> Note(("Decided by ", Mention("U1"), " or ", Mention("group:oncall"), ".")).plain()
    'Decided by U1 or @oncall.'
    """

    parts: tuple[str | Mention, ...]
    review: str | None = None
    """Issue 31: the approval id of a break-glass whose review this note asks for. Surfaces with buttons add
    "Review: OK" / "Review: Not OK" for it (the engine checks every click); others show the text, which names
    ``breakglass review``."""

    def plain(self, name: Callable[[str], str] = lambda person: person) -> str:
        """The note as plain (unescaped) text, people shown by ``name(id)``, groups by their label."""
        return "".join(
            part if isinstance(part, str) else group_label(part.entry) if is_group(part.entry) else name(part.entry)
            for part in self.parts
        )

    def to_json(self) -> str:
        """The note as JSON text (for the durable outbox); :meth:`from_json` reads it back."""
        parts = [part if isinstance(part, str) else {"mention": part.entry} for part in self.parts]
        return json.dumps(parts if self.review is None else {"parts": parts, "review": self.review})

    @classmethod
    def from_json(cls, text: str) -> Note:
        """The note written by :meth:`to_json`; raises ``ValueError`` for anything else."""
        loaded = json.loads(text)
        review = None
        if isinstance(loaded, dict) and isinstance(loaded.get("review"), str):  # a note asking for a review
            review, loaded = loaded["review"], loaded.get("parts")
        if not isinstance(loaded, list):
            raise ValueError("a note is a JSON list")
        parts: list[str | Mention] = []
        for part in loaded:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("mention"), str):
                parts.append(Mention(part["mention"]))
            else:
                raise ValueError("a note part is a string or a mention")
        return cls(tuple(parts), review)


def plain_text(text: str | Note) -> str:
    """``text`` itself, or a :class:`Note` as plain text (for surfaces and logs that show ids as they are)."""
    return text.plain() if isinstance(text, Note) else text


@dataclass(frozen=True)
class QuestionField:
    """One input of a tool's question (a property of its flat schema), as adapters render it."""

    name: str
    title: str
    kind: str
    """``string``, ``number``, ``integer``, ``boolean`` or ``array`` (a multi-select of ``choices``: its value is
    a list of strings)."""
    required: bool = False
    description: str | None = None
    choices: tuple[tuple[str, str], ...] = ()
    """For an enum: ``(value, label)`` pairs; render a select, not a text input."""
    default: Any = None


@dataclass(frozen=True)
class QuestionView:
    """A question a running tool asks the run's requester (an MCP server's elicitation), and its outcome.

    ``message`` and every field's text come from the server: untrusted, escape them. ``url`` (URL mode) is
    shown as a link, never as a form field.
    """

    question_id: str
    run_id: str
    thread: ThreadRef
    requester: str
    source: str
    tool_name: str
    message: str
    fields: tuple[QuestionField, ...]
    url: str | None
    expires_at: datetime
    status: str = PENDING
    """``pending``, then ``accepted``, ``declined``, ``expired`` (nobody answered in time; declined) or
    ``withdrawn`` (the call that asked ended first: stopped, or past its time)."""
    answered_by: str | None = None


@dataclass(frozen=True)
class AnswerRequest:
    """A person's answer to a question: ``accept`` with ``values`` (form values, often strings) or ``decline``.

    A value of ``None`` means the person left the field empty.
    """

    question_id: str
    actor: str
    action: str
    values: dict[str, Any] = field(default_factory=dict)
