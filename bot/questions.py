"""A question a running tool asks the person who started the run (an MCP server's ``elicitation/create``).

The tool waits on the answer while the engine delivers the question through the thread's surface, as it
delivers approvals (:mod:`bot.engine.questions`). These are the plain types both sides share: a tool source
builds a :class:`Question` and gets an :class:`Answer` back from an :data:`Asker`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

AnswerAction = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True)
class Question:
    """What a tool asks: a message and either a form (``schema``, flat JSON schema) or a link (``url``)."""

    source: str
    """Who asks: the MCP server's name."""
    tool: str
    """The tool whose call asks (as the agent knows it, ``<server>__<tool>``)."""
    message: str
    schema: dict[str, Any] = field(default_factory=dict)
    """Form mode: ``{"type": "object", "properties": {...}, "required": [...]}`` of strings, numbers,
    booleans and enums (MCP allows no nesting)."""
    url: str | None = None
    """URL mode: the page the person should open; never shown as a form field."""


@dataclass(frozen=True)
class Answer:
    """The person's answer: ``accept`` (with the form's values), ``decline`` or ``cancel``."""

    action: AnswerAction
    content: dict[str, Any] | None = None


DECLINED = Answer("decline")

Asker = Callable[[str, Question], Awaitable[Answer]]
"""``(run_id, question) -> answer``: asks the requester of ``run_id`` in the run's thread and waits."""
