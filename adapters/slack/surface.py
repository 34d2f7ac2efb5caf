"""``SlackSurface``: the engine's output through the Slack Web API (``AsyncWebClient``).

Threads: a :class:`~bot.engine.model.ThreadRef`'s ``thread`` is the Slack thread ts, except for the
top level of a direct message, which is one conversation, marked :data:`DIRECT_THREAD` (answers there
are posted unthreaded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.blocks import (
    approval_message,
    review_request,
    stop_offer_blocks,
    streaming_blocks,
    tool_step_blocks,
)
from adapters.slack.mrkdwn import (
    MESSAGE_TEXT_LIMIT,
    escape,
    escape_truncated,
    markdown_to_mrkdwn,
    note_markup,
    split_message,
)
from adapters.slack.questions import question_message
from bot import jsonio
from bot.engine.model import ApprovalView, Note, QuestionView, ThreadRef, ToolStep
from bot.engine.presentation import tool_step_line
from bot.engine.streaming import StreamRateLimited, masked_growth
from bot.engine.surface import Surface
from bot.metrics import Observer
from bot.redaction import mask_text

logger = logging.getLogger(__name__)

DIRECT_THREAD = "dm"
"""The ``thread`` of a direct message's top level: the whole DM is one conversation."""
SLACK_API_URL = "https://slack.com/api/"


def web_client(token: str | None, api_url: str | None = None) -> AsyncWebClient:
    """The Web API client, optionally pointed elsewhere (``COUNTERSIGN_SLACK_API_URL``)."""
    client = AsyncWebClient(token=token)
    configure_web_client(client, api_url)
    return client


class ObservingHandler(AsyncRetryHandler):
    """Sees every Web API answer first and reports errors to the engine's observer; never retries itself.

    slack_sdk hands each response (and each connection error) to its retry handlers in order, so this is
    the one place where every call's outcome passes, including the ones later retried.
    """

    def __init__(self, observer: Observer) -> None:
        super().__init__(max_retry_count=0)
        self.observer = observer

    async def can_retry_async(self, *, state: Any, request: Any, response: Any = None, error: Any = None) -> bool:
        """Report the outcome; always ``False`` (the handlers after this one retry)."""
        if error is not None:
            self.observer.platform_api_error("slack", "connection")
        elif response is not None:
            body = response.body if isinstance(response.body, dict) else {}
            if response.status_code == 429 or body.get("error") == "ratelimited":
                self.observer.platform_api_error("slack", "rate_limited")
            elif response.status_code >= 500:
                self.observer.platform_api_error("slack", "server_error")
            elif body.get("ok") is False:
                self.observer.platform_api_error("slack", "api_error")
        return False


def retry_handlers(observer: Observer | None = None) -> list[AsyncRetryHandler]:
    """slack_sdk's own retries: connection errors, rate limits (honouring ``Retry-After``), 500 and 503.

    With an ``observer``, every error is reported to it first (:class:`ObservingHandler`).
    """
    return [
        *([ObservingHandler(observer)] if observer is not None else []),
        AsyncConnectionErrorRetryHandler(),
        AsyncRateLimitErrorRetryHandler(max_retry_count=2),
        AsyncServerErrorRetryHandler(max_retry_count=2),
    ]


def configure_web_client(client: AsyncWebClient, api_url: str | None = None, observer: Observer | None = None) -> None:
    """Point ``client`` at ``api_url`` (default: Slack's own) and give it :func:`retry_handlers` (observed).

    Bolt builds its own client from the token; this adjusts that one, so Bolt and the surface share it.
    """
    base_url = api_url or SLACK_API_URL
    client.base_url = base_url if base_url.endswith("/") else base_url + "/"
    client.retry_handlers = retry_handlers(observer)


def share_session(client: AsyncWebClient) -> aiohttp.ClientSession:
    """Give ``client`` one aiohttp session for all its calls (and Bolt's per-request copies, which take it over).

    Without one, slack_sdk opens a session and a new connection for every call and closes them after it:
    under a burst that connect (and, against Slack, the TLS handshake) was the largest cost of a
    conversation. The session keeps connections alive between calls, and encodes JSON bodies with
    :func:`bot.jsonio.dumps` (orjson) rather than :mod:`json`; its owner closes it at shutdown. It sets no
    cap on concurrent calls (aiohttp's default is 100), as before: under a burst, calls that acks wait for
    (Bolt's first ``auth.test``) must not queue behind hundreds of status lines.
    """
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=client.timeout),
        json_serialize=jsonio.dumps,
    )
    client.session = session
    return session


