"""Questions a running tool asks the run's requester (an MCP server's elicitation), answered in the thread.

The tool's call waits while the question is shown through the thread's surface, as approvals are
(:meth:`~bot.engine.surface.Surface.ask_question`). An answer comes back through :meth:`Questions.answer`, from
the requester or an admin only (checked here, not in the adapters): ``accept`` with values checked against the
question's schema (a bad value is an :class:`~bot.engine.errors.InvalidAnswer` naming its field), or ``decline``.
Nobody answering within the approval TTL declines, as does a surface that cannot ask. The question and its
answer are audited with secrets masked (by field name and by value).

A question lives as long as its call, in the process that runs it: a process that dies takes its calls and
their questions with it, and an answer that reaches another process is told the question is not open there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.engine.admission import Admission
from bot.engine.errors import InvalidAnswer, InvalidEdit, NotAllowedToAnswer, QuestionNotOpen
from bot.engine.model import AnswerRequest, QuestionField, QuestionView
from bot.engine.params import merge_edit
from bot.engine.roles import Roles
from bot.engine.streaming import LiveAnswer
from bot.ids import new_id
from bot.questions import DECLINED, Answer, Question
from bot.redaction import mask_for_display, mask_text
from bot.tools import Tool

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

ACCEPTED, DECLINED_STATUS, EXPIRED, WITHDRAWN = "accepted", "declined", "expired", "withdrawn"
ANSWERED = "Thanks: your answer was passed on."
DECLINED_SENTENCE = "Declined: the tool was told you did not answer."


@dataclass
class _Open:
    view: QuestionView
    question: Question
    ref: dict[str, Any] | None = None
    answer: asyncio.Future[Answer] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Questions:
    """See the module docstring."""

    def __init__(
        self,
        storage: AsyncStores,
        roles: Roles,
        live: dict[str, LiveAnswer],
        clock: Callable[[], datetime],
        *,
        ttl_seconds: float,
        admission: Admission | None = None,
    ) -> None:
        self.admission = admission
        """This process's runs' places: a run waiting for an answer gives its place to another meanwhile."""
        self.storage = storage
        self.roles = roles
        self.live = live
        """The live answer of every run this process works on: its thread, requester and surface."""
        self.clock = clock
        self.ttl_seconds = ttl_seconds
        self._open: dict[str, _Open] = {}

    async def ask(self, run_id: str, question: Question) -> Answer:
        """Ask ``run_id``'s requester ``question`` in its thread and wait (at most the approval TTL)."""
        live = self.live.get(run_id)
        if live is None:
            return DECLINED  # not a run of this process (or it ended): nobody here to ask
        now = self.clock()
        view = QuestionView(
            question_id=new_id(),
            run_id=run_id,
            thread=live.thread,
            requester=live.requester,
            source=question.source,
            tool_name=question.tool,
            message=question.message,
            fields=() if question.url is not None else form_fields(question.schema),
            url=question.url,
            expires_at=now + timedelta(seconds=self.ttl_seconds),
        )
        await self.storage.audit.append(
            question.source,
            "question asked",
            view.question_id,
            {
                "run_id": run_id,
                "tool": question.tool,
                "message": mask_text(question.message),
                "url": question.url,
                "fields": [f.name for f in view.fields],
            },
            now=now,
        )
        # Open before it is shown: an answer may arrive as soon as the surface has posted it.
        opened = self._open[view.question_id] = _Open(view, question)
        try:
            opened.ref = await live.surface.ask_question(live.thread, view)
            if opened.ref is None:  # the surface cannot ask: fail closed
                await self._close(view, DECLINED_STATUS, "countersign", None)
                return DECLINED
            if opened.answer.done():  # answered while it was being posted: show the outcome now
                await live.surface.update_question(live.thread, opened.ref, opened.view)
            else:
                await live.status(f"waiting for {view.requester}'s answer")
            if self.admission is None:
                return await asyncio.wait_for(asyncio.shield(opened.answer), self.ttl_seconds)
            async with self.admission.aside(run_id):  # a person may take minutes: another run works meanwhile
                return await asyncio.wait_for(asyncio.shield(opened.answer), self.ttl_seconds)
        except TimeoutError:
            await self.expire(view.question_id)
            return DECLINED
        except asyncio.CancelledError:  # the call that asked ended first (stopped, timed out): withdrawn
            if not opened.answer.done():
                await asyncio.shield(self._close(view, WITHDRAWN, "countersign", None, opened))
            raise
        finally:
            self._open.pop(view.question_id, None)

    def get(self, question_id: str) -> QuestionView:
        """The open question as adapters render it; :class:`QuestionNotOpen` if it is not open here."""
        opened = self._open.get(question_id)
        if opened is None:
            raise QuestionNotOpen()
        return opened.view

    async def check_can_answer(self, question_id: str, actor: str) -> QuestionView:
        """The open question, if ``actor`` may answer it (its run's requester or an admin); else it raises
        (:class:`QuestionNotOpen`, :class:`NotAllowedToAnswer`, the refusal audited). Adapters call it before
        opening a form; :meth:`answer` checks again."""
        opened = self._open.get(question_id)
        if opened is None or opened.answer.done():
            raise QuestionNotOpen()
        view = opened.view
        if actor != view.requester and not await self.roles.is_admin(actor, view.thread.platform):
            await self.storage.audit.append(actor, "answer refused", view.question_id, {}, now=self.clock())
            raise NotAllowedToAnswer()
        return view

    async def answer(self, request: AnswerRequest) -> str:
        """Pass a person's answer on; the sentence for them. Refusals raise (nothing is passed on)."""
        view = await self.check_can_answer(request.question_id, request.actor)
        opened = self._open.get(request.question_id)
        if opened is None or opened.answer.done():  # answered or expired while the roles were read
            raise QuestionNotOpen()
        if request.action != "accept":
            await self._close(view, DECLINED_STATUS, request.actor, None, opened)
            opened.answer.set_result(DECLINED)
            return DECLINED_SENTENCE
        content = checked_values(opened.question.schema, request.values) if view.url is None else None
        if opened.answer.done():  # answered while the values were checked
            raise QuestionNotOpen()
        await self._close(view, ACCEPTED, request.actor, content, opened)
        opened.answer.set_result(Answer("accept", content))
        return ANSWERED

    async def expire(self, question_id: str) -> None:
        """Decline ``question_id`` because nobody answered in time (the sweep and the call's own timer)."""
        opened = self._open.get(question_id)
        if opened is None or opened.answer.done():
            return
        await self._close(opened.view, EXPIRED, "countersign", None, opened)
        opened.answer.set_result(DECLINED)

    async def expire_due(self) -> int:
        """Decline every open question past its TTL by this process's clock; how many."""
        now = self.clock()
        due = [q for q, o in self._open.items() if o.view.expires_at <= now and not o.answer.done()]
        for question_id in due:
            await self.expire(question_id)
        return len(due)

    async def _close(
        self,
        view: QuestionView,
        status: str,
        actor: str,
        content: dict[str, Any] | None,
        opened: _Open | None = None,
    ) -> None:
        details: dict[str, Any] = {"run_id": view.run_id, "status": status}
        if content is not None:
            details["content"] = mask_for_display(content)
        await self.storage.audit.append(actor, f"question {status}", view.question_id, details, now=self.clock())
        if opened is None:
            return
        opened.view = replace(view, status=status, answered_by=actor if status != EXPIRED else None)
        live = self.live.get(view.run_id)
        if live is None or opened.ref is None:
            return
        try:
            await live.surface.update_question(view.thread, opened.ref, opened.view)
        except Exception:  # cosmetic: the answer goes to the tool anyway
            logger.warning("question not updated", extra={"run_id": view.run_id}, exc_info=True)


