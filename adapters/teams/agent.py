"""``TeamsAgent``: the SDK ``ActivityHandler`` that turns Teams activities into engine calls.

* A message stores the conversation reference (for the proactive answers), then either answers an
  admin command in the turn, or stores the message (``engine.receive``), schedules ``engine.process``
  and returns, so Teams gets its ``202`` once the message is durable and long before the model answers.
* An ``adaptiveCard/action`` invoke becomes ``engine.decide`` / ``engine.approve_all``; the invoke
  response is the updated card (the engine also updates the posted card for everyone). Refusals,
  invalid edits and retried invokes come back as the current card with a notice on top, shown only to
  the clicker. Invokes are deduped by activity id (``engine.first_time``): a retry decides nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from microsoft_agents.activity import (
    Activity,
    ActivityTypes,
    AdaptiveCardInvokeResponse,
    AdaptiveCardInvokeValue,
    Attachment,
)
from microsoft_agents.hosting.core import ActivityHandler, TurnContext

from adapters.teams import handler
from adapters.teams.cards import (
    CARD_CONTENT_TYPE,
    VERB_APPROVE,
    VERB_APPROVE_ALL,
    VERB_EDIT,
    VERB_REJECT,
    EditForm,
    approval_card,
    edited_params,
    feedback_input_id,
    form_fields,
    invoke_card_response,
    invoke_message_response,
    param_input_id,
    text_card,
)
from adapters.teams.names import display_names, remember_name, with_names
from adapters.teams.surface import conversation_record
from bot.engine.admin_syntax import is_admin_command
from bot.engine.errors import AlreadyDecided, ApprovalNotFound, EngineError, InvalidEdit
from bot.engine.model import CONFIRM, MODIFY, REJECT, DecisionRequest, DecisionResult

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

GENERIC_FAILURE = "Something went wrong on the bot's side; nothing was decided. Please try again."


class TeamsAgent(ActivityHandler):
    """Routes messages and card clicks to the engine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- messages --------------------------------------------------------------------------------

    async def on_message_activity(self, turn_context: TurnContext) -> None:  # type: ignore[override]
        """A person wrote to the bot (personal chat, group chat, or a channel @mention)."""
        activity = turn_context.activity
        if handler.is_from_bot_itself(activity):
            return
        text = handler.message_text(activity)
        if not text:
            return
        thread = handler.thread_of(activity)
        await remember_name(self._engine, handler.actor_of(activity), handler.actor_name_of(activity))
        record = conversation_record(turn_context.identity, activity)
        await self._engine.save_conversation(thread.key, record)
        if handler.is_personal(activity):
            personal = handler.personal_key(thread.workspace, handler.actor_of(activity))
            await self._engine.save_conversation(personal, record)
        if is_admin_command(text):
            answer = await self._engine.admin(handler.admin_request(activity))
            if text.split(maxsplit=1)[0].lower().lstrip("/") == "help":
                # Teams never shows these ids; admins need theirs for COUNTERSIGN_ADMINS and approvers.
                answer += f"\n\nYour Teams user id: {handler.actor_of(activity)}"
            await turn_context.send_activity(_card_message(text_card(answer)))
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
            logger.error("agent run failed", extra={"thread": thread_key}, exc_info=task.exception())

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

    async def on_adaptive_card_invoke(  # type: ignore[override]
        self, turn_context: TurnContext, invoke_value: AdaptiveCardInvokeValue
    ) -> AdaptiveCardInvokeResponse:
        """An ``Action.Execute`` click on an approval card; the answer replaces the card for the clicker."""
        activity = turn_context.activity
        action = handler.card_action(activity.value)
        if action is None:
            return _response(invoke_message_response("This button is not one of countersign's."))
        try:
            body = await self._click(activity, action)
        except Exception:  # the clicker must get an answer within Teams' time limit, never a 500
            logger.exception("card action failed", extra={"approval_id": action.approval_id, "verb": action.verb})
            body = invoke_message_response(GENERIC_FAILURE)
        return _response(body)

    async def _click(self, activity: Activity, action: handler.CardAction) -> dict[str, Any]:
        engine = self._engine
        if activity.id and not await engine.first_time(f"teams:invoke:{activity.id}"):
            # Teams retried an invoke we already handled: show where things stand, decide nothing.
            return await self._current_card(action.approval_id)
        actor, actor_name = handler.actor_of(activity), handler.actor_name_of(activity)
        await remember_name(engine, actor, actor_name)
        try:
            result = await self._decide(action, actor, actor_name)
        except InvalidEdit as exc:
            view = await engine.get_approval(action.approval_id)
            submitted = {
                f.name: str(action.data[param_input_id(view.approval_id, f.name)])
                for f in form_fields(view)
                if f.kind != "secret" and param_input_id(view.approval_id, f.name) in action.data
            }
            fields = {k: v for k, v in exc.errors.items() if k != "_"}
            edit = EditForm(view.approval_id, submitted, fields) if fields else None
            problems = "; ".join(v if k == "_" else f"{k} {v}" for k, v in exc.errors.items())
            step = await with_names(engine, await engine.step_approvals(action.approval_id))
            return invoke_card_response(approval_card(step, notice=f"Nothing was decided: {problems}.", edit=edit))
        except ApprovalNotFound as exc:
            return invoke_message_response(str(exc))
        except AlreadyDecided as exc:
            notice = str(exc)
            if exc.decided_by:  # "already approved by 29:1a2b…" reads better with the name
                for person_id, name in (await display_names(engine, [exc.decided_by])).items():
                    notice = notice.replace(person_id, name)
            return await self._current_card(action.approval_id, notice=notice)
        except EngineError as exc:
            return await self._current_card(action.approval_id, notice=str(exc))
        notice = result.message if result.refused else None  # Approve all, partly refused: say what waits
        return invoke_card_response(approval_card(await with_names(engine, result.step), notice=notice))

    async def _decide(self, action: handler.CardAction, actor: str, actor_name: str | None) -> DecisionResult:
        engine = self._engine
        if action.verb == VERB_APPROVE_ALL:
            return await engine.approve_all(action.approval_id, actor, actor_name=actor_name)
        request = DecisionRequest(action.approval_id, actor, CONFIRM, actor_name=actor_name)
        if action.verb == VERB_REJECT:
            feedback = str(action.data.get(feedback_input_id(action.approval_id)) or "").strip() or None
            request = DecisionRequest(action.approval_id, actor, REJECT, feedback=feedback, actor_name=actor_name)
        elif action.verb == VERB_EDIT:
            view = await engine.get_approval(action.approval_id)
            changed = edited_params(view, action.data)
            if changed:  # "Save and approve" with nothing changed is a plain approval
                request = DecisionRequest(
                    action.approval_id, actor, MODIFY, edited_params=changed, actor_name=actor_name
                )
        elif action.verb != VERB_APPROVE:
            raise AssertionError(f"unhandled verb {action.verb!r}")  # card_action() only lets VERBS through
        return await engine.decide(request)

    async def _current_card(self, approval_id: str, notice: str | None = None) -> dict[str, Any]:
        try:
            step = await self._engine.step_approvals(approval_id)
        except ApprovalNotFound as exc:
            return invoke_message_response(notice or str(exc))
        return invoke_card_response(approval_card(await with_names(self._engine, step), notice=notice))


def _response(body: dict[str, Any]) -> AdaptiveCardInvokeResponse:
    return AdaptiveCardInvokeResponse(status_code=body["statusCode"], type=body["type"], value=body["value"])


def _card_message(card: dict[str, Any]) -> Activity:
    return Activity(
        type=ActivityTypes.message,
        attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=card)],
    )
