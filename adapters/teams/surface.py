"""``TeamsSurface``: the engine speaks into Teams proactively, from stored conversation references.

Every output goes through ``CloudAdapter.continue_conversation_with_claims`` with a conversation
reference and the incoming token's claims saved by the engine (``save_conversation``) when the person
wrote. Nothing depends on an open request, so an answer produced after an approval, even after a
restart, still arrives in the original chat or channel reply chain.

``tell_user``: Teams has no ephemeral messages in channels. When the person has a personal chat with
the bot (its reference is stored whenever they write there), the text goes there privately;
otherwise it is posted in the thread, mentioning nobody. (Refusals of card clicks do not come here:
they are shown only to the clicker, in the invoke response.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from microsoft_agents.activity import Activity, ActivityTypes, Attachment, ConversationReference
from microsoft_agents.hosting.core import ChannelServiceAdapter, ClaimsIdentity, TurnContext
from microsoft_agents.hosting.core.app.proactive import Conversation

from adapters.teams.cards import CARD_CONTENT_TYPE, shared_card
from adapters.teams.handler import personal_key
from adapters.teams.names import with_names
from adapters.teams.store import ConversationStore
from adapters.teams.text import markdown_message, plain_message
from bot.engine.model import ApprovalView, ThreadRef

logger = logging.getLogger(__name__)

T = TypeVar("T")
TYPING_INTERVAL_SECONDS = 3.0
"""Teams shows a typing indicator for a few seconds; repeat it while the agent works."""


def typing_task_name(thread: ThreadRef) -> str:
    """The name of the task that repeats the typing indicator in ``thread``."""
    return f"teams-typing:{thread.key}"


class ConversationUnknown(LookupError):
    """No conversation reference is stored for a thread: the bot cannot post there."""


def conversation_record(identity: ClaimsIdentity | None, activity: Activity) -> dict[str, Any]:
    """What to store to reach this conversation later: the SDK's own proactive ``Conversation`` record.

    It keeps the reference (service URL, conversation, bot, user, the message's id) and the token
    claims that pick the outgoing credentials (``aud``, ``appid``, ``iss``, ...; none when anonymous).
    """
    return Conversation(identity or {}, activity.get_conversation_reference()).store_item_to_json()


def card_activity(approvals: Sequence[ApprovalView]) -> Activity:
    """A message activity carrying the approval card of one step."""
    card = shared_card(approvals)
    return Activity(
        type=ActivityTypes.message,
        attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=card)],
        summary="Approval needed",
    )


class TeamsSurface:
    """The engine's output side for Teams (see the module docstring)."""

    def __init__(
        self,
        adapter: ChannelServiceAdapter,
        store: ConversationStore,
        typing_interval: float = TYPING_INTERVAL_SECONDS,
    ) -> None:
        self._adapter = adapter
        self._store = store
        self._typing_interval = typing_interval
        self._typing: dict[str, asyncio.Task[None]] = {}

    async def _reference(self, key: str) -> Conversation:
        record = await self._store.load_conversation(key)
        if record is None:
            raise ConversationUnknown(f"no Teams conversation reference is stored for {key!r}")
        return Conversation.from_json_to_store_item(record)

    async def _continue(self, key: str, act: Callable[[TurnContext], Awaitable[T]]) -> T:
        """Run ``act`` in a proactive turn of the conversation stored under ``key``; errors propagate."""
        conversation = await self._reference(key)
        reference: ConversationReference = conversation.conversation_reference
        continuation = reference.get_continuation_activity()
        if reference.activity_id:
            # Replies then go to the person's message: in a channel that is its reply chain.
            continuation.id = reference.activity_id
        outcome: list[T] = []
        failure: list[BaseException] = []

        async def callback(context: TurnContext) -> None:
            # The adapter would swallow errors into on_turn_error; the engine must see them.
            try:
                outcome.append(await act(context))
            except Exception as exc:  # noqa: BLE001 - re-raised below, outside the SDK pipeline
                failure.append(exc)

        claims = Conversation.identity_from_claims(conversation.claims)
        await self._adapter.continue_conversation_with_claims(claims, continuation, callback)
        if failure:
            raise failure[0]
        return outcome[0]

    async def _send(self, key: str, activity: Activity) -> str | None:
        async def send(context: TurnContext) -> str | None:
            response = await context.send_activity(activity)
            return response.id if response else None

        return await self._continue(key, send)

    async def post_reply(self, thread: ThreadRef, text: str) -> None:
        """Post the agent's answer as safe Markdown (links shown with their target, no mentions)."""
        await self._stop_typing(thread.key)
        message = Activity(type=ActivityTypes.message, text=markdown_message(text), text_format="markdown")
        await self._send(thread.key, message)

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        """Post the step's approval card; the reference is the conversation key and the card's activity id."""
        await self._stop_typing(thread.key)
        shown = await with_names(self._store, approvals)
        activity_id = await self._send(thread.key, card_activity(shown))
        return {"conversation": thread.key, "activity_id": activity_id}

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Replace the posted card for everyone (``PUT`` of the stored activity id to the connector)."""
        activity_id = message_ref.get("activity_id")
        if not activity_id:
            logger.warning("approval card has no activity id; cannot update it", extra={"thread": thread.key})
            return
        updated = card_activity(await with_names(self._store, approvals))
        updated.id = activity_id

        async def update(context: TurnContext) -> None:
            await context.update_activity(updated)

        await self._continue(message_ref.get("conversation") or thread.key, update)

    async def tell_user(self, thread: ThreadRef, user: str, text: str) -> None:
        """Tell one person something: in their personal chat with the bot if known, else in the thread."""
        message = Activity(type=ActivityTypes.message, text=plain_message(text), text_format="markdown")
        private = personal_key(thread.workspace, user)
        if await self._store.load_conversation(private) is not None:
            await self._send(private, message)
            return
        await self._send(thread.key, message)

    async def direct_thread(self, workspace: str, user: str) -> ThreadRef | None:
        """The personal chat of ``user`` with the bot, if they ever wrote there (Teams cannot open one here)."""
        record = await self._store.load_conversation(personal_key(workspace, user))
        if record is None:
            return None
        conversation = (record.get("conversation_reference") or {}).get("conversation") or {}
        conversation_id = conversation.get("id")
        if not isinstance(conversation_id, str) or not conversation_id:
            return None
        return ThreadRef("teams", workspace, conversation_id.split(";", 1)[0], conversation_id)

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        """A typing indicator, repeated until the answer (or ``working=False``)."""
        if not working:
            await self._stop_typing(thread.key)
            return
        if thread.key in self._typing and not self._typing[thread.key].done():
            return
        try:
            await self._send_typing(thread.key)
        except Exception:  # cosmetic: never let a typing indicator fail the run
            logger.warning("typing indicator failed", extra={"thread": thread.key}, exc_info=True)
            return
        self._typing[thread.key] = asyncio.create_task(self._keep_typing(thread.key), name=typing_task_name(thread))

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """One typing indicator: the message was received and waits for the current answer."""
        try:
            await self._send_typing(thread.key)
        except Exception:  # cosmetic: the message is queued either way
            logger.warning("typing indicator failed", extra={"thread_key": thread.key}, exc_info=True)

    async def _send_typing(self, key: str) -> None:
        await self._send(key, Activity(type=ActivityTypes.typing))

    async def _keep_typing(self, key: str) -> None:
        while True:
            await asyncio.sleep(self._typing_interval)
            try:
                await self._send_typing(key)
            except Exception:  # a lost typing indicator is not worth failing the run
                logger.warning("typing indicator failed", extra={"thread": key}, exc_info=True)

    async def _stop_typing(self, key: str) -> None:
        task = self._typing.pop(key, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def close(self) -> None:
        """Stop every typing indicator."""
        for key in list(self._typing):
            await self._stop_typing(key)
