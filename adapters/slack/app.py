"""Bolt listeners: Slack events, clicks, modal submissions and ``/countersign`` become engine calls.

No rules live here. Each listener acknowledges first (Slack's 3 seconds) and hands slow work to a
background task, except Edit / Reject modal submissions, whose decision is made before the ack so
that invalid values come back as field errors in the ack itself.

Which threads the bot answers without a mention: a thread where it was mentioned. When a mention
arrives, a marker ``slack-thread:<channel>:<thread ts>`` is stored with ``engine.save_conversation``;
later thread replies are answered when their thread has that marker. Both the ``app_mention`` and the
``message`` event of one message (a mention inside such a thread) reach the engine with the same
event id, ``msg:<channel>:<ts>``, and the engine's durable dedupe runs it once; Slack's retries
(``X-Slack-Retry-Num``) carry the same message, so they are dropped the same way.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse

from adapters.slack.blocks import (
    ACTION_APPROVE,
    ACTION_APPROVE_ALL,
    ACTION_EDIT,
    ACTION_REJECT,
    EDIT_CALLBACK,
    REJECT_CALLBACK,
    edit_modal,
    edit_values,
    feedback_value,
    field_errors,
    home_view,
    notice_modal,
    reject_modal,
)
from adapters.slack.mrkdwn import escape, split_message
from adapters.slack.surface import DIRECT_THREAD, SlackSurface
from bot.engine.errors import EngineError, InvalidEdit
from bot.engine.model import CONFIRM, MODIFY, REJECT, AdminRequest, DecisionRequest, Inbound, ThreadRef

if TYPE_CHECKING:
    from bot.engine.engine import Engine

logger = logging.getLogger(__name__)

PLATFORM = "slack"
COMMAND = "/countersign"
ANSWERED_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
"""Message subtypes that are a person writing; edits, deletions, joins and bot posts are not."""
MAX_COMMAND_REPLIES = 4  # a response_url allows 5 uses


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
        app.action(ACTION_APPROVE)(self.on_approve)
        app.action(ACTION_APPROVE_ALL)(self.on_approve_all)
        app.action(ACTION_REJECT)(self.on_open_reject)
        app.action(ACTION_EDIT)(self.on_open_edit)
        app.view(REJECT_CALLBACK)(self.on_reject_submitted)
        app.view(EDIT_CALLBACK)(self.on_edit_submitted)
        app.command(COMMAND)(self.on_command)
        app.error(self.on_error)

    async def on_error(self, error: Exception) -> BoltResponse:
        """An unhandled listener error: 503, so that Slack delivers the event again (a message never stored)."""
        logger.error("slack listener failed; Slack will retry", exc_info=error)
        return BoltResponse(status=503, body="")

    # ------------------------------------------------------------------ conversation

    async def on_mention(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """``@countersign …`` in a channel: answer in that message's thread (Bolt acks once this returns)."""
        if event.get("bot_id") or event.get("subtype") not in ANSWERED_SUBTYPES:
            return
        if str(event.get("channel", "")).startswith("D"):
            return  # a mention in a DM: the message.im event answers it, as one DM conversation
        inbound = _inbound(body, event, context.bot_user_id, thread=event.get("thread_ts") or event["ts"])
        marker = {"channel": inbound.channel, "thread_ts": inbound.thread, "team": inbound.workspace}
        await self.engine.save_conversation(thread_marker(inbound.channel, inbound.thread), marker)
        await self._receive(inbound, name=f"slack-mention-{inbound.event_id}")

    async def on_message(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """Direct messages, and replies in threads the bot takes part in."""
        if event.get("bot_id") or event.get("subtype") not in ANSWERED_SUBTYPES or not event.get("user"):
            return
        if event.get("user") == context.bot_user_id:
            return
        if event.get("channel_type") == "im":
            inbound = _inbound(body, event, context.bot_user_id, thread=event.get("thread_ts") or DIRECT_THREAD)
            await self._receive(inbound, name=f"slack-dm-{inbound.event_id}")
            return
        thread = event.get("thread_ts")
        if not thread or f"<@{context.bot_user_id}>" in (event.get("text") or ""):
            return  # not in a thread, or a mention: the app_mention event answers it
        inbound = _inbound(body, event, context.bot_user_id, thread=thread)
        if await self.engine.load_conversation(thread_marker(inbound.channel, inbound.thread)) is not None:
            await self._receive(inbound, name=f"slack-thread-{inbound.event_id}")

    async def _receive(self, inbound: Inbound, name: str) -> None:
        """Store the message before Bolt acknowledges the event (what Slack saw acknowledged is never lost),
        then process it in the background."""
        received = await self.engine.receive(inbound)
        if received is not None:
            self.tasks.spawn(self.engine.process(received), name=name)

    # ------------------------------------------------------------------ buttons

    async def on_approve(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve: ack, then decide; a refusal is told to the clicker only."""
        await ack()
        request = DecisionRequest(action["value"], _actor(body), CONFIRM, actor_name=_actor_name(body))
        self.tasks.spawn(self._decide_click(body, self.engine.decide(request)), name="slack-approve")

    async def on_approve_all(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Approve all: every pending call of the step this clicker may decide."""
        await ack()
        decision = self.engine.approve_all(action["value"], _actor(body), actor_name=_actor_name(body))
        self.tasks.spawn(self._decide_click(body, decision), name="slack-approve-all")

    async def _decide_click(self, body: dict[str, Any], decision: Coroutine[Any, Any, Any]) -> None:
        try:
            result = await decision
        except EngineError as refusal:
            await self._tell_clicker(body, str(refusal))
            return
        if result.refused:  # Approve all, partly refused: say which calls still wait
            await self._tell_clicker(body, result.message)
            return
        if _from_home(body):
            await self._publish_home(_actor(body), _team(body))

    async def on_open_reject(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Reject: open the feedback modal (if this person may decide)."""
        await ack()
        self.tasks.spawn(self._open_modal(body, action["value"], reject_modal), name="slack-open-reject")

    async def on_open_edit(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Edit: open the parameter modal (if this person may decide)."""
        await ack()
        self.tasks.spawn(self._open_modal(body, action["value"], edit_modal), name="slack-open-edit")

    async def _open_modal(self, body: dict[str, Any], approval_id: str, build: Any) -> None:
        # views.open goes out right after the check: the trigger id dies 3 s after the click.
        try:
            view = await self.engine.check_can_decide(approval_id, _actor(body))
        except EngineError as refusal:
            await self._tell_clicker(body, str(refusal))
            return
        await self.surface.open_modal(body["trigger_id"], build(view))

    # ------------------------------------------------------------------ modal submissions

    async def on_reject_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Reject with the feedback typed into the modal."""
        request = DecisionRequest(
            view["private_metadata"],
            _actor(body),
            REJECT,
            feedback=feedback_value(view["state"]["values"]),
            actor_name=_actor_name(body),
        )
        await self._decide_in_modal(ack, view, request)

    async def on_edit_submitted(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        """Approve with the edited values, or show the engine's field errors in the modal."""
        request = DecisionRequest(
            view["private_metadata"],
            _actor(body),
            MODIFY,
            edited_params=edit_values(view["state"]["values"]),
            actor_name=_actor_name(body),
        )
        await self._decide_in_modal(ack, view, request)

    async def _decide_in_modal(self, ack: Any, view: dict[str, Any], request: DecisionRequest) -> None:
        # Decided before the ack: the ack is the only way to keep the modal open with errors.
        try:
            await self.engine.decide(request)
        except InvalidEdit as invalid:
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
        request = AdminRequest(
            PLATFORM,
            command.get("team_id", ""),
            command.get("channel_id", ""),
            command["user_id"],
            command.get("text", ""),
        )
        answer = await self.engine.admin(request)
        for chunk in split_message(escape(answer), limit=3_800)[:MAX_COMMAND_REPLIES]:
            await respond(text=f"```{chunk}```", response_type="ephemeral")

    async def on_home_opened(self, event: dict[str, Any], context: Any) -> None:
        """Opening the Home tab shows the approvals this person may decide and the policy table."""
        if event.get("tab") == "home":
            self.tasks.spawn(self._publish_home(event["user"], context.team_id or ""), name="slack-home")

    async def _publish_home(self, user: str, team: str, notice: str | None = None) -> None:
        pending = await self.engine.pending_for(PLATFORM, user)
        policies = await self.engine.policy_table(PLATFORM, team)
        await self.surface.publish_home(user, home_view(pending, policies, notice))

    async def _tell_clicker(self, body: dict[str, Any], text: str) -> None:
        if _from_home(body):
            await self._publish_home(_actor(body), _team(body), notice=text)
            return
        # Approval messages sit in a thread, except at the top level of a DM.
        thread = (body.get("message") or {}).get("thread_ts") or DIRECT_THREAD
        where = ThreadRef(PLATFORM, _team(body), body["channel"]["id"], thread)
        await self.surface.tell_user(where, _actor(body), text)


def _inbound(body: Mapping[str, Any], event: Mapping[str, Any], bot_user_id: str | None, thread: str) -> Inbound:
    channel = event["channel"]
    text = event.get("text") or ""
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()
    return Inbound(
        platform=PLATFORM,
        workspace=body.get("team_id") or event.get("team") or "",
        channel=channel,
        thread=thread,
        user=event["user"],
        text=text,
        event_id=f"msg:{channel}:{event['ts']}",
        message_id=event["ts"],
        is_direct=event.get("channel_type") == "im",
    )


def _actor(body: Mapping[str, Any]) -> str:
    return body["user"]["id"]


def _actor_name(body: Mapping[str, Any]) -> str | None:
    user = body.get("user") or {}
    return user.get("username") or user.get("name")


def _team(body: Mapping[str, Any]) -> str:
    team = body.get("team") or {}
    return team.get("id") or body.get("user", {}).get("team_id") or ""


def _from_home(body: Mapping[str, Any]) -> bool:
    return (body.get("container") or {}).get("type") == "view" and (body.get("view") or {}).get("type") == "home"