def form_fields(schema: Mapping[str, Any]) -> tuple[QuestionField, ...]:
    """The inputs of a flat elicitation schema (strings, numbers, booleans, enums), in the schema's order."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    out: list[QuestionField] = []
    for name, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        kind = spec.get("type") if spec.get("type") in ("number", "integer", "boolean", "array") else "string"
        # A multi-select (an array of enum strings) takes its choices from its items.
        choices = _choices(spec["items"] if kind == "array" and isinstance(spec.get("items"), dict) else spec)
        out.append(
            QuestionField(
                name=str(name),
                title=str(spec.get("title") or name),
                kind=str(kind),
                required=name in required,
                description=spec.get("description") if isinstance(spec.get("description"), str) else None,
                choices=choices,
                default=spec.get("default"),
            )
        )
    return tuple(out)


def _choices(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(value, label)`` pairs of an enum: ``enum`` (with the legacy ``enumNames``) or titled ``oneOf``/``anyOf``."""
    if isinstance(spec.get("enum"), list):
        names = spec.get("enumNames")
        labels: list[Any] = names if isinstance(names, list) else spec["enum"]
        return tuple((str(v), str(label)) for v, label in zip(spec["enum"], labels, strict=False))
    for key in ("oneOf", "anyOf"):  # titled: [{"const": v, "title": label}, ...]
        if isinstance(spec.get(key), list):
            return tuple(
                (str(o["const"]), str(o.get("title", o["const"])))
                for o in spec[key]
                if isinstance(o, dict) and "const" in o
            )
    return ()


def checked_values(schema: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` typed by ``schema`` and validated; :class:`InvalidAnswer` with a message per bad field.

    The same check an edited call's parameters get (:func:`bot.engine.params.merge_edit`): an empty value
    (``None``) of a required field is refused, of an optional one dropped.
    """
    form = Tool(name="question", description="", parameters=dict(schema), function=_never)
    missing = [n for n in schema.get("required") or [] if n not in values]
    if missing:
        raise InvalidAnswer({name: "is required" for name in missing})
    try:
        return merge_edit(form, {}, dict(values))
    except InvalidEdit as exc:
        raise InvalidAnswer(exc.errors) from None


def _never(**_kwargs: Any) -> None:
    raise RuntimeError("a question's form is never called")
