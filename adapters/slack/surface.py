"""``SlackSurface``: the engine's output through the Slack Web API (``AsyncWebClient``).

Threads: a :class:`~bot.engine.model.ThreadRef`'s ``thread`` is the Slack thread ts, except for the
top level of a direct message, which is one conversation, marked :data:`DIRECT_THREAD` (answers there
are posted unthreaded).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.blocks import approval_message
from adapters.slack.mrkdwn import MESSAGE_TEXT_LIMIT, escape_truncated, markdown_to_mrkdwn, split_message
from bot.engine.model import ApprovalView, ThreadRef
from bot.redaction import mask_text

logger = logging.getLogger(__name__)

DIRECT_THREAD = "dm"
"""The ``thread`` of a direct message's top level: the whole DM is one conversation."""
WORKING_REACTION = "eyes"
SLACK_API_URL = "https://slack.com/api/"


def web_client(token: str | None, api_url: str | None = None) -> AsyncWebClient:
    """The Web API client, optionally pointed elsewhere (``COUNTERSIGN_SLACK_API_URL``)."""
    client = AsyncWebClient(token=token)
    configure_web_client(client, api_url)
    return client


def retry_handlers() -> list[AsyncRetryHandler]:
    """slack_sdk's own retries: connection errors, rate limits (honouring ``Retry-After``), 500 and 503."""
    return [
        AsyncConnectionErrorRetryHandler(),
        AsyncRateLimitErrorRetryHandler(max_retry_count=2),
        AsyncServerErrorRetryHandler(max_retry_count=2),
    ]


def configure_web_client(client: AsyncWebClient, api_url: str | None = None) -> None:
    """Point ``client`` at ``api_url`` (default: Slack's own) and give it :func:`retry_handlers`.

    Bolt builds its own client from the token; this adjusts that one, so Bolt and the surface share it.
    """
    base_url = api_url or SLACK_API_URL
    client.base_url = base_url if base_url.endswith("/") else base_url + "/"
    client.retry_handlers = retry_handlers()


def thread_ts(thread: ThreadRef) -> str | None:
    """The ``thread_ts`` to post into, or ``None`` for the top level of a direct message."""
    return None if thread.thread == DIRECT_THREAD else thread.thread


QUEUED_STATUS = "has your message and will answer it after the current one…"
"""Slack shows status lines after the app's name: "countersign has your message and …"."""


class SlackSurface:
    """Posts answers, approval messages, ephemeral notes, reactions, modals and the App Home."""

    def __init__(self, client: AsyncWebClient, working_reaction: str = WORKING_REACTION) -> None:
        self.client = client
        self.working_reaction = working_reaction
        self.home_builder: Callable[[str, str], Awaitable[dict[str, Any]]] | None = None
        """Builds one person's App Home view (user, workspace); set by the plugin."""

    async def post_reply(self, thread: ThreadRef, text: str) -> None:
        """Post model text as mrkdwn (escaped, links shown with their address, secrets masked) in as many
        messages as needed."""
        for chunk in split_message(markdown_to_mrkdwn(mask_text(text))):
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
            channel=thread.channel, thread_ts=thread_ts(thread), text=message.text, blocks=message.blocks
        )
        return {"channel": response["channel"], "ts": response["ts"]}

    async def update_approvals(
        self, thread: ThreadRef, message_ref: dict[str, Any], approvals: Sequence[ApprovalView]
    ) -> None:
        """Re-render the approval message with ``chat.update`` (``response_url`` expires; channel + ts do not)."""
        message = approval_message(approvals)
        try:
            await self.client.chat_update(
                channel=message_ref["channel"], ts=message_ref["ts"], text=message.text, blocks=message.blocks
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

    async def tell_user(self, thread: ThreadRef, user: str, text: str) -> None:
        """An ephemeral message only ``user`` sees, in the thread."""
        await self.client.chat_postEphemeral(
            channel=thread.channel,
            user=user,
            thread_ts=thread_ts(thread),
            text=escape_truncated(mask_text(text), MESSAGE_TEXT_LIMIT),
        )

    async def show_working(self, thread: ThreadRef, working: bool, message_id: str | None = None) -> None:
        """Add (or remove) a reaction on the message being worked on; nothing without a message id."""
        if not message_id:
            return
        try:
            if working:
                await self.client.reactions_add(
                    channel=thread.channel, timestamp=message_id, name=self.working_reaction
                )
            else:
                await self.client.reactions_remove(
                    channel=thread.channel, timestamp=message_id, name=self.working_reaction
                )
        except SlackApiError as exc:  # already_reacted / no_reaction: cosmetic only
            logger.info("working reaction not changed", extra={"error": exc.response.get("error")})

    async def show_queued(self, thread: ThreadRef, message_id: str | None = None) -> None:
        """Say on the thread's status line that the message waits for the current run; nothing if Slack refuses."""
        ts = thread_ts(thread)
        if ts is None:
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=thread.channel, thread_ts=ts, status=QUEUED_STATUS
            )
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
        """Re-publish the App Home of each of ``users`` (their list of approvals changed)."""
        if self.home_builder is None:
            return
        for user in users:
            await self.publish_home(user, await self.home_builder(user, workspace))

    async def publish_home(self, user: str, view: dict[str, Any]) -> None:
        """Show ``view`` as ``user``'s App Home tab."""
        await self.client.views_publish(user_id=user, view=view)