@contextlib.asynccontextmanager
async def _rate_limits() -> AsyncIterator[None]:
    """A 429 that slack_sdk's own retries could not get past becomes :class:`StreamRateLimited` (Retry-After)."""
    try:
        yield
    except SlackApiError as exc:
        if exc.response.status_code != 429:
            raise
        headers = {k.lower(): v for k, v in (exc.response.headers or {}).items()}
        try:
            retry_after = float(headers.get("retry-after", 1))
        except (TypeError, ValueError):
            retry_after = 1.0
        raise StreamRateLimited(retry_after) from exc


def thread_ts(thread: ThreadRef) -> str | None:
    """The ``thread_ts`` to post into, or ``None`` for the top level of a direct message or, for an empty thread
    (a post to a channel such as ``COUNTERSIGN_BREAKGLASS_CHANNEL``), of the channel."""
    return None if thread.thread in (DIRECT_THREAD, "") else thread.thread


QUEUED_STATUS = "has your message and will answer it after the current one…"
"""Slack shows status lines after the app's name: "countersign has your message and …"."""
STREAM_TEXT_LIMIT = 11_500
"""Characters one streamed message may hold (Slack: 12,000 of markdown); a longer answer is posted whole."""
MARKDOWN_TEXT_LIMIT = 12_000
"""Slack's cap on the ``markdown_text`` of one streamed message, counted after escaping (``&`` → ``&amp;``)."""
STATUS_REFRESH_SECONDS = 100.0
"""``assistant.threads.setStatus`` clears itself after 2 minutes: a status still meant is sent again before."""
NATIVE, UPDATE = "stream", "update"
"""How an answer streams: Slack's chat.startStream/appendStream/stopStream, or one message updated in place."""


class StreamTooLong(ValueError):
    """The answer outgrew one streamed message: the engine posts it whole (in as many messages as needed)."""


def _count_markdown(stream: dict[str, Any], markdown: str) -> None:
    """Add ``markdown`` to what the stream has sent; :class:`StreamTooLong` past Slack's 12,000 characters."""
    sent = int(stream.get("markdown_sent", 0)) + len(markdown)
    if sent > MARKDOWN_TEXT_LIMIT:
        raise StreamTooLong(f"{sent} characters of markdown_text")
    stream["markdown_sent"] = sent


