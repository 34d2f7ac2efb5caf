"""``TeamsSurface``: the engine speaks into Teams proactively, from stored conversation references.

Every output goes through ``CloudAdapter.continue_conversation_with_claims`` with a conversation
reference and the incoming token's claims saved by the engine (``save_conversation``) when the person
wrote. Nothing depends on an open request, so an answer produced after an approval, even after a
restart, still arrives in the original chat or channel reply chain.

While the agent works in a thread, one proactive turn is held open for it (:class:`LiveTurn`): the SDK's
``TypingIndicator`` runs in it, and answers stream through the SDK's ``StreamingResponse`` (an
informative update, the text as it grows, then the final message with the AI-generated label). Teams
streams in personal chats; elsewhere the SDK falls back to sending the final message once.

``tell_user``: Teams has no ephemeral messages in channels. When the person has a personal chat with
the bot (its reference is stored whenever they write there), the text goes there privately;
otherwise it is posted in the thread, mentioning nobody. (Refusals of card clicks do not come here:
they are shown only to the clicker, in the invoke response.)
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from microsoft_agents.activity import Activity, ActivityTypes, Attachment, ConversationReference
from microsoft_agents.hosting.core import ChannelServiceAdapter, ClaimsIdentity, TurnContext
from microsoft_agents.hosting.core.app.proactive import Conversation
from microsoft_agents.hosting.core.app.streaming import StreamingResponse
from microsoft_agents.hosting.core.app.typing_indicator import TypingIndicator, TypingOptions

from adapters.teams.cards import (
    CARD_CONTENT_TYPE,
    card_summary,
    refresh_users,
    review_request_card,
    shared_card,
    stop_card,
)
from adapters.teams.handler import PLATFORM, personal_key
from adapters.teams.hosts import may_stream, may_type, uses_user_views
from adapters.teams.names import display_names, with_names
from adapters.teams.questions import question_card
from adapters.teams.store import ConversationStore
from adapters.teams.text import markdown_message, plain_message
from bot.engine.model import ApprovalView, Mention, Note, QuestionView, ThreadRef, ToolStep
from bot.engine.presentation import tool_step_line
from bot.engine.streaming import WAITING_FOR_APPROVAL, StreamRateLimited
from bot.engine.surface import Surface
from bot.metrics import NullObserver, Observer

logger = logging.getLogger(__name__)

T = TypeVar("T")
TYPING_INTERVAL_SECONDS = 3.0
"""Teams shows a typing indicator for a few seconds; repeat it while the agent works."""
INFORMATIVE_UPDATE = "Writing the answer…"


def _retry_after(headers: Any) -> float:
    try:
        return float((headers or {}).get("Retry-After", 1))
    except (TypeError, ValueError):
        return 1.0


class WholeTextStream(StreamingResponse):
    """The SDK's ``StreamingResponse``, whose text is set whole rather than appended.

    Teams gets the whole text in every streaming update anyway; setting it whole lets the safe rendering
    of the answer change as it grows (a Markdown link is shown with its target only once it is complete).
    """

    def show(self, text: str) -> None:
        """Make ``text`` the streamed message (sent at the SDK's pace)."""
        self._message = ""  # the SDK keeps the text so far here (pinned SDK version: 1.9)
        self.queue_text_chunk(text)


@dataclass
class LiveTurn:
    """A proactive turn held open while the agent works in one thread."""

    context: TurnContext | None = None
    release: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[Any] | None = None
    typing: TypingIndicator | None = None
    streams: dict[str, WholeTextStream] = field(default_factory=dict)


class ConversationUnknown(LookupError):
    """No conversation reference is stored for a thread: the bot cannot post there."""


def conversation_record(identity: ClaimsIdentity | None, activity: Activity) -> dict[str, Any]:
    """What to store to reach this conversation later: the SDK's own proactive ``Conversation`` record.

    It keeps the reference (service URL, conversation, bot, user, the message's id) and the token
    claims that pick the outgoing credentials (``aud``, ``appid``, ``iss``, ...; none when anonymous).
    """
    return Conversation(identity or {}, activity.get_conversation_reference()).store_item_to_json()


def channel_record(record: dict[str, Any], channel: str) -> dict[str, Any]:
    """A conversation record (:func:`conversation_record`) that posts at the top level of ``channel`` instead of in
    the reply chain it was stored from: how the bot posts to a channel (e.g. ``COUNTERSIGN_BREAKGLASS_CHANNEL``)."""
    reference = dict(record.get("conversation_reference") or {})
    reference.pop("activityId", None)
    reference.pop("activity_id", None)
    reference["conversation"] = {**(reference.get("conversation") or {}), "id": channel}
    return {**record, "conversation_reference": reference}


def _card(card: dict[str, Any]) -> Activity:
    return Activity(type=ActivityTypes.message, attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=card)])


