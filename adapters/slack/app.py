"""Bolt listeners: Slack events, clicks, modal submissions and ``/countersign`` become engine calls.

No rules live here. Each listener acknowledges first (Slack's 3 seconds) and hands slow work to a
background task, except Edit / Reject modal submissions, whose decision is made before the ack so
that invalid values come back as field errors in the ack itself; the message update after such a
decision still happens after the ack (``Engine.decide(..., render_later=True)``).

Which threads the bot hears without a mention: a thread where it was mentioned. When a mention
arrives, a marker ``slack-thread:<channel>:<thread ts>`` is stored with ``engine.save_conversation``;
later thread replies reach the engine (marked ``mentioned=False``) when their thread has that marker,
and the engine decides whether to act on them (``COUNTERSIGN_REPLY_MODE``). Both the ``app_mention`` and the
``message`` event of one message (a mention inside such a thread) reach the engine with the same
event id, ``msg:<channel>:<ts>``, and the engine's durable dedupe runs it once; Slack's retries
(``X-Slack-Retry-Num``) carry the same message, so they are dropped the same way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse

from adapters.slack.blocks import (
    ACTION_APPROVE,
    ACTION_APPROVE_ALL,
    ACTION_APPROVE_ALWAYS,
    ACTION_BREAKGLASS,
    ACTION_EDIT,
    ACTION_REJECT,
    ACTION_RESPOND,
    ACTION_REVIEW_NOT_OK,
    ACTION_REVIEW_OK,
    ACTION_SHOW_PREVIEW,
    ACTION_STOP,
    BREAKGLASS_CALLBACK,
    EDIT_CALLBACK,
    REASON_CALLBACK,
    REJECT_CALLBACK,
    RESPOND_CALLBACK,
    RESULT_BLOCK,
    REVIEW_CALLBACK,
    FormError,
    breakglass_modal,
    edit_modal,
    edit_values,
    feedback_value,
    field_errors,
    home_view,
    input_block_ids,
    notice_modal,
    preview_modal,
    reason_modal,
    reject_modal,
    respond_modal,
    review_modal,
)
from adapters.slack.mrkdwn import escape, split_message
from adapters.slack.prompts import suggested_prompts
from adapters.slack.questions import (
    ACTION_ANSWER,
    ACTION_DECLINE,
    ACTION_DONE,
    QUESTION_CALLBACK,
    question_modal,
    question_values,
)
from adapters.slack.surface import DIRECT_THREAD, SlackSurface
from bot.engine.breakglass_marks import NOT_OK, OK
from bot.engine.errors import EngineError, InvalidAnswer, InvalidEdit
from bot.engine.justification import JustificationRequired
from bot.engine.model import (
    BREAKGLASS,
    CONFIRM,
    MODIFY,
    REJECT,
    RESPOND,
    AdminRequest,
    AnswerRequest,
    ApprovalView,
    DecisionRequest,
    DecisionResult,
    Inbound,
    ThreadRef,
    conversation_place,
    home_place,
)

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

PLATFORM = "slack"
COMMAND = "/countersign"
ANSWERED_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
"""Message subtypes that are a person writing; edits, deletions, joins and bot posts are not."""
MAX_COMMAND_REPLIES = 4  # a response_url allows 5 uses
FormCheck = Callable[[str, str, str | None], Awaitable[ApprovalView]]
"""What must pass before a form opens: (approval id, clicker, place) → the call to show, or an EngineError."""
UNREADABLE_CLICK = "That click could not be read, so nothing was decided. Try the button again."
UNREADABLE_FORM = "This form could not be read, so nothing was decided. Close it and use the button again."


def thread_marker(channel: str, thread: str) -> str:
    """The conversation key that says the bot takes part in a thread."""
    return f"slack-thread:{channel}:{thread}"


class BackgroundTasks:
    """Work started after an ack (Slack's 3 seconds); tasks stay referenced and awaitable, failures logged."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        """Run ``coro`` in the background; failures are logged, never lost silently."""
        task = asyncio.create_task(self._run(coro, name), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Wait until every background task (and the tasks they started) has finished."""
        while self._tasks:
            # asyncio.wait, not gather: cancelling this wait must not cancel the tasks themselves.
            await asyncio.wait(list(self._tasks))

    async def cancel(self) -> None:
        """Cancel what is still running (shutdown)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            coro.close()
            raise
        except Exception:
            logger.exception("slack background task failed", extra={"task": name})


class SlackListeners:
    """The listeners of one AsyncApp, bound to an engine and a surface."""

    def __init__(self, engine: Engine, surface: SlackSurface, tasks: BackgroundTasks) -> None:
        self.engine = engine
        self.surface = surface
        self.tasks = tasks

    def register(self, app: AsyncApp) -> None:
        """Attach every listener to ``app``."""
        app.event("app_mention")(self.on_mention)
        app.event("message")(self.on_message)
        app.event("app_home_opened")(self.on_home_opened)
        app.event("assistant_thread_started")(self.on_assistant_thread_started)
        app.action(ACTION_APPROVE)(self.on_approve)
        app.action(ACTION_APPROVE_ALL)(self.on_approve_all)
        app.action(ACTION_APPROVE_ALWAYS)(self.on_approve_always)
        app.action(ACTION_REJECT)(self.on_open_reject)
        app.action(ACTION_EDIT)(self.on_open_edit)
        app.action(ACTION_RESPOND)(self.on_open_respond)
        app.action(ACTION_SHOW_PREVIEW)(self.on_open_preview)
        app.action(ACTION_STOP)(self.on_stop)
        app.action(ACTION_BREAKGLASS)(self.on_open_breakglass)
        app.action(ACTION_REVIEW_OK)(self.on_review_ok)
        app.action(ACTION_REVIEW_NOT_OK)(self.on_open_review_not_ok)
        app.view(BREAKGLASS_CALLBACK)(self.on_breakglass_submitted)
        app.view(REVIEW_CALLBACK)(self.on_review_submitted)
        app.view(REJECT_CALLBACK)(self.on_reject_submitted)
        app.view(REASON_CALLBACK)(self.on_reason_submitted)
        app.view(EDIT_CALLBACK)(self.on_edit_submitted)
        app.view(RESPOND_CALLBACK)(self.on_respond_submitted)
        app.action(ACTION_ANSWER)(self.on_open_question)
        app.action(ACTION_DECLINE)(self.on_decline_question)
        app.action(ACTION_DONE)(self.on_question_done)
        app.view(QUESTION_CALLBACK)(self.on_question_submitted)
        app.command(COMMAND)(self.on_command)
        app.error(self.on_error)

    async def on_error(self, error: Exception) -> BoltResponse:
        """An unhandled listener error: 503, so that Slack delivers the event again (a message never stored)."""
        logger.error("slack listener failed; Slack will retry", exc_info=error)
        return BoltResponse(status=503, body="")

    # ------------------------------------------------------------------ conversation

    async def on_mention(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """``@countersign …`` in a channel: answer in that message's thread (Bolt acks once this returns)."""
        if event.get("bot_id") or event.get("subtype") not in ANSWERED_SUBTYPES or not _is_person_message(event):
            return
        if event["channel"].startswith("D"):
            return  # a mention in a DM: the message.im event answers it, as one DM conversation
        inbound = _inbound(body, event, context.bot_user_id, thread=_text(event.get("thread_ts")) or event["ts"])
        marker = {"channel": inbound.channel, "thread_ts": inbound.thread, "team": inbound.workspace}
        # Saved in the message's own write (one transaction before the ack), or alone when it is not stored.
        conversation = (thread_marker(inbound.channel, inbound.thread), marker)
        await self._receive(inbound, name=f"slack-mention-{inbound.event_id}", conversation=conversation)

    async def on_message(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """Direct messages, and replies in threads the bot takes part in."""
        if event.get("bot_id") or event.get("subtype") not in ANSWERED_SUBTYPES or not _is_person_message(event):
            return
        if event.get("user") == context.bot_user_id:
            return
        if event.get("channel_type") == "im":
            thread = _text(event.get("thread_ts")) or DIRECT_THREAD
            inbound = _inbound(body, event, context.bot_user_id, thread=thread)
            await self._receive(inbound, name=f"slack-dm-{inbound.event_id}")
            return
        thread = _text(event.get("thread_ts"))
        if not thread or f"<@{context.bot_user_id}>" in (event.get("text") or ""):
            return  # not in a thread, or a mention: the app_mention event answers it
        inbound = _inbound(body, event, context.bot_user_id, thread=thread, mentioned=False)
        if await self.engine.load_conversation(thread_marker(inbound.channel, inbound.thread)) is not None:
            await self._receive(inbound, name=f"slack-thread-{inbound.event_id}")

    async def _receive(
        self, inbound: Inbound, name: str, conversation: tuple[str, dict[str, Any]] | None = None
    ) -> None:
        """Store the message before Bolt acknowledges the event (what Slack saw acknowledged is never lost),
        then process it in the background."""
        received = await self.engine.receive(inbound, conversation=conversation)
        if received is not None:
            self.tasks.spawn(self.engine.process(received), name=name)

    # ------------------------------------------------------------------ buttons

    async def on_approve(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve: ack, then decide; a refusal is told to the clicker only."""
        await ack()
        if (target := self._click_target(body, action)) is not None:
            request = DecisionRequest(*target, CONFIRM, actor_name=_actor_name(body), place=_place(body))
            self.tasks.spawn(self._decide_click(body, self.engine.decide(request)), name="slack-approve")

    async def on_approve_all(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve all: every pending call of the step this clicker may decide."""
        await ack()
        if (target := self._click_target(body, action)) is not None:
            decision = self.engine.approve_all(*target, actor_name=_actor_name(body), place=_place(body))
            self.tasks.spawn(self._decide_click(body, decision), name="slack-approve-all")

    async def on_approve_always(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve and always allow here (offered to admins only; the engine checks again)."""
        await ack()
        if (target := self._click_target(body, action)) is not None:
            decision = self.engine.approve_and_always_allow(*target, actor_name=_actor_name(body), place=_place(body))
            self.tasks.spawn(self._decide_click(body, decision, tell=True), name="slack-approve-always")

    def _click_target(self, body: Mapping[str, Any], action: Mapping[str, Any]) -> tuple[str, str] | None:
        """The approval id and the clicker of a button click, or ``None`` (and the clicker told) if unreadable."""
        approval_id, actor = _text(action.get("value")), _actor(body)
        if not approval_id or not actor:
            self.on_unreadable_click(body)
            return None
        return approval_id, actor

    async def on_stop(self, ack: Any, body: dict[str, Any], action: dict[str, Any], respond: Any) -> None:
        """Stop: the run ends after its current step (the engine checks who may stop it)."""
        await ack()
        run_id, actor = _text(action.get("value")), _actor(body)
        if not run_id or not actor:
            self.on_unreadable_click(body)
            return
        self.tasks.spawn(self._stop(body, run_id, actor, respond), name="slack-stop")

    async def _stop(self, body: dict[str, Any], run_id: str, actor: str, respond: Any) -> None:
        try:
            answer = await self.engine.stop_run(run_id, actor)
        except EngineError as refusal:
            answer = str(refusal)
        container = body.get("container")
        if isinstance(container, Mapping) and container.get("is_ephemeral"):
            await respond(text=escape(answer), replace_original=True)  # the private Stop note
            return
        await self._tell_clicker(body, answer)

    def on_unreadable_click(self, body: Mapping[str, Any]) -> bool:
        """A click whose action cannot be read: nothing is decided; the clicker is told when we know who and where.

        Returns whether the clicker will be told (the request is then acknowledged normally).
        """
        actor = _actor(body)
        if body.get("type") != "block_actions" or not actor or not (_from_home(body) or _channel(body)):
            logger.warning("unreadable slack click: nobody to tell")
            return False
        self.tasks.spawn(self._tell_clicker(body, UNREADABLE_CLICK), name="slack-unreadable-click")
        return True

    async def _decide_click(
        self, body: dict[str, Any], decision: Awaitable[DecisionResult], tell: bool = False
    ) -> None:
        try:
            result = await decision
        except JustificationRequired as needs:  # issue 31: ask for the reason in a modal, then approve with it
            await self._open_reason_modal(body, needs)
            return
        except EngineError as refusal:
            await self._tell_clicker(body, str(refusal))
            return
        if result.refused or tell:  # Approve all, partly refused: say which calls still wait
            await self._tell_clicker(body, result.message)
            return
        if _from_home(body) and (actor := _actor(body)):
            await self._publish_home(actor, _team(body))

    async def on_open_reject(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Reject: open the feedback modal (if this person may decide)."""
        await ack()
        self._spawn_open_modal(body, action, reject_modal, name="slack-open-reject")

    async def on_open_respond(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Respond (issue 30): open the modal with one text input (if this person may decide)."""
        await ack()
        self._spawn_open_modal(body, action, respond_modal, name="slack-open-respond")

    async def on_open_preview(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Show more (issue 30): the whole preview in a read-only modal (if this person may decide)."""
        await ack()
        self._spawn_open_modal(body, action, preview_modal, name="slack-open-preview")

    async def on_open_edit(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Edit: open the parameter modal (if this person may decide)."""
        await ack()
        self._spawn_open_modal(body, action, edit_modal, name="slack-open-edit")

    async def on_open_breakglass(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Break glass (issue 31): open the modal asking the reason, if the engine says this person may now."""
        await ack()
        self._spawn_open_modal(body, action, breakglass_modal, name="slack-open-breakglass", check=self._can_glass)

    async def on_review_ok(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Review: OK (issue 31) on a break-glass card: recorded at once; the clicker reads the outcome."""
        await ack()
        if (target := self._click_target(body, action)) is not None:
            self.tasks.spawn(self._review(body, *target, OK, None), name="slack-breakglass-review")

    async def on_open_review_not_ok(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Review: Not OK (issue 31): open the modal asking the note, if this person may review."""
        await ack()
        self._spawn_open_modal(body, action, review_modal, name="slack-open-review", check=self._can_review)

    async def _can_glass(self, approval_id: str, actor: str, place: str | None) -> ApprovalView:
        return await self.engine.check_can_break_glass(approval_id, actor, place)

    async def _can_review(self, approval_id: str, actor: str, place: str | None) -> ApprovalView:
        await self.engine.check_can_review_breakglass(approval_id, actor)
        return await self.engine.get_approval(approval_id)

    async def _review(self, body: dict[str, Any], approval_id: str, actor: str, outcome: str, note: str | None) -> None:
        try:
            answer = await self.engine.review_breakglass(approval_id, actor, outcome, note)
        except EngineError as refusal:
            answer = str(refusal)
        await self._tell_clicker(body, answer)

    def _spawn_open_modal(
        self, body: dict[str, Any], action: dict[str, Any], build: Any, name: str, check: FormCheck | None = None
    ) -> None:
        approval_id, actor, trigger = _text(action.get("value")), _actor(body), _text(body.get("trigger_id"))
        if not approval_id or not actor or not trigger:
            self.on_unreadable_click(body)
            return
        self.tasks.spawn(self._open_modal(body, approval_id, actor, trigger, build, check), name=name)

    async def _open_modal(
        self,
        body: dict[str, Any],
        approval_id: str,
        actor: str,
        trigger: str,
        build: Any,
        check: FormCheck | None = None,
    ) -> None:
        # views.open goes out right after the check: the trigger id dies 3 s after the click.
        try:
            view = await (check or self.engine.check_can_decide)(approval_id, actor, _place(body))
        except EngineError as refusal:
            await self._tell_clicker(body, str(refusal))
            return
        modal = build(view)
        modal["private_metadata"] = _modal_target(approval_id, _place(body))  # where the button was clicked
        await self.surface.open_modal(trigger, modal)

    async def _open_reason_modal(self, body: dict[str, Any], needs: JustificationRequired) -> None:
        actions = body.get("actions")
        action = actions[0] if isinstance(actions, list) and actions and isinstance(actions[0], Mapping) else {}
        approval_id, trigger = _text(action.get("value")), _text(body.get("trigger_id"))
        if not approval_id or not trigger or action.get("action_id") != ACTION_APPROVE:
            await self._tell_clicker(body, str(needs))  # Approve all, or no way to open a modal: say so
            return
        modal = reason_modal(await self.engine.get_approval(approval_id))
        modal["private_metadata"] = _modal_target(approval_id, _place(body))
        await self.surface.open_modal(trigger, modal)

    # ------------------------------------------------------------------ modal submissions

    async def on_reason_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Approve with the reason typed into the modal (issue 31)."""
        await self._decide_with_text(ack, body, view, CONFIRM)

    async def on_breakglass_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Break glass with the reason typed into the modal (issue 31): the engine checks everything again."""
        await self._decide_with_text(ack, body, view, BREAKGLASS)

    async def on_review_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Review: Not OK with the note typed into the modal (issue 31); a refusal replaces the modal."""
        approval_id, actor, values, _place_of_click = _submitted(body, view)
        if approval_id is None or actor is None or values is None:
            await ack(**_form_refused(view, UNREADABLE_FORM))
            return
        try:
            # The card is updated after the ack (a slow chat.update must not push the ack past Slack's 3 s).
            answer = await self.engine.review_breakglass(
                approval_id, actor, NOT_OK, feedback_value(values), render_later=True
            )
        except EngineError as refusal:
            await ack(response_action="update", view=notice_modal(str(refusal)))
            return
        await ack(response_action="update", view=notice_modal(answer))

    async def on_reject_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Reject with the feedback typed into the modal."""
        await self._decide_with_text(ack, body, view, REJECT)

    async def on_respond_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Respond with the text typed into the modal (issue 30): the tool does not run."""
        await self._decide_with_text(ack, body, view, RESPOND)

    async def _decide_with_text(self, ack: Any, body: dict[str, Any], view: dict[str, Any], action: str) -> None:
        """Decide ``action`` with the modal's one text field as the decision's feedback."""
        approval_id, actor, values, place = _submitted(body, view)
        if approval_id is None or actor is None or values is None:
            await ack(**_form_refused(view, UNREADABLE_FORM))
            return
        request = DecisionRequest(
            approval_id, actor, action, feedback=feedback_value(values), actor_name=_actor_name(body), place=place
        )
        await self._decide_in_modal(ack, view, request)

    async def on_edit_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Approve with the edited values, or show the engine's field errors in the modal."""
        approval_id, actor, values, place = _submitted(body, view)
        if approval_id is None or actor is None or values is None:
            await ack(**_form_refused(view, UNREADABLE_FORM))
            return
        try:
            edited = edit_values(values, view)
        except FormError as unreadable:  # e.g. an option the modal never offered: nothing is decided
            await ack(response_action="errors", errors=field_errors(unreadable.errors, view))
            return
        # The Edit result modal has one field, the review's new result; the engine checks it is a review.
        result = edited.pop(RESULT_BLOCK, None) if set(edited) <= {RESULT_BLOCK} else None
        request = DecisionRequest(
            approval_id,
            actor,
            MODIFY,
            edited_params=edited,
            actor_name=_actor_name(body),
            place=place,
            edited_result=result if isinstance(result, str) else None,
        )
        await self._decide_in_modal(ack, view, request)

    async def _decide_in_modal(self, ack: Any, view: dict[str, Any], request: DecisionRequest) -> None:
        # Decided before the ack: the ack is the only way to keep the modal open with errors. The message
        # update (a Slack API call that may be slow or retried) runs after the ack, so the ack stays fast.
        try:
            await self.engine.decide(request, render_later=True)
        except InvalidEdit as invalid:
            if not input_block_ids(view):
                await ack(response_action="update", view=notice_modal(str(invalid)))
                return
            await ack(response_action="errors", errors=field_errors(invalid.errors, view))
            return
        except EngineError as refusal:
            await ack(response_action="update", view=notice_modal(str(refusal)))
            return
        await ack()

    # ------------------------------------------------------------------ a running tool's questions

    async def on_open_question(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Answer: open the question's form (if this person may answer; the engine checks)."""
        await ack()
        question_id, actor, trigger = _text(action.get("value")), _actor(body), _text(body.get("trigger_id"))
        if not question_id or not actor or not trigger:
            self.on_unreadable_click(body)
            return
        self.tasks.spawn(self._open_question(body, question_id, actor, trigger), name="slack-open-question")

    async def _open_question(self, body: dict[str, Any], question_id: str, actor: str, trigger: str) -> None:
        try:
            question = await self.engine.check_can_answer(question_id, actor)
        except EngineError as refusal:
            await self._tell_clicker(body, str(refusal))
            return
        await self.surface.open_modal(trigger, question_modal(question))

    async def on_decline_question(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Decline: the tool is told the person did not answer."""
        await self._answer_click(ack, body, action, "decline")

    async def on_question_done(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Done (a link's question): accept, with no values."""
        await self._answer_click(ack, body, action, "accept")

    async def _answer_click(self, ack: Any, body: dict[str, Any], action: dict[str, Any], answer: str) -> None:
        await ack()
        question_id, actor = _text(action.get("value")), _actor(body)
        if not question_id or not actor:
            self.on_unreadable_click(body)
            return
        request = AnswerRequest(question_id, actor, answer)
        self.tasks.spawn(self._answer(body, request), name="slack-answer-question")

    async def _answer(self, body: dict[str, Any], request: AnswerRequest) -> None:
        try:
            await self.engine.answer_question(request)
        except EngineError as refusal:
            await self._tell_clicker(body, str(refusal))

    async def on_question_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Send the form's values; the engine's field errors come back in the modal."""
        question_id, actor = _text(view.get("private_metadata")), _actor(body)
        state = view.get("state")
        values = question_values(state.get("values") if isinstance(state, Mapping) else None)
        if not question_id or not actor or values is None:
            await ack(**_form_refused(view, UNREADABLE_FORM))
            return
        try:
            await self.engine.answer_question(AnswerRequest(question_id, actor, "accept", values))
        except InvalidAnswer as invalid:
            await ack(response_action="errors", errors=field_errors(invalid.errors, view))
            return
        except EngineError as refusal:
            await ack(response_action="update", view=notice_modal(str(refusal)))
            return
        await ack()

    # ------------------------------------------------------------------ admin and App Home

    async def on_command(self, ack: Any, command: dict[str, Any], respond: Any) -> None:
        """``/countersign <command>``: ack at once, then answer ephemerally through the response URL."""
        await ack()
        self.tasks.spawn(self._run_command(command, respond), name="slack-command")

    async def _run_command(self, command: dict[str, Any], respond: Any) -> None:
        user = _text(command.get("user_id"))
        if not user:
            logger.warning("slash command without a user ignored")
            return
        channel = _text(command.get("channel_id")) or ""
        text = _text(command.get("text")) or ""
        request = AdminRequest(
            PLATFORM,
            _text(command.get("team_id")) or "",
            channel,
            user,
            text,
            channel_names=channel_names(channel, _text(command.get("channel_name")), text),
        )
        answer = await self.engine.admin(request)
        try:
            for chunk in split_message(escape(answer), limit=3_800)[:MAX_COMMAND_REPLIES]:
                await respond(text=f"```{chunk}```", response_type="ephemeral")
        except (aiohttp.ClientError, ValueError) as exc:  # a response_url that is not a reachable URL
            logger.warning("slash command answer not delivered (%s)", type(exc).__name__)

    async def on_home_opened(self, event: dict[str, Any], context: Any) -> None:
        """Opening the Home tab shows the approvals this person may decide and the policy table."""
        user = _text(event.get("user"))
        if event.get("tab") == "home" and user:
            self.tasks.spawn(self._publish_home(user, _text(context.team_id) or ""), name="slack-home")

    async def on_assistant_thread_started(self, event: dict[str, Any]) -> None:
        """A person opened the app's assistant thread (a DM): offer up to 4 prompts from the configured tools."""
        started = event.get("assistant_thread")
        started = started if isinstance(started, Mapping) else {}
        channel, ts = _text(started.get("channel_id")), _text(started.get("thread_ts"))
        prompts = suggested_prompts(self.engine.tools.values())
        if channel and ts and prompts:
            self.tasks.spawn(self.surface.suggest_prompts(channel, ts, prompts), name="slack-prompts")

    async def _publish_home(self, user: str, team: str, notice: str | None = None) -> None:
        await self.surface.publish_home(user, await self.home_view_for(user, team, notice))

    async def home_view_for(self, user: str, team: str, notice: str | None = None) -> dict[str, Any]:
        """``user``'s App Home: the approvals they may decide now (decidable from there) and the policies."""
        pending = await self.engine.pending_for(PLATFORM, user, place=home_place(PLATFORM, user))
        policies = await self.engine.policy_table(PLATFORM, team)
        return home_view(pending, policies, notice)

    async def _tell_clicker(self, body: Mapping[str, Any], text: str) -> None:
        actor, channel = _actor(body), _channel(body)
        if not actor:
            return
        if _from_home(body):
            await self._publish_home(actor, _team(body), notice=text)
            return
        if not channel:
            return
        # Approval messages sit in a thread, except at the top level of a DM.
        message = body.get("message")
        thread = (_text(message.get("thread_ts")) if isinstance(message, Mapping) else None) or DIRECT_THREAD
        await self.surface.tell_user(ThreadRef(PLATFORM, _team(body), channel, thread), actor, text)


def _inbound(
    body: Mapping[str, Any], event: Mapping[str, Any], bot_user_id: str | None, thread: str, mentioned: bool = True
) -> Inbound:
    channel = event["channel"]
    text = _text(event.get("text")) or ""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()
    return Inbound(
        platform=PLATFORM,
        workspace=_text(body.get("team_id")) or _text(event.get("team")) or "",
        channel=channel,
        thread=thread,
        user=event["user"],
        text=text,
        event_id=f"msg:{channel}:{event['ts']}",
        message_id=event["ts"],
        is_direct=event.get("channel_type") == "im",
        mentioned=mentioned,
    )


def _is_person_message(event: Mapping[str, Any]) -> bool:
    """Whether the event names its channel, author and ts as Slack does (non-empty strings)."""
    return all(_text(event.get(key)) for key in ("channel", "user", "ts"))


def _text(value: Any) -> str | None:
    """``value`` if it is a string, else ``None`` (payload fields are untrusted in type too)."""
    return value if isinstance(value, str) else None


def _field(body: Mapping[str, Any], outer: str, inner: str) -> str | None:
    container = body.get(outer)
    return _text(container.get(inner)) if isinstance(container, Mapping) else None


def _actor(body: Mapping[str, Any]) -> str | None:
    return _field(body, "user", "id") or None


def _actor_name(body: Mapping[str, Any]) -> str | None:
    return _field(body, "user", "username") or _field(body, "user", "name")


def _channel(body: Mapping[str, Any]) -> str | None:
    return _field(body, "channel", "id") or None


def _team(body: Mapping[str, Any]) -> str:
    return _field(body, "team", "id") or _field(body, "user", "team_id") or ""


def _place(body: Mapping[str, Any]) -> str | None:
    """Where a button was clicked: the clicker's App Home, or the conversation of the message (else ``None``)."""
    if _from_home(body):
        actor = _actor(body)
        return home_place(PLATFORM, actor) if actor else None
    channel = (body.get("channel") or {}).get("id")
    return conversation_place(PLATFORM, channel) if channel else None


def _modal_target(approval_id: str, place: str | None) -> str:
    """A modal's ``private_metadata``: the approval and the place its button was clicked in (Slack keeps it
    server-side, so the submission carries it back unchanged)."""
    return json.dumps({"approval_id": approval_id, "place": place})


def _modal_source(metadata: str) -> tuple[str, str | None]:
    """The approval id and click place of :func:`_modal_target` (no place for anything else: refused)."""
    try:
        data = json.loads(metadata)
    except ValueError:
        return metadata, None
    if not isinstance(data, dict) or not isinstance(data.get("approval_id"), str):
        return metadata, None
    place = data.get("place")
    return data["approval_id"], place if isinstance(place, str) else None


def _from_home(body: Mapping[str, Any]) -> bool:
    return _field(body, "container", "type") == "view" and _field(body, "view", "type") == "home"


def _submitted(
    body: Mapping[str, Any], view: Mapping[str, Any]
) -> tuple[str | None, str | None, Mapping | None, str | None]:
    """A modal submission's approval id and click place (``private_metadata``), submitter and ``state.values``,
    each if readable."""
    metadata = _text(view.get("private_metadata"))
    approval_id, place = _modal_source(metadata) if metadata else (None, None)
    state = view.get("state")
    values = state.get("values") if isinstance(state, Mapping) else None
    return approval_id or None, _actor(body), values if isinstance(values, Mapping) else None, place


def _form_refused(view: Mapping[str, Any], text: str) -> dict[str, Any]:
    """The ack that keeps nothing decided: an error on the form's first input, or a notice in its place."""
    inputs = input_block_ids(view)
    if inputs:
        return {"response_action": "errors", "errors": {inputs[0]: text}}
    return {"response_action": "update", "view": notice_modal(text)}


_CHANNEL_MENTION = re.compile(r"<#([A-Za-z0-9_]+)\|([^>|]+)>")


def channel_names(channel: str, channel_name: str | None, text: str) -> dict[str, str]:
    """The names Slack gave with a slash command: its channel's, and each ``<#C123|ops>`` in its text."""
    names = {m.group(1): m.group(2) for m in _CHANNEL_MENTION.finditer(text)}
    if channel and channel_name and channel_name not in ("directmessage", "privategroup"):
        names.setdefault(channel, channel_name)
    return names
