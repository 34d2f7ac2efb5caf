"""``TeamsAgent``: the SDK ``ActivityHandler`` that turns Teams activities into engine calls.

* A message stores the conversation reference (for the proactive answers), then either answers an
  admin command in the turn, or stores the message (``engine.receive``), schedules ``engine.process``
  and returns, so Teams gets its ``202`` once the message is durable and long before the model answers.
* An ``adaptiveCard/action`` invoke becomes ``engine.decide`` / ``engine.approve_all``; the invoke
  response is the updated card (the engine also updates the posted card for everyone). Refusals and
  retried invokes come back as the current card with a notice on top, shown only to the clicker, with
  the buttons only if they may decide (as in their own ``refresh`` view); an invalid edit comes back
  with its form open and the errors by the fields.
  Invokes are deduped by activity id (``engine.first_time``): a retry decides nothing.
* Every ``adaptiveCard/action`` invoke is answered 200, whatever its ``value`` holds: a click that is
  not one of ours or carries values its card never offered decides nothing and gets a card or one
  sentence saying so (and one log line).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from microsoft_agents.activity import Activity, ActivityTypes, Attachment, InvokeResponse
from microsoft_agents.hosting.core import ActivityHandler, TurnContext

from adapters.teams import handler
from adapters.teams.cards import (
    CARD_CONTENT_TYPE,
    VERB_APPROVE,
    VERB_APPROVE_ALL,
    VERB_APPROVE_ALWAYS,
    VERB_BREAKGLASS,
    VERB_EDIT,
    VERB_REFRESH,
    VERB_REJECT,
    VERB_RESPOND,
    VERB_REVIEW_NOT_OK,
    VERB_REVIEW_OK,
    EditForm,
    answer_card,
    approval_card,
    breakglass_input_id,
    edited_params,
    edited_result,
    feedback_input_id,
    form_fields,
    invoke_card_response,
    invoke_message_response,
    param_input_id,
    reason_card,
    reason_input_id,
    refresh_users,
    respond_input_id,
    review_note_input_id,
    shared_card,
    unoffered_inputs,
)
from adapters.teams.names import display_names, named_text, remember_name, with_names
from adapters.teams.questions import VERB_ANSWER, answer_values, question_card
from adapters.teams.surface import channel_record, conversation_record
from bot.engine.admin_syntax import is_admin_command
from bot.engine.breakglass_marks import NOT_OK, OK
from bot.engine.errors import (
    MESSAGE_NOT_SAVED,
    AlreadyDecided,
    ApprovalNotFound,
    DatabaseUnavailable,
    EngineError,
    InvalidEdit,
    NotAnApprover,
    NotShownHere,
)
from bot.engine.justification import JustificationRequired
from bot.engine.model import (
    BREAKGLASS,
    CONFIRM,
    MODIFY,
    REJECT,
    RESPOND,
    AnswerRequest,
    DecisionRequest,
    DecisionResult,
    ThreadRef,
)
from storage import StorageError

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

GENERIC_FAILURE = "Something went wrong on the bot's side; nothing was decided. Please try again."
NOT_OURS = "This button is not one of countersign's; nothing was decided."
ADAPTIVE_CARD_ACTION = "adaptiveCard/action"


class TeamsAgent(ActivityHandler):
    """Routes messages and card clicks to the engine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- messages --------------------------------------------------------------------------------

    async def on_message_activity(self, turn_context: TurnContext) -> None:  # type: ignore[override]
        """A person wrote to the bot (personal chat, group chat, or a channel @mention)."""
        try:
            await self._on_message(turn_context)
        except StorageError as exc:
            # Teams does not deliver a message again, so the sender is told to; nothing of it was kept.
            logger.warning("teams message not stored: storage unavailable (%s)", exc)
            await turn_context.send_activity(MESSAGE_NOT_SAVED)

    async def _on_message(self, turn_context: TurnContext) -> None:
        activity = turn_context.activity
        if handler.is_from_bot_itself(activity):
            return
        text = handler.message_text(activity)
        if not text:
            return
        thread = handler.thread_of(activity)
        await remember_name(self._engine, handler.actor_of(activity), handler.actor_name_of(activity))
        await remember_name(self._engine, thread.channel, handler.place_name_of(activity))  # "policies in #name"
        record = conversation_record(turn_context.identity, activity)
        await self._engine.save_conversation(thread.key, record)
        if thread.thread != thread.channel:  # a channel's reply chain: keep how to post at the channel's top level
            top = ThreadRef(thread.platform, thread.workspace, thread.channel, "")
            await self._engine.save_conversation(top.key, channel_record(record, thread.channel))
        if handler.is_personal(activity):
            personal = handler.personal_key(thread.workspace, handler.actor_of(activity))
            await self._engine.save_conversation(personal, record)
        if is_admin_command(text):
            for person_id, name in handler.mentioned_people(activity).items():  # approvers, shown by name later
                await remember_name(self._engine, person_id, name)
            answer = await named_text(self._engine, await self._engine.admin(handler.admin_request(activity)))
            if text.split(maxsplit=1)[0].lower().lstrip("/") == "help":
                # Teams never shows these ids; admins need theirs for COUNTERSIGN_ADMINS and approvers.
                answer += f"\n\nYour Teams user id: {handler.actor_of(activity)}"
            await turn_context.send_activity(_card_message(answer_card(answer)))
            return
        # Stored before Teams gets its 202: a message the platform saw accepted survives this process dying.
        received = await self._engine.receive(handler.inbound_from(activity, text))
        if received is not None:
            self._spawn(self._engine.process(received), thread.key)

    def _spawn(self, work: Coroutine[Any, Any, None], thread_key: str) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._finished(t, thread_key))

    def _finished(self, task: asyncio.Task[Any], thread_key: str) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("agent run failed", extra={"thread_key": thread_key}, exc_info=task.exception())

    async def drain(self) -> None:
        """Wait for every scheduled ``engine.process`` (tests; shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel runs still in flight (the engine recovers them at its next start)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # --- card clicks -----------------------------------------------------------------------------

    async def on_invoke_activity(self, turn_context: TurnContext) -> InvokeResponse | None:  # type: ignore[override]
        """Card clicks are answered here, whatever shape their ``value`` has; other invokes go to the SDK.

        The SDK's own route (``on_adaptive_card_invoke``) answers a value it cannot parse with an error
        body that cannot be serialised: an HTTP 500. Ours answers every click 200.
        """
        activity = turn_context.activity
        if activity.name != ADAPTIVE_CARD_ACTION:
            return await super().on_invoke_activity(turn_context)
        return InvokeResponse(status=200, body=await self.card_click(activity))

    async def card_click(self, activity: Activity) -> dict[str, Any]:
        """The invoke response body for one ``Action.Execute`` click: the updated card, or a sentence."""
        run_id = handler.stop_click(activity.value)
        if run_id is not None:
            return await self._stop(activity, run_id)
        question = handler.question_click(activity.value)
        if question is not None:
            return await self._answer(activity, *question)
        action = handler.card_action(activity.value)
        if action is None:
            logger.warning("card click not understood; nothing decided", extra={"activity_id": activity.id})
            return invoke_message_response(NOT_OURS)
        try:
            return await self._click(activity, action)
        except StorageError as exc:  # the database is unreachable: nothing was decided, the clicker may retry
            logger.warning("card click refused: storage unavailable (%s)", exc)
            return invoke_message_response(str(DatabaseUnavailable()))
        except Exception:  # the clicker must get an answer within Teams' time limit, never a 500
            logger.exception("card action failed", extra={"approval_id": action.approval_id, "verb": action.verb})
            return invoke_message_response(GENERIC_FAILURE)

    async def _stop(self, activity: Activity, run_id: str) -> dict[str, Any]:
        """A Stop click: the run ends after its current step; the clicker reads one sentence."""
        try:
            return invoke_message_response(await self._engine.stop_run(run_id, handler.actor_of(activity)))
        except EngineError as refusal:
            return invoke_message_response(str(refusal))
        except StorageError as exc:
            logger.warning("stop refused: storage unavailable (%s)", exc)
            return invoke_message_response(str(DatabaseUnavailable()))

    async def _answer(self, activity: Activity, question_id: str, verb: str, data: dict[str, Any]) -> dict[str, Any]:
        """A click on a question's card: the card again with the refusal, its outcome, or the refusal alone."""
        actor = handler.actor_of(activity)
        await remember_name(self._engine, actor, handler.actor_name_of(activity))
        try:
            view = await self._engine.check_can_answer(question_id, actor)
        except EngineError as refusal:  # only the refusal: the card is not this clicker's to see
            return invoke_message_response(str(refusal))
        names = await display_names(self._engine, [view.requester, actor])
        values = answer_values(view, data) if verb == VERB_ANSWER else {}
        try:
            await self._engine.answer_question(
                AnswerRequest(question_id, actor, "accept" if verb == VERB_ANSWER else "decline", values)
            )
        except EngineError as refusal:
            return invoke_card_response(question_card(view, notice=f"Nothing was sent: {refusal}", names=names))
        closed = replace(view, status="accepted" if verb == VERB_ANSWER else "declined", answered_by=actor)
        return invoke_card_response(question_card(closed, names=names))

    async def _click(self, activity: Activity, action: handler.CardAction) -> dict[str, Any]:
        engine = self._engine
        if action.verb == VERB_REFRESH:  # Teams asks for this person's own view: decides nothing
            return await self._personal_card(activity, action.approval_id)
        if activity.id and not await engine.first_time(f"teams:invoke:{activity.id}"):
            # Teams retried an invoke we already handled: show where things stand, decide nothing.
            return await self._current_card(activity, action.approval_id)
        actor, actor_name = handler.actor_of(activity), handler.actor_name_of(activity)
        await remember_name(engine, actor, actor_name)
        if action.verb in (VERB_REVIEW_OK, VERB_REVIEW_NOT_OK):  # issue 31: a review, not a decision
            return await self._review(action, actor)
        try:
            result = await self._decide(action, actor, actor_name, handler.thread_of(activity).place)
        except InvalidEdit as exc:
            logger.warning(
                "card click refused: invalid values; nothing decided",
                extra={"approval_id": action.approval_id, "verb": action.verb, "fields": sorted(exc.errors)},
            )
            view = await engine.get_approval(action.approval_id)
            submitted = {  # a cleared field is shown empty again, by its error
                f.name: str(action.data.get(param_input_id(view.approval_id, f.name), ""))
                for f in form_fields(view)
                if f.kind != "secret"
                and (param_input_id(view.approval_id, f.name) in action.data or f.name in exc.errors)
            }
            fields = {k: v for k, v in exc.errors.items() if k != "_"}
            edit = EditForm(view.approval_id, submitted, fields) if fields else None
            problems = "; ".join(v if k == "_" else f"{k} {v}" for k, v in exc.errors.items())
            step = await with_names(engine, await engine.step_approvals(action.approval_id))
            return invoke_card_response(approval_card(step, notice=f"Nothing was decided: {problems}.", edit=edit))
        except (ApprovalNotFound, NotAnApprover, NotShownHere) as exc:
            # Only the refusal: never the card, whose outcome and content this clicker may not see.
            return invoke_message_response(str(exc))
        except AlreadyDecided as exc:
            notice = await named_text(engine, str(exc))  # "already approved by Ana", not 29:1a2b…
            return await self._current_card(activity, action.approval_id, notice=notice)
        except JustificationRequired as exc:  # issue 31: ask the clicker for the reason, then approve with it
            return invoke_card_response(reason_card(await engine.get_approval(action.approval_id), str(exc)))
        except EngineError as exc:
            return await self._current_card(activity, action.approval_id, notice=await named_text(engine, str(exc)))
        # Approve all, partly refused: say what waits ("already approved by Ana", not her id)
        notice = await named_text(engine, result.message) if result.refused else None
        return invoke_card_response(approval_card(await with_names(engine, result.step), notice=notice))

    async def _decide(
        self, action: handler.CardAction, actor: str, actor_name: str | None, place: str
    ) -> DecisionResult:
        engine = self._engine
        view = await engine.get_approval(action.approval_id)
        forged = unoffered_inputs(view, action.verb, action.data)
        if forged:  # a value the card never offered: refuse it like an invalid edit, by the field
            raise InvalidEdit(forged)
        if action.verb == VERB_APPROVE_ALL:
            return await engine.approve_all(action.approval_id, actor, actor_name=actor_name, place=place)
        if action.verb == VERB_APPROVE_ALWAYS:
            return await engine.approve_and_always_allow(action.approval_id, actor, actor_name=actor_name, place=place)
        reason = str(action.data.get(reason_input_id(action.approval_id)) or "").strip() or None  # issue 31
        request = DecisionRequest(
            action.approval_id, actor, CONFIRM, feedback=reason, actor_name=actor_name, place=place
        )
        if action.verb == VERB_RESPOND:  # issue 30: the engine refuses an empty answer or a tool not respondable
            answer = str(action.data.get(respond_input_id(action.approval_id)) or "")
            request = DecisionRequest(
                action.approval_id, actor, RESPOND, feedback=answer, actor_name=actor_name, place=place
            )
        elif action.verb == VERB_REJECT:
            feedback = str(action.data.get(feedback_input_id(action.approval_id)) or "").strip() or None
            request = DecisionRequest(
                action.approval_id, actor, REJECT, feedback=feedback, actor_name=actor_name, place=place
            )
        elif action.verb == VERB_BREAKGLASS:  # issue 31: the engine checks who, when, the reason and the limits
            reason = str(action.data.get(breakglass_input_id(action.approval_id)) or "").strip() or None
            request = DecisionRequest(
                action.approval_id, actor, BREAKGLASS, feedback=reason, actor_name=actor_name, place=place
            )
        elif action.verb == VERB_EDIT and view.is_review:
            result = edited_result(view, action.data)
            if result is not None:  # "Release edited" with the text as shown is a plain approval
                request = DecisionRequest(
                    action.approval_id, actor, MODIFY, edited_result=result, actor_name=actor_name, place=place
                )
        elif action.verb == VERB_EDIT:
            changed = edited_params(view, action.data)
            if changed:  # "Save and approve" with nothing changed is a plain approval
                request = DecisionRequest(
                    action.approval_id, actor, MODIFY, edited_params=changed, actor_name=actor_name, place=place
                )
        elif action.verb != VERB_APPROVE:
            raise AssertionError(f"unhandled verb {action.verb!r}")  # card_action() only lets VERBS through
        return await engine.decide(request)

    async def _review(self, action: handler.CardAction, actor: str) -> dict[str, Any]:
        """Review: OK / Review: Not OK (issue 31), on a break-glass card or on the review request (the channel's
        post, an approver's DM): the clicker reads the outcome or why not; the card is updated for everyone."""
        engine = self._engine
        try:
            view = await engine.get_approval(action.approval_id)
            forged = unoffered_inputs(view, action.verb, action.data)
            if forged:
                return invoke_message_response("Nothing was recorded: " + "; ".join(forged.values()) + ".")
            note = str(action.data.get(review_note_input_id(action.approval_id)) or "").strip() or None
            outcome = OK if action.verb == VERB_REVIEW_OK else NOT_OK
            answer = await engine.review_breakglass(action.approval_id, actor, outcome, note)
        except EngineError as refusal:
            answer = str(refusal)
        return invoke_message_response(await named_text(engine, answer))

    async def _personal_card(self, activity: Activity, approval_id: str) -> dict[str, Any]:
        """One person's view of a step's card: the buttons if the engine says they may decide, else the status;
        the requester of a call that offers Break glass gets that button (issue 31; the engine checks the click)."""
        actor = handler.actor_of(activity)
        try:
            views, may_decide = await self._engine.personal_step(approval_id, actor, handler.thread_of(activity).place)
        except ApprovalNotFound as exc:
            return invoke_message_response(str(exc))
        glass = any(v.is_pending and v.breakglass_open and v.requester == actor for v in views)
        # Break glass is the requester's alone: other people's own views leave it out (the engine refuses them anyway).
        mine = [v if v.requester == actor else replace(v, breakglass_open=False) for v in views]
        named = await with_names(self._engine, mine)
        if not may_decide and not glass:
            return invoke_card_response(shared_card(named, refresh_for=refresh_users(views)))
        card = approval_card(named, refresh_for=refresh_users(views), buttons=may_decide, breakglass=glass)
        return invoke_card_response(card)

    async def _current_card(self, activity: Activity, approval_id: str, notice: str | None = None) -> dict[str, Any]:
        """The step's card as it stands, for the clicker alone: with the buttons only if they may decide."""
        try:
            views, may_decide = await self._engine.personal_step(
                approval_id, handler.actor_of(activity), handler.thread_of(activity).place
            )
        except ApprovalNotFound as exc:
            return invoke_message_response(notice or str(exc))
        named = await with_names(self._engine, views)
        return invoke_card_response(approval_card(named, notice=notice, buttons=may_decide))


def _card_message(card: dict[str, Any]) -> Activity:
    return Activity(
        type=ActivityTypes.message,
        attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=card)],
    )