class SlackSurface(Surface):
    """Posts answers (streamed where it can), approval messages, ephemeral notes, the status line, modals
    and the App Home."""

    def __init__(self, client: AsyncWebClient, status_refresh_seconds: float = STATUS_REFRESH_SECONDS) -> None:
        self.client = client
        self._status_refresh_seconds = status_refresh_seconds
        self._status_refreshers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.home_builder: Callable[[str, str], Awaitable[dict[str, Any]]] | None = None
        """Builds one person's App Home view (user, workspace); set by the plugin."""
        self._homes_queued: dict[tuple[str, str], asyncio.Task[None]] = {}
        """Per (workspace, user): the App Home publish not begun yet, which later changes join."""
        self._homes_latest: dict[tuple[str, str], asyncio.Task[None]] = {}
        """Per (workspace, user): the last App Home publish scheduled; the next one starts after it."""
        self._home_tasks: set[asyncio.Task[None]] = set()

    async def post_reply(self, thread: ThreadRef, text: str | Note) -> None:
        """Post model text as mrkdwn (escaped, links shown with their address, secrets masked) in as many
        messages as needed; a :class:`Note` with its people as real mentions."""
        if isinstance(text, Note) and text.review:  # issue 31: a break-glass review request, with its buttons
            markup = note_markup(text)
            await self.client.chat_postMessage(
                channel=thread.channel,
                thread_ts=thread_ts(thread),
                text=markup,
                attachments=review_request(markup, text.review),
                link_names=False,
                unfurl_links=False,
                unfurl_media=False,
            )
            return
        chunks = [note_markup(text)] if isinstance(text, Note) else split_message(markdown_to_mrkdwn(mask_text(text)))
        for chunk in chunks:
            if not chunk.strip():
                continue
            await self.client.chat_postMessage(
                channel=thread.channel,
                thread_ts=thread_ts(thread),
                text=chunk,
                # Belt and braces on top of escaping: no "@channel" linking, no previews of model links.
                link_names=False,
                unfurl_links=False,
                unfurl_media=False,
            )

    async def render_approvals(self, thread: ThreadRef, approvals: Sequence[ApprovalView]) -> dict[str, Any]:
        """Post the approval message in the thread; its ``{"channel", "ts"}`` is the message reference."""
        message = approval_message(approvals)
        response = await self.client.chat_postMessage(
            channel=thread.channel,
            thread_ts=thread_ts(thread),
            text=message.text,
            blocks=message.blocks,
            attachments=message.attachments,
        )
        return {"channel": response["channel"], "ts": response["ts"]}

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Re-render the approval message with ``chat.update`` (``response_url`` expires; channel + ts do not)."""
        message = approval_message(approvals)
        try:
            await self.client.chat_update(
                channel=message_ref["channel"],
                ts=message_ref["ts"],
                text=message.text,
                blocks=message.blocks,
                attachments=message.attachments,
            )
        except SlackClientError as exc:  # after slack_sdk's retries: the decision stands, the card is stale
            error = exc.response.get("error") if isinstance(exc, SlackApiError) else type(exc).__name__
            ids = ", ".join(a.approval_id for a in approvals)
            logger.error(
                "approval message not updated (approvals %s): %s",
                ids,
                error,
                extra={"approvals": [a.approval_id for a in approvals], "error": error},
            )

    async def ask_question(self, thread: ThreadRef, question: QuestionView) -> dict[str, Any] | None:
        """Post a tool's question in the thread (Answer opens the form; Decline); its ``{"channel", "ts"}``."""
        blocks, text = question_message(question)
        response = await self.client.chat_postMessage(
            channel=thread.channel, thread_ts=thread_ts(thread), text=text, blocks=blocks
        )
        return {"channel": response["channel"], "ts": response["ts"]}

    async def update_question(self, thread: ThreadRef, ref: dict[str, Any], question: QuestionView) -> None:
        """Show the question's outcome in place of its buttons."""
        blocks, text = question_message(question)
        await self.client.chat_update(channel=ref["channel"], ts=ref["ts"], text=text, blocks=blocks)

    async def tell_user(self, thread: ThreadRef, user: str, text: str | Note) -> None:
        """An ephemeral message only ``user`` sees, in the thread (a :class:`Note`'s people as real mentions)."""
        await self.client.chat_postEphemeral(
            channel=thread.channel,
            user=user,
            thread_ts=thread_ts(thread),
            text=note_markup(text) if isinstance(text, Note) else escape_truncated(mask_text(text), MESSAGE_TEXT_LIMIT),
        )

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        """The status line says the bot is thinking (or is cleared)."""
        await self.set_status(thread, "thinking…" if working else None, message_id)

    async def set_status(self, thread: ThreadRef, status: str | None, message_id: str | None = None) -> None:
        """``assistant.threads.setStatus`` under the thread ("countersign is running get_time…"); ``None`` clears.

        At the top of a direct message the status goes under the message being answered.
        """
        ts = thread_ts(thread) or message_id
        if ts is None:
            return
        shown = f"is {status}" if status else ""
        refresher = self._status_refreshers.pop((thread.channel, ts), None)
        if refresher is not None:
            refresher.cancel()
        await self._send_status(thread.channel, ts, shown)
        if shown:  # Slack clears a status after 2 minutes; an approval can wait far longer
            task = asyncio.create_task(self._refresh_status(thread.channel, ts, shown))
            self._status_refreshers[(thread.channel, ts)] = task

    async def _send_status(self, channel: str, ts: str, shown: str) -> None:
        try:
            await self.client.assistant_threads_setStatus(channel_id=channel, thread_ts=ts, status=shown)
        except SlackApiError as exc:  # cosmetic: the run goes on
            logger.info("status line not set", extra={"error": exc.response.get("error")})

    async def _refresh_status(self, channel: str, ts: str, shown: str) -> None:
        """Send ``shown`` again every ``status_refresh_seconds`` until the status changes or is cleared."""
        while True:
            await asyncio.sleep(self._status_refresh_seconds)
            try:
                await self._send_status(channel, ts, shown)
            except Exception:  # cosmetic: a broken connection must not end in an unretrieved task error
                logger.info("status line not refreshed", exc_info=True)

    async def close(self) -> None:
        """Stop refreshing status lines and publishing App Homes."""
        for task in self._status_refreshers.values():
            task.cancel()
        await asyncio.gather(*self._status_refreshers.values(), return_exceptions=True)
        self._status_refreshers.clear()
        homes = list(self._home_tasks)
        for task in homes:
            task.cancel()
        await asyncio.gather(*homes, return_exceptions=True)

    async def start_stream(self, thread: ThreadRef, requester: str, run_id: str) -> dict[str, Any] | None:
        """Open the message an answer streams into: Slack's own stream in a thread (with a private Stop
        button for the requester), else one message with a Stop button that is updated in place."""
        ts = thread_ts(thread)
        if ts is not None:
            try:
                response = await self.client.chat_startStream(
                    channel=thread.channel,
                    thread_ts=ts,
                    recipient_user_id=requester,
                    recipient_team_id=thread.workspace,
                )
            except SlackApiError as exc:  # not available to this app or workspace: post and update instead
                logger.info(
                    "streaming unavailable; updating a message instead", extra={"error": exc.response.get("error")}
                )
            else:
                await self._offer_stop(thread, requester, run_id)
                return {"mode": NATIVE, "channel": response.get("channel") or thread.channel, "ts": response["ts"]}
        response = await self.client.chat_postMessage(
            channel=thread.channel,
            thread_ts=ts,
            text="…",
            blocks=streaming_blocks("…", run_id),
            link_names=False,
            unfurl_links=False,
            unfurl_media=False,
        )
        return {"mode": UPDATE, "channel": response["channel"], "ts": response["ts"], "run_id": run_id}

    async def append_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """Show the answer so far: append to Slack's stream, or update the message (429 → ``StreamRateLimited``)."""
        if len(text) > STREAM_TEXT_LIMIT:
            raise StreamTooLong(f"{len(text)} characters")
        async with _rate_limits():
            if stream["mode"] == NATIVE:
                markdown = escape(masked_growth(text, shown))
                _count_markdown(stream, markdown)
                if markdown:
                    await self.client.chat_appendStream(
                        channel=stream["channel"], ts=stream["ts"], markdown_text=markdown
                    )
                return
            mrkdwn = markdown_to_mrkdwn(mask_text(text))
            await self.client.chat_update(
                channel=stream["channel"],
                ts=stream["ts"],
                text=mrkdwn,
                blocks=streaming_blocks(mrkdwn, stream.get("run_id")),
            )

    async def finish_stream(self, thread: ThreadRef, stream: dict[str, Any], text: str, shown: int) -> None:
        """End the stream showing the whole answer (its Stop button goes away); raises if it cannot."""
        if len(text) > STREAM_TEXT_LIMIT:
            raise StreamTooLong(f"{len(text)} characters")
        async with _rate_limits():
            if stream["mode"] == NATIVE:
                markdown = escape(masked_growth(text, shown))
                _count_markdown(stream, markdown)
                await self.client.chat_stopStream(
                    channel=stream["channel"], ts=stream["ts"], markdown_text=markdown or None
                )
                return
            mrkdwn = markdown_to_mrkdwn(mask_text(text))
            await self.client.chat_update(
                channel=stream["channel"], ts=stream["ts"], text=mrkdwn, blocks=streaming_blocks(mrkdwn, None)
            )

    async def show_tool_step(self, thread: ThreadRef, step: ToolStep) -> None:
        """A call that ran without approval, as one context line in the thread."""
        line = tool_step_line(step)
        await self.client.chat_postMessage(
            channel=thread.channel,
            thread_ts=thread_ts(thread),
            text=escape(line),
            blocks=tool_step_blocks(line),
            link_names=False,
            unfurl_links=False,
            unfurl_media=False,
        )

    async def _offer_stop(self, thread: ThreadRef, requester: str, run_id: str) -> None:
        try:
            await self.client.chat_postEphemeral(
                channel=thread.channel,
                user=requester,
                thread_ts=thread_ts(thread),
                text="I'm working on your request.",
                blocks=stop_offer_blocks(run_id),
            )
        except SlackApiError as exc:  # the answer streams all the same
            logger.info("stop button not offered", extra={"error": exc.response.get("error")})

    async def suggest_prompts(self, channel: str, thread_ts: str, prompts: Sequence[dict[str, str]]) -> None:
        """``assistant.threads.setSuggestedPrompts`` (at most 4); nothing if Slack refuses (cosmetic)."""
        try:
            await self.client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, prompts=list(prompts)[:4]
            )
        except SlackApiError as exc:
            logger.info("suggested prompts not set", extra={"error": exc.response.get("error")})

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """Say on the thread's status line that the message waits for the current run; nothing if Slack refuses."""
        ts = thread_ts(thread)
        if ts is None:
            return
        try:
            await self.client.assistant_threads_setStatus(channel_id=thread.channel, thread_ts=ts, status=QUEUED_STATUS)
        except SlackApiError as exc:  # cosmetic: the message is queued either way
            logger.info("status line not set", extra={"error": exc.response.get("error")})

    async def direct_thread(self, workspace: str, user: str) -> ThreadRef | None:
        """The DM with ``user`` (``conversations.open``; needs ``im:write``), at its top level."""
        response = await self.client.conversations_open(users=user)
        channel = response.get("channel")
        channel_id = channel.get("id") if isinstance(channel, dict) else None
        if not isinstance(channel_id, str) or not channel_id:
            return None
        return ThreadRef("slack", workspace, channel_id, DIRECT_THREAD)

    async def group_members(self, group_id: str) -> list[str]:
        """The members of a Slack user group (``usergroups.users.list``; needs ``usergroups:read``)."""
        response = await self.client.usergroups_users_list(usergroup=group_id)
        users = response.get("users")
        return [u for u in users if isinstance(u, str)] if isinstance(users, list) else []

    async def open_modal(self, trigger_id: str, view: dict[str, Any]) -> None:
        """Open a modal (the trigger id is valid for 3 seconds, once)."""
        await self.client.views_open(trigger_id=trigger_id, view=view)

    async def refresh_home(self, workspace: str, users: Sequence[str]) -> None:
        """Re-publish the App Home of each of ``users`` (their list of approvals changed).

        Returns once a publish that began after this call has shown each of them. Changes that arrive
        while a person's home is being published share one next publish (built then, so it shows them
        all): a burst of approvals costs each approver two publishes, not one per approval.
        """
        if self.home_builder is None:
            return
        for user in users:
            await asyncio.shield(self._next_home_refresh(workspace, user))

    def _next_home_refresh(self, workspace: str, user: str) -> asyncio.Task[None]:
        key = (workspace, user)
        queued = self._homes_queued.get(key)
        if queued is None:
            queued = asyncio.create_task(self._refresh_home_after(key, self._homes_latest.get(key)))
            self._homes_queued[key] = self._homes_latest[key] = queued
            self._home_tasks.add(queued)
            queued.add_done_callback(self._home_tasks.discard)
        return queued

    async def _refresh_home_after(self, key: tuple[str, str], previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # its outcome is its callers'
        this = asyncio.current_task()
        if self._homes_queued.get(key) is this:
            del self._homes_queued[key]  # from here on a change needs the next publish
        try:
            assert self.home_builder is not None
            workspace, user = key
            await self.publish_home(user, await self.home_builder(user, workspace))
        finally:
            if self._homes_latest.get(key) is this:
                del self._homes_latest[key]

    async def publish_home(self, user: str, view: dict[str, Any]) -> None:
        """Show ``view`` as ``user``'s App Home tab."""
        await self.client.views_publish(user_id=user, view=view)