def card_activity(
    approvals: Sequence[ApprovalView], user_views: bool = True, refresh_for: Sequence[str] | None = None
) -> Activity:
    """A message activity carrying the approval card of one step; its summary follows the step's state
    (``refresh_for`` as :func:`~adapters.teams.cards.shared_card`)."""
    card = shared_card(approvals, user_views=user_views, refresh_for=refresh_for)
    return Activity(
        type=ActivityTypes.message,
        attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=card)],
        summary=card_summary(approvals),
    )


def api_error_kind(error: BaseException) -> str:
    """The metrics ``kind`` of a failed connector call: by its HTTP status when it carries one."""
    if isinstance(error, aiohttp.ClientConnectionError | TimeoutError):
        return "connection"
    status = next(
        (getattr(error, name) for name in ("status", "status_code") if isinstance(getattr(error, name, None), int)),
        None,
    )
    if status == 429:
        return "rate_limited"
    if status is not None and status >= 500:
        return "server_error"
    return "api_error"


class TeamsSurface(Surface):
    """The engine's output side for Teams (see the module docstring)."""

    def __init__(
        self,
        adapter: ChannelServiceAdapter,
        store: ConversationStore,
        typing_interval: float = TYPING_INTERVAL_SECONDS,
        observer: Observer | None = None,
        user_views: str = "auto",
    ) -> None:
        self._adapter = adapter
        self._user_views = user_views
        self._store = store
        self._observer: Observer = observer or NullObserver()
        self._typing_interval = typing_interval
        self._live: dict[str, LiveTurn] = {}

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
        # Replies then go to the person's message: in a channel that is its reply chain. A reference without one
        # (a channel's top level, :func:`channel_record`) sends a new message to the conversation instead.
        continuation.id = reference.activity_id or None
        outcome: list[T] = []
        failure: list[BaseException] = []

        async def callback(context: TurnContext) -> None:
            # The adapter would swallow errors into on_turn_error; the engine must see them.
            try:
                outcome.append(await act(context))
            except Exception as exc:  # noqa: BLE001 - re-raised below, outside the SDK pipeline
                failure.append(exc)

        claims = Conversation.identity_from_claims(conversation.claims)
        try:
            await self._adapter.continue_conversation_with_claims(claims, continuation, callback)
        except Exception as exc:
            self._observer.platform_api_error(PLATFORM, api_error_kind(exc))
            raise
        if failure:
            self._observer.platform_api_error(PLATFORM, api_error_kind(failure[0]))
            raise failure[0]
        return outcome[0]

    async def _views_in(self, key: str) -> bool:
        """Whether cards in ``key``'s conversation rely on user-specific views (``COUNTERSIGN_TEAMS_USER_VIEWS``)."""
        return uses_user_views(self._user_views, await self._store.load_conversation(key))

    async def _send(self, key: str, activity: Activity) -> str | None:
        async def send(context: TurnContext) -> str | None:
            response = await context.send_activity(activity)
            return response.id if response else None

        return await self._continue(key, send)

    async def post_reply(self, thread: ThreadRef, text: str | Note) -> None:
        """Post the agent's answer as safe Markdown (links shown with their target, no mentions); a
        :class:`Note` as plain text, its people by their display names."""
        self._stop_typing(thread.key)
        if isinstance(text, Note) and text.review:  # issue 31: a break-glass review request, with its buttons
            await self._send(thread.key, _card(review_request_card(await self._note_text(text), text.review)))
            return
        shown = plain_message(await self._note_text(text)) if isinstance(text, Note) else markdown_message(text)
        message = Activity(type=ActivityTypes.message, text=shown, text_format="markdown")
        await self._send(thread.key, message)

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        """Post the step's approval card; the reference is the conversation key and the card's activity id."""
        self._stop_typing(thread.key)
        shown = await with_names(self._store, approvals)
        activity = card_activity(shown, await self._views_in(thread.key), refresh_users(approvals))
        activity_id = await self._send(thread.key, activity)
        return {"conversation": thread.key, "activity_id": activity_id}

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Replace the posted card for everyone (``PUT`` of the stored activity id to the connector)."""
        activity_id = message_ref.get("activity_id")
        if not activity_id:
            logger.warning("approval card has no activity id; cannot update it", extra={"thread_key": thread.key})
            return
        key = message_ref.get("conversation") or thread.key
        named = await with_names(self._store, approvals)
        updated = card_activity(named, await self._views_in(key), refresh_users(approvals))
        updated.id = activity_id

        async def update(context: TurnContext) -> None:
            await context.update_activity(updated)

        await self._continue(key, update)

    async def ask_question(self, thread: ThreadRef, question: QuestionView) -> dict[str, Any] | None:
        """Post a tool's question as a card with inputs; the reference is the conversation key and activity id."""
        self._stop_typing(thread.key)
        card = question_card(question, names=await display_names(self._store, [question.requester]))
        activity = Activity(
            type=ActivityTypes.message,
            attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=card)],
            summary=f"{question.source} asks a question",
        )
        return {"conversation": thread.key, "activity_id": await self._send(thread.key, activity)}

    async def update_question(self, thread: ThreadRef, ref: dict[str, Any], question: QuestionView) -> None:
        """Replace the question's card for everyone with its outcome (``PUT`` of the stored activity id)."""
        activity_id = ref.get("activity_id")
        if not activity_id:
            return
        names = await display_names(self._store, [question.requester, question.answered_by])
        updated = Activity(
            type=ActivityTypes.message,
            attachments=[Attachment(content_type=CARD_CONTENT_TYPE, content=question_card(question, names=names))],
        )
        updated.id = activity_id

        async def update(context: TurnContext) -> None:
            await context.update_activity(updated)

        await self._continue(ref.get("conversation") or thread.key, update)

    async def tell_user(self, thread: ThreadRef, user: str, text: str | Note) -> None:
        """Tell one person something: in their personal chat with the bot if known, else in the thread."""
        shown = plain_message(await self._note_text(text) if isinstance(text, Note) else text)
        message = Activity(type=ActivityTypes.message, text=shown, text_format="markdown")
        private = personal_key(thread.workspace, user)
        if await self._store.load_conversation(private) is not None:
            await self._send(private, message)
            return
        await self._send(thread.key, message)

    async def _note_text(self, note: Note) -> str:
        """``note`` as plain text, people by their remembered display names (ids where unknown)."""
        names = await display_names(self._store, [p.entry for p in note.parts if isinstance(p, Mention)])
        return note.plain(lambda person: names.get(person, person))

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
        """The SDK's typing indicator while the bot works (or stop it)."""
        await self.set_status(thread, "thinking…" if working else None, message_id)

    async def set_status(self, thread: ThreadRef, status: str | None, message_id: str | None = None) -> None:
        """Teams has no status line: typing while the agent works; nothing once it waits for an approval."""
        if status is None or status == WAITING_FOR_APPROVAL:
            await self._close_live(thread.key)
            return
        if not may_type(await self._store.load_conversation(thread.key)):
            return  # no typing in a channel's reply chain (see adapters.teams.hosts)
        try:
            live = await self._live_turn(thread.key)
        except Exception:  # cosmetic: never let a typing indicator fail the run
            logger.warning("typing indicator failed", extra={"thread_key": thread.key}, exc_info=True)
            return
        if live.streams:
            return  # an answer is streaming: that shows the bot at work
        self._stop_typing(thread.key)
        assert live.context is not None
        live.typing = TypingIndicator(
            live.context, interval_seconds=self._typing_interval, typing_options=TypingOptions(initial_delay_ms=0)
        )
        live.typing.start()

    async def start_stream(self, thread: ThreadRef, requester: str, run_id: str) -> dict[str, Any] | None:
        """Start the SDK's streaming response: an informative update, with the AI-generated label.

        Only in a personal chat (Teams refuses streams elsewhere): ``None`` there, and the engine posts
        the answer once, when it is complete, while typing shows the bot at work.
        """
        if not may_stream(await self._store.load_conversation(thread.key)):
            return None
        live = await self._live_turn(thread.key)
        self._stop_typing(thread.key)
        assert live.context is not None
        response = WholeTextStream(live.context)
        response.set_generated_by_ai_label(True)
        response.queue_informative_update(INFORMATIVE_UPDATE)
        stream_id = uuid.uuid4().hex
        live.streams[stream_id] = response
        try:  # a card with Stop beside the answer (a streamed message cannot carry buttons while it grows)
            stop_id = await self._send(thread.key, _card(stop_card(run_id)))
        except Exception:
            logger.warning("stop card not posted", extra={"thread_key": thread.key}, exc_info=True)
            stop_id = None
        return {"stream": stream_id, "run_id": run_id, "stop_card": stop_id}

    async def append_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """The answer so far, as safe Markdown (sent at the SDK's own pace; its errors end the stream)."""
        response = self._response(thread, stream)
        response.show(markdown_message(text))
        try:
            await response.wait_for_queue()
        except aiohttp.ClientResponseError as exc:
            if exc.status != 429:
                raise
            raise StreamRateLimited(_retry_after(exc.headers)) from exc

    async def finish_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """The final message: the whole answer (the SDK sends it once where Teams cannot stream)."""
        response = self._response(thread, stream)
        live = self._live.get(thread.key)
        if live is not None:
            live.streams.pop(stream["stream"], None)
        response.show(markdown_message(text))
        await response.end_stream()
        if stream.get("stop_card"):
            await self._retire_stop_card(thread, stream["stop_card"])

    async def _retire_stop_card(self, thread: ThreadRef, activity_id: str) -> None:
        """The answer is complete: its Stop card says "Done." (cosmetic; a failure is only logged)."""
        done = _card(stop_card(None))
        done.id = activity_id

        async def update(context: TurnContext) -> None:
            await context.update_activity(done)

        try:
            await self._continue(thread.key, update)
        except Exception:
            logger.warning("stop card not updated", extra={"thread_key": thread.key}, exc_info=True)

    async def show_tool_step(self, thread: ThreadRef, step: ToolStep) -> None:
        """A call that ran without approval, as one small line (masked and shortened like approvals)."""
        line = plain_message(tool_step_line(step))
        await self._send(thread.key, Activity(type=ActivityTypes.message, text=f"_{line}_", text_format="markdown"))

    def _response(self, thread: ThreadRef, stream: dict[str, Any]) -> WholeTextStream:
        live = self._live.get(thread.key)
        response = live.streams.get(stream.get("stream", "")) if live is not None else None
        if response is None:
            raise LookupError("this answer's stream is no longer open")
        return response

    async def _live_turn(self, key: str) -> LiveTurn:
        """The open turn of ``key``'s thread, opening one (held until :meth:`_close_live`) if needed."""
        live = self._live.get(key)
        if live is not None and live.task is not None and not live.task.done():
            return live
        live = LiveTurn()
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def hold(context: TurnContext) -> None:
            live.context = context
            opened.set_result(None)
            await live.release.wait()

        live.task = asyncio.create_task(self._continue(key, hold), name=f"teams-turn:{key}")
        await asyncio.wait({opened, live.task}, return_when=asyncio.FIRST_COMPLETED)
        if not opened.done():
            live.task.result()  # the turn could not be opened: raise why
        self._live[key] = live
        return live

    async def _close_live(self, key: str) -> None:
        live = self._live.pop(key, None)
        if live is None:
            return
        if live.typing is not None:
            await live.typing.__aexit__(None, None, None)  # stops it and waits for a send in flight
        for response in live.streams.values():  # never leave a stream open: end it with what it has
            try:
                await response.end_stream()
            except Exception:
                logger.warning("could not end a stream", extra={"thread_key": key}, exc_info=True)
        live.release.set()
        if live.task is not None:
            await asyncio.gather(live.task, return_exceptions=True)

    @property
    def working_in(self) -> list[str]:
        """The thread keys where a turn is held open (the agent works there)."""
        return sorted(self._live)

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """One typing indicator: the message was received and waits for the current answer."""
        if not may_type(await self._store.load_conversation(thread.key)):
            return
        try:
            await self._send_typing(thread.key)
        except Exception:  # cosmetic: the message is queued either way
            logger.warning("typing indicator failed", extra={"thread_key": thread.key}, exc_info=True)

    async def _send_typing(self, key: str) -> None:
        await self._send(key, Activity(type=ActivityTypes.typing))

    def _stop_typing(self, key: str) -> None:
        live = self._live.get(key)
        if live is not None and live.typing is not None:
            live.typing.stop()
            live.typing = None

    async def close(self) -> None:
        """Stop every typing indicator and release every held turn."""
        for key in list(self._live):
            await self._close_live(key)
